"""A Gemini-API request body in its one canonical spelling, read once (issue 30, point 3).

Google's JSON parser reads every field of its request messages under two names: the
lowerCamelCase JSON name (``candidateCount``) and the proto field's own snake_case name
(``candidate_count``), at every level (``generation_config.max_output_tokens`` too). A
gateway that reads one spelling and forwards the other has held for a body the provider does
not run: ``generationConfig.candidate_count: 8`` was held for one candidate and billed for
eight (attack N1). So before anything reads a Gemini body, :func:`canonical_gemini` rewrites
it with every field of a request message under its camelCase name, and:

- a field given under both names in one object is the client's 400 (Google would take one of
  them, and which one is not ours to guess);
- a field the gateway reads (or walks into) of the wrong JSON type is the client's 400 naming
  it: a ``generationConfig`` that is not an object, ``tools`` that is not an array of objects,
  a ``candidateCount`` that is not an integer (proto JSON also takes ``"8"`` as 8: refused,
  rather than read one way here and another there);
- the body goes upstream re-encoded from this form whenever the form differs from what the
  client sent (``changed``); otherwise its bytes pass as they came.

Only request *messages* are rewritten. Free-form values (``functionCall.args``,
``functionResponse.response``, ``parametersJsonSchema``, ``responseJsonSchema``, a Schema's
``properties`` names, ``example``, ``default``) are the client's data: their keys are never
touched. The walk follows the message types of ``GenerateContentRequest`` (and
``CountTokensRequest``); a field it does not know has its name canonicalised (Google would
read it so) and its value left alone.

Duplicate JSON keys (``{"a":1,"a":2}``) at any depth are refused earlier, by the parse
(:func:`gatewayd.formats.raw_json.duplicate_key`). Sans-I/O, pure.
"""

from __future__ import annotations

from typing import Any

from gatewayd.formats.errors import TranslationError

__all__ = ["canonical_gemini", "canonical_count_tokens", "camel"]

# What a field holds: a message type (walked), a list of one, a map of one, a scalar type to
# check, or FREE (the client's data, left alone).
FREE = "free"
INT = "int"
STR = "str"
STR_LIST = "str_list"


def camel(name: str) -> str:
    """The lowerCamelCase JSON name of a proto field name (``max_output_tokens`` ->
    ``maxOutputTokens``); a name without an underscore is returned as it is."""
    if "_" not in name:
        return name
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


# -- the message types, by their fields' canonical names ---------------------------------------

SCHEMA: dict[str, Any] = {}  # Schema is recursive: filled below
SCHEMA.update({
    "type": STR, "format": STR, "title": STR, "description": STR, "enum": STR_LIST, "required": STR_LIST,
    "propertyOrdering": STR_LIST, "properties": ("map", SCHEMA), "items": SCHEMA, "anyOf": ("list", SCHEMA),
    "example": FREE, "default": FREE,
})
BLOB = {"mimeType": STR, "data": STR}
FILE_DATA = {"mimeType": STR, "fileUri": STR}
FUNCTION_CALL = {"id": STR, "name": STR, "args": FREE}
FUNCTION_RESPONSE: dict[str, Any] = {"id": STR, "name": STR, "response": FREE}
PART: dict[str, Any] = {
    "text": STR, "inlineData": BLOB, "fileData": FILE_DATA, "functionCall": FUNCTION_CALL,
    "functionResponse": FUNCTION_RESPONSE, "executableCode": {"language": STR, "code": STR},
    "codeExecutionResult": {"outcome": STR, "output": STR}, "thoughtSignature": STR,
    "videoMetadata": {"startOffset": STR, "endOffset": STR}, "partMetadata": FREE,
}
FUNCTION_RESPONSE["parts"] = ("list", PART)
CONTENT = {"role": STR, "parts": ("list", PART)}
FUNCTION_DECLARATION = {
    "name": STR, "description": STR, "parameters": SCHEMA, "parametersJsonSchema": FREE, "response": SCHEMA,
    "responseJsonSchema": FREE,
}
TOOL = {
    "functionDeclarations": ("list", FUNCTION_DECLARATION),
    "googleSearch": {}, "googleSearchRetrieval": {"dynamicRetrievalConfig": {}}, "codeExecution": {},
    "urlContext": {}, "computerUse": {}, "fileSearch": {}, "googleMaps": {},
}
TOOL_CONFIG = {
    "functionCallingConfig": {"mode": STR, "allowedFunctionNames": STR_LIST},
    "retrievalConfig": {"latLng": {}},
}
GENERATION_CONFIG = {
    "stopSequences": STR_LIST, "responseMimeType": STR, "responseSchema": SCHEMA, "responseJsonSchema": FREE,
    "responseModalities": STR_LIST, "candidateCount": INT, "maxOutputTokens": INT, "seed": INT,
    "thinkingConfig": {"thinkingBudget": INT, "thinkingLevel": STR}, "speechConfig": {"voiceConfig": {}},
    "imageConfig": {}, "mediaResolution": STR,
}
REQUEST = {
    "model": STR, "contents": ("list", CONTENT), "systemInstruction": CONTENT, "tools": ("list", TOOL),
    "toolConfig": TOOL_CONFIG, "safetySettings": ("list", {"category": STR, "threshold": STR}),
    "generationConfig": GENERATION_CONFIG, "cachedContent": STR, "serviceTier": STR,
}
COUNT_TOKENS = {"contents": ("list", CONTENT), "generateContentRequest": REQUEST}

_TYPE_NAMES = {INT: "an integer", STR: "a string", STR_LIST: "an array of strings"}


def _check_scalar(kind: str, value: Any, at: str) -> None:
    if value is None:
        return
    if kind == INT:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == STR:
        ok = isinstance(value, str)
    else:  # STR_LIST
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    if not ok:
        raise TranslationError(f"{at} must be {_TYPE_NAMES[kind]}", at)


class _Walk:
    """One canonicalisation: the rewritten document, and whether anything was renamed."""

    def __init__(self) -> None:
        self.changed = False

    def message(self, doc: Any, fields: dict[str, Any], at: str) -> Any:
        if doc is None:
            return None
        if not isinstance(doc, dict):
            raise TranslationError(f"{at} must be an object", at)
        out: dict[str, Any] = {}
        spelled: dict[str, str] = {}
        for key, value in doc.items():
            name = camel(key)
            if name in spelled:
                raise TranslationError(
                    f"{_join(at, name)} is given twice (as {spelled[name]!r} and {key!r}); send it once", _join(at, name))
            spelled[name] = key
            if name != key:
                self.changed = True
            out[name] = self.value(value, fields.get(name, FREE), _join(at, name))
        return out

    def value(self, value: Any, kind: Any, at: str) -> Any:
        if kind is FREE or value is None:
            return value
        if isinstance(kind, str):
            _check_scalar(kind, value, at)
            return value
        if isinstance(kind, tuple):
            shape, inner = kind
            if shape == "list":
                if not isinstance(value, list):
                    raise TranslationError(f"{at} must be an array", at)
                return [self.message(item, inner, f"{at}[{i}]") for i, item in enumerate(value)]
            if not isinstance(value, dict):  # a map of messages (a Schema's properties)
                raise TranslationError(f"{at} must be an object", at)
            return {name: self.message(item, inner, f"{at}.{name}") for name, item in value.items()}
        return self.message(value, kind, at)


def _join(at: str, name: str) -> str:
    return f"{at}.{name}" if at else name


def canonical_gemini(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A ``generateContent`` body with every request field under its camelCase name, checked
    (module doc), and whether it differs from ``body``. Raises :class:`TranslationError`
    naming the field (the client's 400)."""
    walk = _Walk()
    return walk.message(body, REQUEST, ""), walk.changed


def canonical_count_tokens(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The same for a ``countTokens`` body (``contents``, or a whole ``generateContentRequest``)."""
    walk = _Walk()
    return walk.message(body, COUNT_TOKENS, ""), walk.changed
