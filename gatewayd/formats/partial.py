"""What a cut-short stream produced: the text to count when no final usage came.

Called only after a disconnect, an idle timeout or an upstream failure, never per
chunk: the relay keeps the raw ``data`` of the events it forwarded and parses them
here once, at the end. Each format has one small function naming the fields that
carry generated text; the walking is shared.

The events are the provider's, forwarded untouched, so any of them may have any shape:
every step checks the type it walks into and skips what it cannot read. Counting runs
while the stream is being settled, and a reader that raised there would leave the hold
open.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

import orjson

from gatewayd.formats.errors import provider_json_or_none


def _strings(holder: Any, fields: tuple[str, ...]) -> Iterator[str]:
    if isinstance(holder, dict):
        for field in fields:
            value = holder.get(field)
            if isinstance(value, str):
                yield value


def _collect(datas: Iterable[bytes], texts_of: Callable[[dict[str, Any]], Iterable[str]]) -> str:
    parts: list[str] = []
    for data in datas:
        event = provider_json_or_none(data)
        if isinstance(event, dict):
            parts.extend(texts_of(event))
    return "".join(parts)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _json_text(value: Any) -> str:
    """A tool input as the JSON text the model generated (orjson encodes 254 levels of
    nesting, fewer than it parses: deeper is counted as nothing rather than raising)."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return ""


def _chat_chunk_texts(chunk: dict[str, Any]) -> Iterator[str]:
    for choice in _list(chunk.get("choices")):
        delta = choice.get("delta") if isinstance(choice, dict) else None
        yield from _strings(delta, ("content", "reasoning_content"))
        for call in _list(delta.get("tool_calls")) if isinstance(delta, dict) else ():
            if isinstance(call, dict):
                yield from _strings(call.get("function"), ("name", "arguments"))


def _messages_event_texts(event: dict[str, Any]) -> Iterator[str]:
    if event.get("type") == "content_block_delta":
        yield from _strings(event.get("delta"), ("text", "thinking", "partial_json"))


RESPONSES_TEXT_EVENTS = frozenset({
    "response.output_text.delta", "response.function_call_arguments.delta", "response.reasoning_summary_text.delta",
    "response.reasoning_text.delta", "response.refusal.delta", "response.custom_tool_call_input.delta",
})


def _responses_event_texts(event: dict[str, Any]) -> Iterator[str]:
    if event.get("type") in RESPONSES_TEXT_EVENTS:
        yield from _strings(event, ("delta",))


def chat_stream_text(datas: list[bytes]) -> str:
    """Content, reasoning and tool-call name/argument text of chat.completion.chunk events."""
    return _collect(datas, _chat_chunk_texts)


def messages_stream_text(datas: list[bytes]) -> str:
    """Text, thinking and tool-input JSON of messages-format content_block_delta events."""
    return _collect(datas, _messages_event_texts)


def responses_stream_text(datas: list[bytes]) -> str:
    """Output text, reasoning summary and function-call argument deltas of responses events."""
    return _collect(datas, _responses_event_texts)


def message_text(message: Any) -> str:
    """Text, thinking and tool input (as JSON) of a whole messages-format reply: what a
    provider produced, to count when its reply carries no usage."""
    parts: list[str] = []
    content = message.get("content") if isinstance(message, dict) else None
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        parts.extend(_strings(block, ("text", "thinking")))
        if block.get("type") in ("tool_use", "server_tool_use"):
            parts.extend(_strings(block, ("name",)))
            parts.append(_json_text(block.get("input")))
    return "".join(parts)


def _content_texts(content: Any, fields: tuple[str, ...]) -> Iterator[str]:
    """A string content, or the named string fields of its parts."""
    if isinstance(content, str):
        yield content
    for part in _list(content):
        yield from _strings(part, fields)


def chat_completion_text(doc: Any) -> str:
    """What a whole chat completion generated, every choice: content, refusal, reasoning
    text and tool calls (name and arguments), to count when it carries no usage."""
    parts: list[str] = []
    for choice in _list(doc.get("choices") if isinstance(doc, dict) else None):
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        parts.extend(_content_texts(message.get("content"), ("text",)))
        parts.extend(_strings(message, ("refusal", "reasoning_content", "reasoning")))
        calls = [call.get("function") for call in _list(message.get("tool_calls")) if isinstance(call, dict)]
        for function in [*calls, message.get("function_call")]:
            parts.extend(_strings(function, ("name", "arguments")))
    return "".join(parts)


def response_output_text(doc: Any) -> str:
    """What a whole Responses object generated: message text and refusals, reasoning
    (summary and text), function and custom tool calls (name and arguments or input), code
    run by the code interpreter and queries sent to web search, to count when it carries no
    usage."""
    parts: list[str] = []
    for item in _list(doc.get("output") if isinstance(doc, dict) else None):
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            parts.extend(_content_texts(item.get("content"), ("text", "refusal")))
        elif kind == "reasoning":
            parts.extend(_content_texts(item.get("summary"), ("text",)))
            parts.extend(_content_texts(item.get("content"), ("text",)))
        elif kind in ("function_call", "mcp_call"):
            parts.extend(_strings(item, ("name", "arguments")))
        elif kind == "custom_tool_call":
            parts.extend(_strings(item, ("name", "input")))
        elif kind == "code_interpreter_call":
            parts.extend(_strings(item, ("code",)))
        elif kind == "web_search_call":
            parts.extend(_strings(item.get("action"), ("query",)))
    return "".join(parts)
