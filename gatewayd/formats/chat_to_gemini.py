"""Request translation: a chat-format (OpenAI Chat Completions) body becomes a Gemini
``generateContent`` body (Google's Generative Language API), for models whose provider
speaks ``protocol = "gemini"``.

Sans-I/O: a plain dict in, a plain dict out. Whatever cannot be carried faithfully raises
:class:`TranslationError` naming the offending ``param``, as for the messages format, so a
client is never answered about a different question than it asked.

The rules are tabulated in ``docs/translation.md`` (section "Chat format ⇄ Gemini"); each
rule lives in exactly one function below. Gemini's wire names are camelCase (the REST
API's JSON mapping of its protobufs): ``systemInstruction``, ``generationConfig``,
``functionDeclarations``, ``inlineData``...
"""

from __future__ import annotations

import orjson

from gatewayd.formats.chat_fields import parse_data_url as _parse_data_url
from gatewayd.formats.chat_fields import stop_sequences as _stop_sequences
from gatewayd.formats.chat_fields import text_part as _text_part
from gatewayd.formats.errors import TranslationError
from gatewayd.formats.gemini_schema import gemini_schema

#: Between a tool call id the gateway made and the Gemini thought signature it carries.
SIGNATURE_SEPARATOR = "__thought__"

__all__ = [
    "EFFORT_THINKING_BUDGET",
    "chat_request_to_gemini",
    "gemini_schema",
]

#: ``reasoning_effort`` -> ``thinkingConfig.thinkingBudget``. low/medium/high are the
#: budgets Google's own OpenAI-compatible endpoint uses (1K, 8K, 24K); ``minimal`` is
#: 512, the smallest budget every Gemini 2.5 model accepts (Flash-Lite's floor); above
#: ``high`` stays at 24576, the largest budget Flash and Flash-Lite accept. ``none`` is 0
#: (thinking off; Gemini 2.5 Pro cannot switch it off and answers 400, which the client
#: then sees with its status kept).
EFFORT_THINKING_BUDGET: dict[str, int] = {
    "none": 0,
    "minimal": 512,
    "low": 1024,
    "medium": 8192,
    "high": 24576,
    "xhigh": 24576,
    "max": 24576,
}

#: Image types Gemini documents for inline data.
_IMAGE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"})
#: Audio formats of the chat format's ``input_audio`` part, as MIME types Gemini reads.
_AUDIO_FORMATS = {"wav": "audio/wav", "mp3": "audio/mp3"}
#: By file extension, for ``fileData`` URLs (Gemini fetches those itself, but needs their type).
_URL_MEDIA_TYPES = {
    ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp",
    ".heic": "image/heic", ".heif": "image/heif", ".pdf": "application/pdf",
}

_TOOL_CHOICE_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}


def chat_request_to_gemini(body: dict, *, upstream_model: str | None = None) -> dict:
    """Translate a chat-format request body into a Gemini ``generateContent`` body.

    The model is not part of a Gemini body (it is in the URL), and neither is ``stream``
    (the URL's method says it: ``generateContent`` or ``streamGenerateContent``).
    ``upstream_model`` (the provider's id) only tells which thinking budgets it accepts.
    """
    if not isinstance(body, dict):
        raise TranslationError("the request body must be a JSON object")
    _refuse_uncarried_features(body)

    system, contents = _translate_messages(body.get("messages"))
    out: dict = {"contents": contents}
    if system:
        out["systemInstruction"] = {"parts": system}
    declarations = _translate_tools(body.get("tools"))
    if declarations:
        out["tools"] = [{"functionDeclarations": declarations}]
        tool_config = _tool_config(body.get("tool_choice"))
        if tool_config is not None:
            out["toolConfig"] = tool_config
    else:
        _tool_config(body.get("tool_choice"))  # still validated; without tools there is nothing to choose
    generation = _generation_config(body, upstream_model)
    if generation:
        out["generationConfig"] = generation
    return out


# --- fields that have no Gemini equivalent ---------------------------------------------------


def _refuse_uncarried_features(body: dict) -> None:
    n = body.get("n")
    if n is not None and n != 1:
        raise TranslationError("n > 1 is not supported for this model; send one request per choice", "n")
    if body.get("logprobs") is True:
        raise TranslationError("logprobs are not supported for this model", "logprobs")
    if body.get("functions") is not None or body.get("function_call") is not None:
        param = "functions" if body.get("functions") is not None else "function_call"
        raise TranslationError("the deprecated functions/function_call fields are not supported; use tools", param)
    modalities = body.get("modalities")
    if body.get("audio") is not None or (isinstance(modalities, list) and "audio" in modalities):
        raise TranslationError("audio output is not supported for this model", "modalities")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise TranslationError("stream must be a boolean", "stream")


# --- messages ---------------------------------------------------------------------------------


def _translate_messages(messages) -> tuple[list[dict], list[dict]]:
    """Return (system text parts, contents). Contents alternate ``user`` / ``model``:
    consecutive messages of one role (tool results count as user) merge into one."""
    if not isinstance(messages, list) or not messages:
        raise TranslationError("messages must be a non-empty array", "messages")
    system: list[dict] = []
    contents: list[dict] = []
    call_names: dict[str, str] = {}  # tool call id -> function name (functionResponse needs the name)
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise TranslationError(f"{where} must be an object", where)
        role = message.get("role")
        if role in ("system", "developer"):
            system.extend(_text_only_parts(message.get("content"), f"{where}.content"))
        elif role == "user":
            _append(contents, "user", _user_parts(message.get("content"), f"{where}.content"))
        elif role == "assistant":
            _append(contents, "model", _model_parts(message, where, call_names))
        elif role == "tool":
            _append(contents, "user", [_function_response(message, where, call_names)])
        elif role == "function":
            raise TranslationError("the deprecated function role is not supported; use tool messages", f"{where}.role")
        else:
            raise TranslationError(f"{where}.role must be one of system, developer, user, assistant, tool", f"{where}.role")
    if not contents:
        raise TranslationError("messages must contain at least one user or assistant message", "messages")
    return system, [_responses_first(c) for c in contents]


def _append(contents: list[dict], role: str, parts: list[dict]) -> None:
    """A message with nothing left to say (only blank text) adds no content: Gemini
    refuses empty ``parts`` and empty text."""
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": list(parts)})


def _responses_first(content: dict) -> dict:
    """In a user content, function responses come first: they answer the model's calls
    of the content just before it, and any text the client added follows them."""
    if content["role"] != "user":
        return content
    parts = content["parts"]
    ordered = [p for p in parts if "functionResponse" in p] + [p for p in parts if "functionResponse" not in p]
    return {"role": "user", "parts": ordered}


def _blank(text: str) -> bool:
    return not text.strip()


def _text_only_parts(content, where: str) -> list[dict]:
    if isinstance(content, str):
        return [] if _blank(content) else [{"text": content}]
    if not isinstance(content, list):
        raise TranslationError(f"{where} must be a string or an array of text parts", where)
    texts = (_text_part(part, f"{where}[{j}]") for j, part in enumerate(content))
    return [{"text": t} for t in texts if not _blank(t)]


def _user_parts(content, where: str) -> list[dict]:
    if isinstance(content, str):
        return [] if _blank(content) else [{"text": content}]
    if not isinstance(content, list):
        raise TranslationError(f"{where} must be a string or an array of content parts", where)
    parts = []
    for j, part in enumerate(content):
        translated = _user_part(part, f"{where}[{j}]")
        if translated is not None:
            parts.append(translated)
    return parts


def _user_part(part, where: str) -> dict | None:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        text = _text_part(part, where)
        return None if _blank(text) else {"text": text}
    if kind == "image_url":
        return _image_part(part.get("image_url"), f"{where}.image_url")
    if kind == "file":
        return _file_part(part.get("file"), f"{where}.file")
    if kind == "input_audio":
        return _audio_part(part.get("input_audio"), f"{where}.input_audio")
    raise TranslationError(f"{where} has an unsupported content part type: {kind!r}", f"{where}.type")


def _image_part(image_url, where: str) -> dict:
    """Inline images as ``inlineData``; http(s) URLs as ``fileData`` (Gemini fetches them
    where it accepts them, and answers 400 where it does not: that status reaches the client)."""
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str) or not url:
        raise TranslationError(f"{where}.url must be a non-empty string", f"{where}.url")
    if url.startswith("data:"):
        media_type, data = _parse_data_url(url, f"{where}.url")
        if media_type not in _IMAGE_MEDIA_TYPES:
            raise TranslationError(
                f"image type {media_type!r} is not supported; use one of {', '.join(sorted(_IMAGE_MEDIA_TYPES))}",
                f"{where}.url",
            )
        return {"inlineData": {"mimeType": media_type, "data": data}}
    if url.startswith(("https://", "http://")):
        return {"fileData": _file_data(url, f"{where}.url")}
    raise TranslationError("image URLs must be http(s) URLs or base64 data URLs", f"{where}.url")


def _file_data(url: str, where: str) -> dict:
    """Gemini needs a ``fileData`` part's ``mimeType`` (it is optional in the schema, but
    Google asks for it with every file). It is told by the URL's extension; the gateway
    does not fetch the URL to find out (that would be I/O here, and a way into the
    gateway's network), so a URL that does not tell is refused with what would work."""
    path = url.split("#", 1)[0].split("?", 1)[0].lower()
    media_type = next((t for ext, t in _URL_MEDIA_TYPES.items() if path.endswith(ext)), None)
    if media_type is None:
        raise TranslationError(
            "this model needs the type of an image URL, and this URL's path does not end in "
            f"{', '.join(_URL_MEDIA_TYPES)}: send the image inline as a base64 data URL instead", where)
    return {"mimeType": media_type, "fileUri": url}


def _file_part(file, where: str) -> dict:
    """Inline PDFs; an uploaded file id lives at the other vendor and cannot be carried."""
    if not isinstance(file, dict):
        raise TranslationError(f"{where} must be an object", where)
    file_data = file.get("file_data")
    if not isinstance(file_data, str) or not file_data:
        if file.get("file_id") is not None:
            raise TranslationError("uploaded file ids are not supported for this model; send file_data", f"{where}.file_id")
        raise TranslationError(f"{where}.file_data must be a base64 data URL", f"{where}.file_data")
    if file_data.startswith("data:"):
        media_type, data = _parse_data_url(file_data, f"{where}.file_data")
    elif str(file.get("filename", "")).lower().endswith(".pdf"):
        media_type, data = "application/pdf", file_data
    else:
        raise TranslationError(f"{where}.file_data must be a base64 data URL", f"{where}.file_data")
    if media_type != "application/pdf":
        raise TranslationError(f"file type {media_type!r} is not supported for this model; only PDF", f"{where}.file_data")
    return {"inlineData": {"mimeType": "application/pdf", "data": data}}


def _audio_part(audio, where: str) -> dict:
    if not isinstance(audio, dict) or not isinstance(audio.get("data"), str) or not audio["data"]:
        raise TranslationError(f"{where}.data must be base64 audio", f"{where}.data")
    fmt = audio.get("format")
    media_type = _AUDIO_FORMATS.get(fmt) if isinstance(fmt, str) else None  # a list is no key: check first
    if media_type is None:
        raise TranslationError(f"{where}.format must be one of {', '.join(_AUDIO_FORMATS)}", f"{where}.format")
    return {"inlineData": {"mimeType": media_type, "data": audio["data"]}}


def _model_parts(message: dict, where: str, call_names: dict[str, str]) -> list[dict]:
    """Text first, then one ``functionCall`` part per tool call (parallel calls are
    several parts of one content, as Gemini sends them). Echoed thinking is not carried:
    Gemini does not take thoughts back."""
    if message.get("function_call") is not None:
        raise TranslationError("the deprecated function_call field is not supported; use tool_calls", f"{where}.function_call")
    parts = _assistant_text_parts(message.get("content"), f"{where}.content")
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        if not isinstance(tool_calls, list):
            raise TranslationError(f"{where}.tool_calls must be an array", f"{where}.tool_calls")
        for k, call in enumerate(tool_calls):
            parts.append(_function_call(call, f"{where}.tool_calls[{k}]", call_names))
    return parts


def _assistant_text_parts(content, where: str) -> list[dict]:
    if content is None:
        return []
    if isinstance(content, str):
        return [] if _blank(content) else [{"text": content}]
    if not isinstance(content, list):
        raise TranslationError(f"{where} must be a string, an array of text parts, or null", where)
    parts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        text = part["refusal"] if kind == "refusal" and isinstance(part.get("refusal"), str) else _text_part(part, f"{where}[{j}]")
        if not _blank(text):
            parts.append({"text": text})
    return parts


def _function_call(call, where: str, call_names: dict[str, str]) -> dict:
    if not isinstance(call, dict) or call.get("type", "function") != "function":
        raise TranslationError(f"{where} must be a function tool call", f"{where}.type")
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise TranslationError(f"{where}.function.name must be a non-empty string", f"{where}.function.name")
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise TranslationError(f"{where}.id must be a non-empty string", f"{where}.id")
    call_names[call_id] = function["name"]
    part = {"functionCall": {"name": function["name"], "args": _arguments(function.get("arguments"), f"{where}.function.arguments")}}
    _, separator, signature = call_id.partition(SIGNATURE_SEPARATOR)
    if separator and signature:
        part["thoughtSignature"] = signature  # Gemini's, carried in our id (see gemini_to_chat._call_id)
    return part


def _arguments(arguments, where: str) -> dict:
    """Never a silent ``{}`` for arguments we cannot read."""
    if isinstance(arguments, dict):
        return arguments
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if not isinstance(arguments, str):
        raise TranslationError(f"{where} must be a JSON-encoded string", where)
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError as exc:
        raise TranslationError(f"{where} is not valid JSON: {exc}", where) from None
    if not isinstance(parsed, dict):
        raise TranslationError(f"{where} must encode a JSON object", where)
    return parsed


def _function_response(message: dict, where: str, call_names: dict[str, str]) -> dict:
    """Gemini pairs a result with its call by the function's name, so the call must be
    in the conversation. The result text goes under ``output`` (Gemini's documented key
    for a function's output)."""
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise TranslationError(f"{where}.tool_call_id must be a non-empty string", f"{where}.tool_call_id")
    name = call_names.get(call_id)
    if name is None:
        raise TranslationError(
            f"{where}.tool_call_id {call_id!r} matches no tool call of an earlier assistant message",
            f"{where}.tool_call_id",
        )
    return {"functionResponse": {"name": name, "response": {"output": _tool_text(message.get("content"), f"{where}.content")}}}


def _tool_text(content, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text":
                raise TranslationError(
                    "tool results of this model carry text only; put images in a user message", f"{where}[{j}]"
                )
            texts.append(_text_part(part, f"{where}[{j}]"))
        return "\n".join(texts)
    raise TranslationError(f"{where} must be a string or an array of text parts", where)


# --- tools ------------------------------------------------------------------------------------


def _translate_tools(tools) -> list[dict]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise TranslationError("tools must be an array", "tools")
    return [_declaration(tool, f"tools[{i}]") for i, tool in enumerate(tools)]


def _declaration(tool, where: str) -> dict:
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise TranslationError(f"tool type {kind!r} is not supported for this model; only function tools", f"{where}.type")
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise TranslationError(f"{where}.function.name must be a non-empty string", f"{where}.function.name")
    out: dict = {"name": function["name"]}
    description = function.get("description")
    if isinstance(description, str) and description:
        out["description"] = description
    parameters = function.get("parameters")
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise TranslationError(f"{where}.function.parameters must be a JSON schema object", f"{where}.function.parameters")
        schema = gemini_schema(parameters, f"{where}.function.parameters", f"the parameters of tool {out['name']!r}")
        # Gemini refuses an OBJECT schema without properties: a tool that takes nothing has no parameters.
        if schema.get("properties"):
            out["parameters"] = schema
    return out


def _tool_config(choice) -> dict | None:
    """``tool_choice`` -> ``toolConfig.functionCallingConfig``. ``parallel_tool_calls``
    has no Gemini equivalent and is not carried."""
    if choice is None:
        return None
    if isinstance(choice, str) and choice in _TOOL_CHOICE_MODES:
        return {"functionCallingConfig": {"mode": _TOOL_CHOICE_MODES[choice]}}
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise TranslationError("tool_choice.function.name must be a non-empty string", "tool_choice.function.name")
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [function["name"]]}}
    raise TranslationError(
        'tool_choice must be "auto", "required", "none" or {"type": "function", "function": {"name": ...}}',
        "tool_choice",
    )


# --- generationConfig -------------------------------------------------------------------------


def _generation_config(body: dict, upstream_model: str | None) -> dict:
    config: dict = {}
    max_tokens = _max_tokens(body)
    if max_tokens is not None:
        config["maxOutputTokens"] = max_tokens
    for field, name in (("temperature", "temperature"), ("top_p", "topP")):
        value = body.get(field)
        if value is not None:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TranslationError(f"{field} must be a number", field)
            config[name] = value  # Gemini's ranges (temperature 0..2, topP 0..1) are the chat format's
    seed = body.get("seed")
    if seed is not None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TranslationError("seed must be an integer", "seed")
        config["seed"] = seed
    stop = _stop_sequences(body.get("stop"))
    if stop:
        config["stopSequences"] = stop
    config.update(_response_format(body.get("response_format")))
    budget = _thinking_budget(body.get("reasoning_effort"))
    if budget is not None:
        if max_tokens is not None and budget > max_tokens:
            budget = max_tokens  # the cap includes the thinking (as the chat format's max_completion_tokens does)
        floor, may_stop = _thinking_floor(upstream_model)
        if 0 < budget < floor:
            budget = 0 if may_stop else floor
        thinking: dict = {"thinkingBudget": budget}
        if budget:
            thinking["includeThoughts"] = True  # thought summaries become reasoning_content
        config["thinkingConfig"] = thinking
    return config


def _max_tokens(body: dict) -> int | None:
    for field in ("max_completion_tokens", "max_tokens"):
        value = body.get(field)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise TranslationError(f"{field} must be a positive integer", field)
        return value
    return None


def _response_format(value) -> dict:
    """JSON output is carried (Gemini has it): ``json_object`` -> JSON MIME type,
    ``json_schema`` -> JSON MIME type and the schema, cleaned like tool schemas."""
    if value is None:
        return {}
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"responseMimeType": "application/json"}
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise TranslationError("response_format.json_schema.schema must be a JSON schema object",
                                   "response_format.json_schema.schema")
        return {"responseMimeType": "application/json",
                "responseSchema": gemini_schema(schema, "response_format.json_schema.schema")}
    raise TranslationError('response_format.type must be "text", "json_object" or "json_schema"', "response_format.type")


#: The least non-zero ``thinkingBudget`` each Gemini 2.5 model accepts, and whether 0 (no
#: thinking) is allowed: Google's thinking guide (Pro 128-32768 and always thinks; Flash
#: 0-24576; Flash-Lite 0 or 512-24576). By the start of the provider's model id, longest first.
THINKING_FLOORS: tuple[tuple[str, int, bool], ...] = (
    ("gemini-2.5-flash-lite", 512, True),
    ("gemini-2.5-flash", 1, True),
    ("gemini-2.5-pro", 128, False),
)
#: Another (or an unknown) model: the strictest of the above, which every one of them accepts.
DEFAULT_THINKING_FLOOR = (512, False)


def _thinking_floor(upstream_model: str | None) -> tuple[int, bool]:
    """(least budget, may be 0) for the model. A cap below the least budget turns thinking
    off where the model allows it (there is no room to think within the cap), and is
    otherwise raised to the least budget, which Gemini would refuse to go below."""
    model = (upstream_model or "").removeprefix("models/")
    return next(((floor, may_stop) for prefix, floor, may_stop in THINKING_FLOORS if model.startswith(prefix)),
                DEFAULT_THINKING_FLOOR)


def _thinking_budget(effort) -> int | None:
    if effort is None:
        return None
    if not isinstance(effort, str) or effort not in EFFORT_THINKING_BUDGET:
        raise TranslationError(f"reasoning_effort must be one of {', '.join(EFFORT_THINKING_BUDGET)}", "reasoning_effort")
    return EFFORT_THINKING_BUDGET[effort]
