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

from typing import Callable, Iterable, Iterator

import orjson


def _strings(holder, fields: tuple[str, ...]) -> Iterator[str]:
    if isinstance(holder, dict):
        for field in fields:
            value = holder.get(field)
            if isinstance(value, str):
                yield value


def _collect(datas: Iterable[bytes], texts_of: Callable[[dict], Iterable[str]]) -> str:
    parts: list[str] = []
    for data in datas:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict):
            parts.extend(texts_of(event))
    return "".join(parts)


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _chat_chunk_texts(chunk: dict) -> Iterator[str]:
    for choice in _list(chunk.get("choices")):
        delta = choice.get("delta") if isinstance(choice, dict) else None
        yield from _strings(delta, ("content", "reasoning_content"))
        for call in _list(delta.get("tool_calls")) if isinstance(delta, dict) else ():
            if isinstance(call, dict):
                yield from _strings(call.get("function"), ("name", "arguments"))


def _messages_event_texts(event: dict) -> Iterator[str]:
    if event.get("type") == "content_block_delta":
        yield from _strings(event.get("delta"), ("text", "thinking", "partial_json"))


_RESPONSES_TEXT_EVENTS = frozenset({
    "response.output_text.delta", "response.function_call_arguments.delta", "response.reasoning_summary_text.delta",
})


def _responses_event_texts(event: dict) -> Iterator[str]:
    if event.get("type") in _RESPONSES_TEXT_EVENTS:
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


def message_text(message) -> str:
    """Text, thinking and tool input (as JSON) of a whole messages-format reply: what a
    provider produced, to count when its reply carries no usage."""
    parts: list[str] = []
    content = message.get("content") if isinstance(message, dict) else None
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        parts.extend(_strings(block, ("text", "thinking")))
        if block.get("type") == "tool_use":
            parts.append(orjson.dumps(block.get("input")).decode())
    return "".join(parts)
