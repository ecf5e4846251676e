"""Request translation: a chat-format (OpenAI Chat Completions) body becomes a
messages-format (Anthropic Messages) body, for dual-format models called through
``/v1/chat/completions``.

Sans-I/O: a plain dict in, a plain dict out. Whatever cannot be carried faithfully
raises :class:`TranslationError` naming the offending ``param``, so the client gets
a 400 that points at its own field instead of a confusing upstream error, and is
never silently answered about a different question than it asked.

The rules are tabulated in ``docs/translation.md``; each rule lives in exactly one
function below.
"""

from __future__ import annotations

import re

import orjson

from gatewayd.formats.chat_fields import parse_data_url as _parse_data_url
from gatewayd.formats.chat_fields import stop_sequences as _stop_sequences
from gatewayd.formats.chat_fields import text_part as _text_part
from gatewayd.formats.errors import TranslationError

__all__ = [
    "CONTINUE_PLACEHOLDER",
    "EFFORT_BUDGET_TOKENS",
    "THINKING_ANSWER_ROOM",
    "chat_request_to_messages",
]

#: ``reasoning_effort`` -> ``thinking.budget_tokens``. Anthropic's floor is 1024;
#: the steps roughly quadruple, like the effort levels of reasoning models do.
#: ``none`` (and an absent field) means no thinking.
EFFORT_BUDGET_TOKENS: dict[str, int] = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 24576,
    "xhigh": 32768,
    "max": 49152,
}

#: Anthropic needs ``budget_tokens < max_tokens``. When the requested (or default)
#: cap does not exceed the budget, the cap is raised to ``budget + this``, so the
#: answer after the thinking has room too.
THINKING_ANSWER_ROOM = 4096

#: Anthropic refuses a conversation whose first turn is the assistant's; such a
#: conversation gets this user turn in front of it.
CONTINUE_PLACEHOLDER = "(continue)"

_IMAGE_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_NOT_TOOL_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_FORCED_TOOL_CHOICES = frozenset({"any", "tool"})
_THINKING_BLOCK_TYPES = frozenset({"thinking", "redacted_thinking"})


def chat_request_to_messages(body: dict, *, upstream_model: str, default_max_tokens: int) -> dict:
    """Translate a chat-format request body into a messages-format request body.

    ``upstream_model`` is the provider's model id (routing already happened).
    ``default_max_tokens`` is used when the client sets no cap, because the messages
    format requires one. The returned ``max_tokens`` may exceed both when thinking
    needs room (see :data:`THINKING_ANSWER_ROOM`): holds must be computed from the
    returned body, not from the client's.
    """
    if not isinstance(body, dict):
        raise TranslationError("the request body must be a JSON object")
    _refuse_uncarried_features(body)

    system, turns = _translate_messages(body.get("messages"))
    tools = _translate_tools(body.get("tools"))
    tool_choice = _translate_tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"), tools)

    out: dict = {"model": upstream_model, "max_tokens": _max_tokens(body, default_max_tokens), "messages": turns}
    if system:
        out["system"] = system
    if tools:
        out["tools"] = tools
    if tool_choice is not None:
        out["tool_choice"] = tool_choice
    stop_sequences = _stop_sequences(body.get("stop"))
    if stop_sequences:
        out["stop_sequences"] = stop_sequences
    temperature = _unit_interval(body, "temperature")
    if temperature is not None:
        out["temperature"] = temperature
    top_p = _unit_interval(body, "top_p")
    if top_p is not None:
        out["top_p"] = top_p
    user_id = _user_id(body)
    if user_id is not None:
        out["metadata"] = {"user_id": user_id}
    stream = body.get("stream")
    if stream is not None:
        if not isinstance(stream, bool):
            raise TranslationError("stream must be a boolean", "stream")
        out["stream"] = stream

    budget = _thinking_budget(body.get("reasoning_effort"))
    if budget is not None and _thinking_allowed(tool_choice, turns):
        _enable_thinking(out, budget)
    return out


# --- fields that have no messages-format equivalent -------------------------------------------


def _refuse_uncarried_features(body: dict) -> None:
    """Refuse what would change the answer if dropped. Fields that only tune
    delivery (``stream_options``, ``seed``, penalties, ``store``, ``service_tier``,
    ``prompt_cache_key``, ``response_format`` per the spec...) are simply not carried."""
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


# --- messages ---------------------------------------------------------------------------------


def _translate_messages(messages) -> tuple[list[dict], list[dict]]:
    """Return (system text blocks, turns). Turns alternate roles: consecutive
    same-role messages (tool results count as user) merge into one turn."""
    if not isinstance(messages, list) or not messages:
        raise TranslationError("messages must be a non-empty array", "messages")
    system: list[dict] = []
    turns: list[dict] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise TranslationError(f"{where} must be an object", where)
        role = message.get("role")
        if role in ("system", "developer"):
            system.extend(_text_only_blocks(message.get("content"), f"{where}.content"))
        elif role == "user":
            _append_turn(turns, "user", _user_blocks(message.get("content"), f"{where}.content"))
        elif role == "assistant":
            _append_turn(turns, "assistant", _assistant_blocks(message, where))
        elif role == "tool":
            _append_turn(turns, "user", [_tool_result_block(message, where)])
        elif role == "function":
            raise TranslationError("the deprecated function role is not supported; use tool messages", f"{where}.role")
        else:
            raise TranslationError(f"{where}.role must be one of system, developer, user, assistant, tool", f"{where}.role")
    if not turns:
        raise TranslationError("messages must contain at least one user or assistant message", "messages")
    _strip_final_assistant_whitespace(turns)
    return system, [_finish_turn(turn) for turn in _user_first(turns)]


def _append_turn(turns: list[dict], role: str, blocks: list[dict]) -> None:
    """A message with nothing left to say (e.g. only empty text) adds no turn."""
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": list(blocks)})


def _strip_final_assistant_whitespace(turns: list[dict]) -> None:
    """A conversation ending with the assistant's turn is a prefill, and Anthropic
    rejects a prefill ending in whitespace."""
    last = turns[-1]
    if last["role"] == "assistant" and last["content"][-1]["type"] == "text":
        last["content"][-1] = _text(last["content"][-1]["text"].rstrip())


def _user_first(turns: list[dict]) -> list[dict]:
    if turns[0]["role"] == "user":
        return turns
    return [{"role": "user", "content": [_text(CONTINUE_PLACEHOLDER)]}, *turns]


def _finish_turn(turn: dict) -> dict:
    """Tool results go first in a user turn (Anthropic requires them right after the
    tool_use turn, before any text); a turn that is a single text block is sent as a
    plain string."""
    blocks = turn["content"]
    if turn["role"] == "user":
        blocks = [b for b in blocks if b["type"] == "tool_result"] + [b for b in blocks if b["type"] != "tool_result"]
    if len(blocks) == 1 and blocks[0]["type"] == "text":
        return {"role": turn["role"], "content": blocks[0]["text"]}
    return {"role": turn["role"], "content": blocks}


def _text(text: str) -> dict:
    return {"type": "text", "text": text}


def _is_blank(text: str) -> bool:
    """Anthropic rejects text blocks that are empty or only whitespace."""
    return not text.strip()


def _text_only_blocks(content, where: str) -> list[dict]:
    """Content of system/developer messages: a string or text parts."""
    if isinstance(content, str):
        return [] if _is_blank(content) else [_text(content)]
    if not isinstance(content, list):
        raise TranslationError(f"{where} must be a string or an array of text parts", where)
    blocks = []
    for j, part in enumerate(content):
        text = _text_part(part, f"{where}[{j}]")
        if not _is_blank(text):
            blocks.append(_text(text))
    return blocks


def _user_blocks(content, where: str) -> list[dict]:
    if isinstance(content, str):
        return [] if _is_blank(content) else [_text(content)]
    if not isinstance(content, list):
        raise TranslationError(f"{where} must be a string or an array of content parts", where)
    blocks = []
    for j, part in enumerate(content):
        block = _user_part(part, f"{where}[{j}]")
        if block is not None:
            blocks.append(block)
    return blocks


def _user_part(part, where: str) -> dict | None:
    """One user (or tool) content part; ``None`` for blank text."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        text = _text_part(part, where)
        return None if _is_blank(text) else _text(text)
    if kind == "image_url":
        return _image_block(part.get("image_url"), f"{where}.image_url")
    if kind == "file":
        return _document_block(part.get("file"), f"{where}.file")
    if kind == "input_audio":
        raise TranslationError("audio input is not supported for this model", where)
    raise TranslationError(f"{where} has an unsupported content part type: {kind!r}", f"{where}.type")


def _image_block(image_url, where: str) -> dict:
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
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    if url.startswith(("https://", "http://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise TranslationError("image URLs must be http(s) URLs or base64 data URLs", f"{where}.url")


def _document_block(file, where: str) -> dict:
    """Only inline PDFs can be carried: uploaded file ids live at the other vendor."""
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
        media_type, data = "application/pdf", file_data  # bare base64 with a .pdf name
    else:
        raise TranslationError(f"{where}.file_data must be a base64 data URL", f"{where}.file_data")
    if media_type != "application/pdf":
        raise TranslationError(f"file type {media_type!r} is not supported for this model; only PDF", f"{where}.file_data")
    return {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data}}


def _assistant_blocks(message: dict, where: str) -> list[dict]:
    """Echoed thinking first, then text, then tool calls: the order Anthropic emits them."""
    if message.get("function_call") is not None:
        raise TranslationError("the deprecated function_call field is not supported; use tool_calls", f"{where}.function_call")
    blocks = _echoed_thinking(message.get("thinking_blocks"), f"{where}.thinking_blocks")
    blocks.extend(_assistant_text_blocks(message.get("content"), f"{where}.content"))
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        if not isinstance(tool_calls, list):
            raise TranslationError(f"{where}.tool_calls must be an array", f"{where}.tool_calls")
        blocks.extend(_tool_use_block(call, f"{where}.tool_calls[{k}]") for k, call in enumerate(tool_calls))
    return blocks


def _echoed_thinking(thinking_blocks, where: str) -> list[dict]:
    """Thinking blocks our own responses emitted, echoed back. Only the fields
    Anthropic accepts are kept (streamed ones also carry an ``index``); a thinking
    block without a signature cannot be verified upstream, so it is dropped, as is a
    bare ``reasoning_content``."""
    if thinking_blocks is None:
        return []
    if not isinstance(thinking_blocks, list):
        raise TranslationError(f"{where} must be an array", where)
    blocks = []
    for k, block in enumerate(thinking_blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "thinking":
            if isinstance(block.get("signature"), str) and block["signature"] and isinstance(block.get("thinking"), str):
                blocks.append({"type": "thinking", "thinking": block["thinking"], "signature": block["signature"]})
        elif kind == "redacted_thinking":
            if not isinstance(block.get("data"), str):
                raise TranslationError(f"{where}[{k}].data must be a string", f"{where}[{k}].data")
            blocks.append({"type": "redacted_thinking", "data": block["data"]})
        else:
            raise TranslationError(f"{where}[{k}] must be a thinking or redacted_thinking block", f"{where}[{k}]")
    return blocks


def _assistant_text_blocks(content, where: str) -> list[dict]:
    if content is None:
        return []
    if isinstance(content, str):
        return [] if _is_blank(content) else [_text(content)]
    if not isinstance(content, list):
        raise TranslationError(f"{where} must be a string, an array of text parts, or null", where)
    blocks = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "refusal" and isinstance(part.get("refusal"), str):
            text = part["refusal"]  # what the assistant said, so it stays in the history
        else:
            text = _text_part(part, f"{where}[{j}]")
        if not _is_blank(text):
            blocks.append(_text(text))
    return blocks


def _tool_use_block(call, where: str) -> dict:
    if not isinstance(call, dict) or call.get("type", "function") != "function":
        raise TranslationError(f"{where} must be a function tool call", f"{where}.type")
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise TranslationError(f"{where}.function.name must be a non-empty string", f"{where}.function.name")
    return {
        "type": "tool_use",
        "id": _tool_id(call.get("id"), f"{where}.id"),
        "name": function["name"],
        "input": _tool_arguments(function.get("arguments"), f"{where}.function.arguments"),
    }


def _tool_arguments(arguments, where: str) -> dict:
    """Never a silent ``{}`` for arguments we cannot read: the model would be told
    it called the tool with nothing."""
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


def _tool_id(tool_id, where: str) -> str:
    """Anthropic ids must match ``[A-Za-z0-9_-]+``; other characters become ``_``.
    The mapping is deterministic, so a tool_use and its tool_result still pair up."""
    if not isinstance(tool_id, str) or not tool_id:
        raise TranslationError(f"{where} must be a non-empty string", where)
    return _NOT_TOOL_ID_CHARS.sub("_", tool_id)


def _tool_result_block(message: dict, where: str) -> dict:
    block = {"type": "tool_result", "tool_use_id": _tool_id(message.get("tool_call_id"), f"{where}.tool_call_id")}
    content = message.get("content")
    if isinstance(content, str):
        if content:
            block["content"] = content
    elif isinstance(content, list):
        parts = _user_blocks(content, f"{where}.content")
        if parts:
            block["content"] = parts
    elif content is not None:
        raise TranslationError(f"{where}.content must be a string or an array of content parts", f"{where}.content")
    return block


# --- tools ------------------------------------------------------------------------------------


def _translate_tools(tools) -> list[dict]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise TranslationError("tools must be an array", "tools")
    return [_tool_definition(tool, f"tools[{i}]") for i, tool in enumerate(tools)]


def _tool_definition(tool, where: str) -> dict:
    """``strict`` is dropped: Anthropic has no per-tool equivalent in this API."""
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise TranslationError(f"tool type {kind!r} is not supported for this model; only function tools", f"{where}.type")
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise TranslationError(f"{where}.function.name must be a non-empty string", f"{where}.function.name")
    parameters = function.get("parameters")
    if parameters is None:
        schema = {"type": "object", "properties": {}}
    elif isinstance(parameters, dict):
        schema = parameters if "type" in parameters else {"type": "object", **parameters}
    else:
        raise TranslationError(f"{where}.function.parameters must be a JSON schema object", f"{where}.function.parameters")
    out = {"name": function["name"]}
    description = function.get("description")
    if isinstance(description, str) and description:
        out["description"] = description
    out["input_schema"] = schema
    return out


def _translate_tool_choice(choice, parallel_tool_calls, tools: list[dict]) -> dict | None:
    """Without tools there is nothing to choose (clients often send ``"none"``
    anyway), so tool_choice and the parallel flag are dropped."""
    if choice is None:
        translated = None
    elif choice == "auto":
        translated = {"type": "auto"}
    elif choice == "required":
        translated = {"type": "any"}
    elif choice == "none":
        translated = {"type": "none"}
    elif isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise TranslationError("tool_choice.function.name must be a non-empty string", "tool_choice.function.name")
        translated = {"type": "tool", "name": function["name"]}
    else:
        raise TranslationError(
            'tool_choice must be "auto", "required", "none" or {"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    if not tools:
        return None
    if parallel_tool_calls is False:
        if translated is None:
            translated = {"type": "auto"}
        if translated["type"] != "none":
            translated["disable_parallel_tool_use"] = True
    return translated


# --- scalar fields ----------------------------------------------------------------------------


def _max_tokens(body: dict, default_max_tokens: int) -> int:
    for field in ("max_completion_tokens", "max_tokens"):
        value = body.get(field)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise TranslationError(f"{field} must be a positive integer", field)
        return value
    return default_max_tokens


def _unit_interval(body: dict, field: str) -> float | int | None:
    """The chat format allows temperature up to 2, the messages format up to 1:
    values are clamped into 0..1 rather than refused, as both mean "more random"."""
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TranslationError(f"{field} must be a number", field)
    return min(max(value, 0), 1)


def _user_id(body: dict) -> str | None:
    metadata = body.get("metadata")
    candidates = (
        metadata.get("user_id") if isinstance(metadata, dict) else None,
        body.get("user"),
        body.get("safety_identifier"),
    )
    return next((c for c in candidates if isinstance(c, str) and c), None)


# --- reasoning --------------------------------------------------------------------------------


def _thinking_budget(effort) -> int | None:
    if effort is None or effort == "none":
        return None
    if not isinstance(effort, str) or effort not in EFFORT_BUDGET_TOKENS:  # a list is no key: check first
        allowed = ", ".join(["none", *EFFORT_BUDGET_TOKENS])
        raise TranslationError(f"reasoning_effort must be one of {allowed}", "reasoning_effort")
    return EFFORT_BUDGET_TOKENS[effort]


def _thinking_allowed(tool_choice: dict | None, turns: list[dict]) -> bool:
    """Thinking is left off, rather than the request refused, where Anthropic would
    reject it:

    - a forced tool choice (``any``/``tool``) is incompatible with thinking; the
      client's explicit tool demand wins over a reasoning preference;
    - the last assistant turn calls tools but does not start with a thinking block:
      Anthropic requires it to, and most chat clients do not echo thinking back.
    """
    if tool_choice is not None and tool_choice["type"] in _FORCED_TOOL_CHOICES:
        return False
    last_assistant = next((t for t in reversed(turns) if t["role"] == "assistant"), None)
    if last_assistant is None or isinstance(last_assistant["content"], str):
        return True
    blocks = last_assistant["content"]
    calls_tools = any(b["type"] == "tool_use" for b in blocks)
    return not calls_tools or blocks[0]["type"] in _THINKING_BLOCK_TYPES


def _enable_thinking(out: dict, budget: int) -> None:
    """Anthropic: ``1024 <= budget_tokens < max_tokens``; temperature only 1 (any
    other value is dropped); ``top_p`` at least 0.95 (raised to it)."""
    out["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if out["max_tokens"] <= budget:
        out["max_tokens"] = budget + THINKING_ANSWER_ROOM
    if out.get("temperature", 1) != 1:
        del out["temperature"]
    if out.get("top_p", 1) < 0.95:
        out["top_p"] = 0.95
