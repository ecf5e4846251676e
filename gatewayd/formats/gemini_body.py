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

# Scalars are type-checked only where the hold reads them (a wrong type there is a 400, never
# read one way here and another by Google); the rest is Google's to judge.
SCHEMA: dict[str, Any] = {}  # Schema is recursive: filled below
SCHEMA.update({"properties": ("map", SCHEMA), "items": SCHEMA, "anyOf": ("list", SCHEMA)})
BLOB: dict[str, Any] = {}
FILE_DATA = {"mimeType": STR, "fileUri": STR}
FUNCTION_CALL: dict[str, Any] = {"args": FREE}
FUNCTION_RESPONSE: dict[str, Any] = {"response": FREE}
PART: dict[str, Any] = {
    "inlineData": BLOB, "fileData": FILE_DATA, "functionCall": FUNCTION_CALL,
    "functionResponse": FUNCTION_RESPONSE, "executableCode": {}, "codeExecutionResult": {},
    "videoMetadata": {}, "partMetadata": FREE,
}
FUNCTION_RESPONSE["parts"] = ("list", PART)
CONTENT = {"parts": ("list", PART)}
FUNCTION_DECLARATION = {"parameters": SCHEMA, "parametersJsonSchema": FREE, "response": SCHEMA,
                        "responseJsonSchema": FREE}
TOOL = {
    "functionDeclarations": ("list", FUNCTION_DECLARATION),
    "googleSearch": {}, "googleSearchRetrieval": {"dynamicRetrievalConfig": {}}, "codeExecution": {},
    "urlContext": {}, "computerUse": {}, "fileSearch": {}, "googleMaps": {},
}
TOOL_CONFIG: dict[str, Any] = {"functionCallingConfig": {}, "retrievalConfig": {"latLng": {}}}
GENERATION_CONFIG = {
    "responseSchema": SCHEMA, "responseJsonSchema": FREE, "responseModalities": STR_LIST, "candidateCount": INT,
    "maxOutputTokens": INT, "thinkingConfig": {"thinkingBudget": INT}, "speechConfig": {"voiceConfig": {}},
    "imageConfig": {},
}
REQUEST = {
    "contents": ("list", CONTENT), "systemInstruction": CONTENT, "tools": ("list", TOOL),
    "toolConfig": TOOL_CONFIG, "safetySettings": ("list", {}), "generationConfig": GENERATION_CONFIG,
    "cachedContent": STR, "serviceTier": STR,
}
COUNT_TOKENS = {**REQUEST, "generateContentRequest": REQUEST}  # contents (and systemInstruction, tools) or a whole request

# each message type's fields that need a look (not FREE): found by a set intersection, so a
# part with nothing to look at (``{"text": ...}``) costs one C-level operation
_LOOKED_AT: dict[int, frozenset[str]] = {}


def _looked_at(fields: dict[str, Any]) -> frozenset[str]:
    found = _LOOKED_AT.get(id(fields))
    if found is None:
        found = _LOOKED_AT[id(fields)] = frozenset(k for k, kind in fields.items() if kind is not FREE)
    return found


_TYPE_NAMES = {INT: "an integer", STR: "a string", STR_LIST: "an array of strings"}


Path = tuple[str | int, ...]  # a field's place, rendered only for an error: ("generationConfig", "candidateCount"), (.., 0)


def _render(at: Path) -> str:
    out = ""
    for step in at:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


def _check_scalar(kind: str, value: Any, at: Path) -> None:
    if kind == INT:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == STR:
        ok = isinstance(value, str)
    else:  # STR_LIST
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    if not ok:
        where = _render(at)
        raise TranslationError(f"{where} must be {_TYPE_NAMES[kind]}", where)


def _settled(value: Any, kind: Any) -> bool:
    """Nothing to do for ``value`` (None, or a message with no snake_case name and nothing to
    look at): the hot case of a large body's parts, settled without a call down."""
    if value is None:
        return True
    return type(kind) is dict and type(value) is dict and not (value.keys() & _looked_at(kind)) \
        and "_" not in "".join(value)


class _Walk:
    """One canonicalisation: the rewritten document (the same objects where nothing was
    renamed: a body already canonical costs its walk and no copy), and whether anything was."""

    def __init__(self) -> None:
        self.changed = False

    def message(self, doc: Any, fields: dict[str, Any], at: Path) -> Any:
        if not isinstance(doc, dict):
            where = _render(at) or "the request body"
            raise TranslationError(f"{where} must be an object", _render(at) or None)
        if "_" not in "".join(doc):  # no snake_case name here (the usual case): look at what needs it
            out: dict[str, Any] | None = None
            for name in doc.keys() & _looked_at(fields):
                value = doc[name]
                if _settled(value, fields[name]):
                    continue
                new = self.value(value, fields[name], (*at, name))
                if new is not value:
                    out = dict(doc) if out is None else out
                    out[name] = new
            return doc if out is None else out
        out = None  # made at the first difference
        for i, (key, value) in enumerate(doc.items()):
            name = camel(key) if "_" in key else key
            if name != key:
                if name in doc or (out is not None and name in out):
                    where = _render((*at, name))
                    other = name if name in doc else next(k for k in doc if k != key and camel(k) == name)
                    raise TranslationError(f"{where} is given twice (as {other!r} and {key!r}); send it once", where)
                self.changed = True
            kind = fields.get(name, FREE)
            new = value if kind is FREE or value is None else self.value(value, kind, (*at, name))
            if out is None and (name != key or new is not value):
                out = dict(list(doc.items())[:i])  # the members before this one, unchanged
            if out is not None:
                out[name] = new
        return doc if out is None else out

    def value(self, value: Any, kind: Any, at: Path) -> Any:
        if isinstance(kind, str):
            _check_scalar(kind, value, at)
            return value
        if isinstance(kind, tuple):
            shape, inner = kind
            if shape == "list":
                if not isinstance(value, list):
                    where = _render(at)
                    raise TranslationError(f"{where} must be an array", where)
                items = None
                looked = _looked_at(inner)
                for i, item in enumerate(value):  # _settled, inlined: a body's parts are its many objects
                    if item is None or (type(item) is dict and not (item.keys() & looked)
                                        and "_" not in "".join(item)):
                        continue
                    new = self.message(item, inner, (*at, i))
                    if new is not item:
                        items = list(value) if items is None else items
                        items[i] = new
                return value if items is None else items
            if not isinstance(value, dict):  # a map of messages (a Schema's properties)
                where = _render(at)
                raise TranslationError(f"{where} must be an object", where)
            entries = {name: item if item is None else self.message(item, inner, (*at, name))
                       for name, item in value.items()}
            return value if all(entries[k] is value[k] for k in value) else entries
        return self.message(value, kind, at)


def canonical_gemini(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A ``generateContent`` body with every request field under its camelCase name, checked
    (module doc), and whether it differs from ``body``. Raises :class:`TranslationError`
    naming the field (the client's 400)."""
    walk = _Walk()
    return walk.message(body, REQUEST, ()), walk.changed


def canonical_count_tokens(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The same for a ``countTokens`` body (``contents``, or a whole ``generateContentRequest``)."""
    walk = _Walk()
    return walk.message(body, COUNT_TOKENS, ()), walk.changed
