"""Request translation: a Gemini ``generateContent`` body (what Gemini CLI and google-genai
send to ``/v1beta/models/{model}:generateContent``) becomes a chat-format body, so a Gemini
client can reach a model whose provider does not speak Gemini: the chat body then takes the
chat route the adapters already have (chat -> messages for Claude, chat pass-through for
GPT), and the answer comes back through :mod:`.chat_to_gemini_response`.

Sans-I/O: a plain dict in, a plain dict out. What cannot be carried raises
:class:`TranslationError` naming the Gemini field (``contents[2].parts[0].fileData``), except
``topK``, which no chat target has a field for and which only narrows sampling: it is left
out and named in :attr:`GeminiAsChat.dropped`, which the endpoint tells the client in a
header (as the Responses translation does for hosted tools).

The rules are tabulated in ``docs/gemini-api.md``.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson

from gatewayd.formats.chat_fields import standard_base64
from gatewayd.formats.errors import TranslationError

__all__ = ["GeminiAsChat", "gemini_request_to_chat", "json_schema_from_gemini", "reasoning_effort"]

#: Gemini's MIME types for audio, as the chat format's ``input_audio.format``.
_AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mp3": "mp3", "audio/mpeg": "mp3"}
_FUNCTION_MODES = {"AUTO": "auto", "ANY": "required", "NONE": "none", "VALIDATED": "auto"}
#: ``thinkingLevel`` (Gemini 3) -> ``reasoning_effort``.
_LEVELS = {"minimal": "minimal", "low": "low", "medium": "medium", "high": "high"}
#: Gemini tool kinds that are Google's own (search, code execution, URL context ...): only a
#: Gemini model can run them.
_CLIENT_TOOL_KEYS = frozenset({"functionDeclarations", "function_declarations"})


@attrs.frozen
class GeminiAsChat:
    """The chat body, and what the Gemini request asked that shapes the answer back."""

    body: dict[str, Any]
    include_thoughts: bool  # thinkingConfig.includeThoughts: thought parts go back to the client
    dropped: tuple[str, ...] = ()  # fields left out (named to the client in a header)


def gemini_request_to_chat(body: dict[str, Any], *, model: str, stream: bool) -> GeminiAsChat:
    """Translate a Gemini request body into a chat body for ``model`` (the id from the URL)."""
    if not isinstance(body, dict):
        raise TranslationError("the request body must be a JSON object")
    if body.get("cachedContent"):
        raise TranslationError("cachedContent names a Gemini cache; only Gemini models can use it", "cachedContent")
    messages = _system(body.get("systemInstruction", body.get("system_instruction")))
    messages.extend(_contents(body.get("contents")))
    out: dict[str, Any] = {"model": model, "messages": messages}
    if stream:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}  # usageMetadata in the last chunk
    tools = _tools(body.get("tools"))
    if tools:
        out["tools"] = tools
    choice = _tool_choice(body.get("toolConfig", body.get("tool_config")))
    if choice is not None and tools:
        out["tool_choice"] = choice
    include_thoughts, dropped = _generation(body.get("generationConfig", body.get("generation_config")), out)
    if body.get("safetySettings"):  # Gemini's own filters: other models have none to set
        dropped = (*dropped, "safetySettings")
    return GeminiAsChat(out, include_thoughts, dropped)


# --- contents ---------------------------------------------------------------------------------


def _system(instruction: Any) -> list[dict[str, Any]]:
    if instruction is None:
        return []
    if isinstance(instruction, str):
        return [{"role": "system", "content": instruction}] if instruction else []
    if not isinstance(instruction, dict) or not isinstance(instruction.get("parts"), list):
        raise TranslationError("systemInstruction must be a Content object with parts", "systemInstruction")
    texts = []
    for k, part in enumerate(instruction["parts"]):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            raise TranslationError("systemInstruction parts must be text parts", f"systemInstruction.parts[{k}]")
        texts.append(part["text"])
    text = "\n".join(t for t in texts if t)
    return [{"role": "system", "content": text}] if text else []


def _contents(contents: Any) -> list[dict[str, Any]]:
    if not isinstance(contents, list) or not contents:
        raise TranslationError("contents must be a non-empty array of Content objects", "contents")
    out: list[dict[str, Any]] = []
    pending: list[tuple[str, str]] = []  # (call id, name) of the last model turn's calls not yet answered
    for i, content in enumerate(contents):
        where = f"contents[{i}]"
        if not isinstance(content, dict):
            raise TranslationError(f"{where} must be an object", where)
        role = content.get("role") or "user"
        parts = content.get("parts")
        if not isinstance(parts, list):
            raise TranslationError(f"{where}.parts must be an array", f"{where}.parts")
        if role == "model":
            message, pending = _model_turn(parts, where, i)
            if message is not None:
                out.append(message)
        elif role in ("user", "function", "tool"):
            out.extend(_user_turn(parts, where, pending))
        else:
            raise TranslationError(f"{where}.role must be user or model (got {role!r})", f"{where}.role")
    return out


def _model_turn(parts: list[Any], where: str, turn: int) -> tuple[dict[str, Any] | None, list[tuple[str, str]]]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    thinking: list[dict[str, Any]] = []
    for k, part in enumerate(parts):
        at = f"{where}.parts[{k}]"
        if not isinstance(part, dict):
            raise TranslationError(f"{at} must be an object", at)
        call = part.get("functionCall", part.get("function_call"))
        if call is not None:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
                raise TranslationError(f"{at}.functionCall must have a name", f"{at}.functionCall")
            args = call.get("args") if call.get("args") is not None else {}
            if not isinstance(args, dict):
                raise TranslationError(f"{at}.functionCall.args must be an object", f"{at}.functionCall.args")
            call_id = call.get("id") if isinstance(call.get("id"), str) and call["id"] else f"call_{turn}_{len(calls)}"
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": call["name"], "arguments": orjson.dumps(args).decode()}})
        elif isinstance(part.get("text"), str):
            if part.get("thought") is True:  # the model's own thinking: echoed where it is signed
                signature = part.get("thoughtSignature")
                if isinstance(signature, str) and signature:
                    thinking.append({"type": "thinking", "thinking": part["text"], "signature": signature})
            elif part["text"]:
                texts.append(part["text"])
        elif part.get("thoughtSignature") is not None and len(part) == 1:
            continue  # a bare signature part: nothing to say
        else:
            raise _unsupported_part(part, at)
    if not texts and not calls:
        return None, []
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    if thinking:
        message["thinking_blocks"] = thinking
    return message, [(c["id"], c["function"]["name"]) for c in calls]


def _user_turn(parts: list[Any], where: str, pending: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Function responses first (as tool messages, matched to the calls of the model turn
    before by id, else by name in order), then the turn's text and media as one user message."""
    tool_messages: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []
    unanswered = list(pending)
    for k, part in enumerate(parts):
        at = f"{where}.parts[{k}]"
        if not isinstance(part, dict):
            raise TranslationError(f"{at} must be an object", at)
        response = part.get("functionResponse", part.get("function_response"))
        if response is not None:
            tool_messages.append(_tool_message(response, at, unanswered))
        elif isinstance(part.get("text"), str):
            if part["text"]:
                content.append({"type": "text", "text": part["text"]})
        elif part.get("inlineData", part.get("inline_data")) is not None:
            content.append(_inline(part.get("inlineData", part.get("inline_data")), f"{at}.inlineData"))
        elif part.get("fileData", part.get("file_data")) is not None:
            content.append(_file_data(part.get("fileData", part.get("file_data")), f"{at}.fileData"))
        else:
            raise _unsupported_part(part, at)
    pending.clear()
    out = tool_messages
    if content:
        if all(p["type"] == "text" for p in content):
            out.append({"role": "user", "content": "".join(p["text"] for p in content)})
        else:
            out.append({"role": "user", "content": content})
    return out


def _tool_message(response: Any, at: str, unanswered: list[tuple[str, str]]) -> dict[str, Any]:
    if not isinstance(response, dict) or not isinstance(response.get("name"), str):
        raise TranslationError(f"{at}.functionResponse must have a name", f"{at}.functionResponse")
    name = response["name"]
    call_id = response.get("id") if isinstance(response.get("id"), str) and response["id"] else None
    match = next((c for c in unanswered if (c[0] == call_id if call_id else c[1] == name)), None)
    if match is not None:
        unanswered.remove(match)
        call_id = match[0]
    if call_id is None:
        raise TranslationError(f"{at}.functionResponse answers no functionCall of the model turn before it "
                               f"(name {name!r})", f"{at}.functionResponse")
    result = response.get("response")
    text = result if isinstance(result, str) else orjson.dumps(result if result is not None else {}).decode()
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _inline(data: Any, at: str) -> dict[str, Any]:
    if not isinstance(data, dict) or not isinstance(data.get("mimeType", data.get("mime_type")), str) \
            or not isinstance(data.get("data"), str) or not data["data"]:
        raise TranslationError(f"{at} must have a mimeType and base64 data", at)
    mime = str(data.get("mimeType", data.get("mime_type"))).lower()
    payload = standard_base64(data["data"], f"{at}.data")  # google-genai sends the URL-safe alphabet
    if mime.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{payload}"}}
    if mime == "application/pdf":
        return {"type": "file", "file": {"filename": "document.pdf", "file_data": f"data:{mime};base64,{payload}"}}
    if mime in _AUDIO_FORMATS:
        return {"type": "input_audio", "input_audio": {"data": payload, "format": _AUDIO_FORMATS[mime]}}
    raise TranslationError(f"inline data of type {mime} is supported only by Gemini models "
                           "(images, PDF, WAV and MP3 are carried to other models)", at)


def _file_data(data: Any, at: str) -> dict[str, Any]:
    if not isinstance(data, dict) or not isinstance(data.get("fileUri", data.get("file_uri")), str):
        raise TranslationError(f"{at} must have a fileUri", at)
    uri = str(data.get("fileUri", data.get("file_uri")))
    mime = str(data.get("mimeType", data.get("mime_type")) or "").lower()
    if uri.startswith(("https://", "http://")) and mime.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": uri}}
    raise TranslationError("fileData (Gemini Files API or a non-image URL) is supported only by Gemini models; "
                           "send the file as inlineData", at)


def _unsupported_part(part: dict[str, Any], at: str) -> TranslationError:
    kind = next((k for k in part if k not in ("thought", "thoughtSignature", "videoMetadata")), "empty")
    return TranslationError(f"a {kind} part is supported only by Gemini models", f"{at}.{kind}")


# --- tools ------------------------------------------------------------------------------------


def _tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise TranslationError("tools must be an array of Tool objects", "tools")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise TranslationError(f"tools[{i}] must be an object", f"tools[{i}]")
        for key, value in tool.items():
            if key not in _CLIENT_TOOL_KEYS:
                raise TranslationError(f"the {key} tool is Google's own and runs only on Gemini models",
                                       f"tools[{i}].{key}")
            if not isinstance(value, list):
                raise TranslationError(f"tools[{i}].{key} must be an array", f"tools[{i}].{key}")
            for k, declaration in enumerate(value):
                out.append(_declaration(declaration, f"tools[{i}].functionDeclarations[{k}]"))
    return out


def _declaration(declaration: Any, at: str) -> dict[str, Any]:
    if not isinstance(declaration, dict) or not isinstance(declaration.get("name"), str) or not declaration["name"]:
        raise TranslationError(f"{at} must have a name", at)
    function: dict[str, Any] = {"name": declaration["name"]}
    if isinstance(declaration.get("description"), str):
        function["description"] = declaration["description"]
    raw_schema = declaration.get("parametersJsonSchema", declaration.get("parameters_json_schema"))
    if raw_schema is None:
        gemini = declaration.get("parameters")
        raw_schema = json_schema_from_gemini(gemini, f"{at}.parameters") if gemini is not None else None
    elif not isinstance(raw_schema, dict):
        raise TranslationError(f"{at}.parametersJsonSchema must be a JSON schema object", f"{at}.parametersJsonSchema")
    function["parameters"] = raw_schema if raw_schema is not None else {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


#: Gemini ``Schema`` keys that are JSON schema keys under the same name.
_SAME_KEYS = ("description", "enum", "format", "required", "minItems", "maxItems", "minimum", "maximum",
              "minLength", "maxLength", "pattern", "title", "default", "minProperties", "maxProperties")


def json_schema_from_gemini(schema: Any, where: str = "schema", depth: int = 0) -> dict[str, Any]:
    """Gemini's OpenAPI-style ``Schema`` (``type: "OBJECT"``, ``nullable``, ``anyOf``,
    ``propertyOrdering``) as the JSON schema chat tools take."""
    if depth > 64:
        raise TranslationError("the schema nests more than 64 levels deep", where)
    if not isinstance(schema, dict):
        raise TranslationError(f"{where} must be a Schema object", where)
    out: dict[str, Any] = {}
    kind = schema.get("type")
    if isinstance(kind, str) and kind.upper() != "TYPE_UNSPECIFIED":
        out["type"] = kind.lower()
        if schema.get("nullable") is True:
            out["type"] = [out["type"], "null"]
    for key in _SAME_KEYS:
        if key in schema:
            out[key] = schema[key]
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {name: json_schema_from_gemini(sub, f"{where}.properties.{name}", depth + 1)
                             for name, sub in schema["properties"].items()}
    if schema.get("items") is not None:
        out["items"] = json_schema_from_gemini(schema["items"], f"{where}.items", depth + 1)
    if isinstance(schema.get("anyOf"), list):
        out["anyOf"] = [json_schema_from_gemini(sub, f"{where}.anyOf[{k}]", depth + 1)
                        for k, sub in enumerate(schema["anyOf"])]
    return out


def _tool_choice(config: Any) -> str | dict[str, Any] | None:
    if config is None:
        return None
    calling = config.get("functionCallingConfig", config.get("function_calling_config")) \
        if isinstance(config, dict) else None
    if calling is None:
        return None
    if not isinstance(calling, dict):
        raise TranslationError("toolConfig.functionCallingConfig must be an object", "toolConfig")
    mode = str(calling.get("mode") or "AUTO").upper()
    if mode not in _FUNCTION_MODES:
        raise TranslationError("functionCallingConfig.mode must be AUTO, ANY, NONE or VALIDATED",
                               "toolConfig.functionCallingConfig.mode")
    allowed = calling.get("allowedFunctionNames", calling.get("allowed_function_names"))
    if mode == "ANY" and isinstance(allowed, list) and len(allowed) == 1 and isinstance(allowed[0], str):
        return {"type": "function", "function": {"name": allowed[0]}}
    if mode == "ANY" and allowed:
        raise TranslationError("allowedFunctionNames with more than one name is supported only by Gemini models; "
                               "offer only those functions instead", "toolConfig.functionCallingConfig")
    return _FUNCTION_MODES[mode]


# --- generationConfig -------------------------------------------------------------------------

_NUMBERS = {"temperature": "temperature", "topP": "top_p", "presencePenalty": "presence_penalty",
            "frequencyPenalty": "frequency_penalty"}
_SNAKE = {"top_p": "topP", "top_k": "topK", "max_output_tokens": "maxOutputTokens",
          "stop_sequences": "stopSequences", "candidate_count": "candidateCount",
          "response_mime_type": "responseMimeType", "response_schema": "responseSchema",
          "response_json_schema": "responseJsonSchema", "thinking_config": "thinkingConfig",
          "presence_penalty": "presencePenalty", "frequency_penalty": "frequencyPenalty"}
#: Fields that only Gemini models have; a request naming them elsewhere is refused.
_GEMINI_ONLY = ("responseModalities", "speechConfig", "mediaResolution", "responseLogprobs", "logprobs",
                "enableEnhancedCivicAnswers", "imageConfig", "routingConfig")


def _generation(config: Any, out: dict[str, Any]) -> tuple[bool, tuple[str, ...]]:
    if config is None:
        return False, ()
    if not isinstance(config, dict):
        raise TranslationError("generationConfig must be an object", "generationConfig")
    config = {_SNAKE.get(k, k): v for k, v in config.items()}
    dropped: list[str] = []
    for name, chat_name in _NUMBERS.items():
        value = config.get(name)
        if value is not None:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TranslationError(f"generationConfig.{name} must be a number", f"generationConfig.{name}")
            out[chat_name] = value
    if config.get("topK") is not None:
        dropped.append("generationConfig.topK")  # a sampling hint no chat target has a field for
    cap = config.get("maxOutputTokens")
    if cap is not None:
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
            raise TranslationError("generationConfig.maxOutputTokens must be a positive integer",
                                   "generationConfig.maxOutputTokens")
        out["max_completion_tokens"] = cap
    stop = config.get("stopSequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise TranslationError("generationConfig.stopSequences must be an array of strings",
                                   "generationConfig.stopSequences")
        if stop:
            out["stop"] = stop
    count = config.get("candidateCount")
    if count is not None:
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise TranslationError("generationConfig.candidateCount must be a positive integer",
                                   "generationConfig.candidateCount")
        if count > 1:
            out["n"] = count
    seed = config.get("seed")
    if seed is not None:
        out["seed"] = seed
    for name in _GEMINI_ONLY:
        if config.get(name) not in (None, False, [], ["TEXT"], ["text"]):
            raise TranslationError(f"generationConfig.{name} is supported only by Gemini models",
                                   f"generationConfig.{name}")
    _response_format(config, out)
    return _thinking(config.get("thinkingConfig"), out), tuple(dropped)


def _response_format(config: dict[str, Any], out: dict[str, Any]) -> None:
    mime = config.get("responseMimeType")
    schema = config.get("responseJsonSchema")
    if schema is None and config.get("responseSchema") is not None:
        schema = json_schema_from_gemini(config["responseSchema"], "generationConfig.responseSchema")
    if mime in (None, "text/plain"):
        if schema is not None:
            raise TranslationError("responseSchema needs responseMimeType application/json",
                                   "generationConfig.responseMimeType")
        return
    if mime != "application/json":
        raise TranslationError(f"responseMimeType {mime!r} is supported only by Gemini models "
                               "(others take text/plain or application/json)", "generationConfig.responseMimeType")
    if schema is None:
        out["response_format"] = {"type": "json_object"}
    elif not isinstance(schema, dict):
        raise TranslationError("the response schema must be an object", "generationConfig.responseJsonSchema")
    else:
        out["response_format"] = {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}


def reasoning_effort(budget: int) -> str:
    """A ``thinkingBudget`` as the nearest ``reasoning_effort`` (the budgets of
    ``chat_to_gemini.EFFORT_THINKING_BUDGET`` read the other way); -1 (dynamic) is medium."""
    if budget < 0:
        return "medium"
    if budget <= 512:
        return "minimal"
    if budget <= 1024:
        return "low"
    if budget <= 8192:
        return "medium"
    return "high"


def _thinking(thinking: Any, out: dict[str, Any]) -> bool:
    """``thinkingConfig`` -> ``reasoning_effort``; returns ``includeThoughts``. A budget of 0
    (no thinking) sends no effort: models that can stop thinking do not think unasked."""
    if thinking is None:
        return False
    if not isinstance(thinking, dict):
        raise TranslationError("generationConfig.thinkingConfig must be an object", "generationConfig.thinkingConfig")
    budget = thinking.get("thinkingBudget", thinking.get("thinking_budget"))
    level = thinking.get("thinkingLevel", thinking.get("thinking_level"))
    if budget is not None:
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < -1:
            raise TranslationError("thinkingBudget must be an integer, -1 for dynamic",
                                   "generationConfig.thinkingConfig.thinkingBudget")
        if budget != 0:
            out["reasoning_effort"] = reasoning_effort(budget)
    elif level is not None:
        effort = _LEVELS.get(str(level).lower())
        if effort is None:
            raise TranslationError("thinkingLevel must be minimal, low, medium or high",
                                   "generationConfig.thinkingConfig.thinkingLevel")
        out["reasoning_effort"] = effort
    return thinking.get("includeThoughts", thinking.get("include_thoughts")) is True
