"""What a cut-short stream produced: the text to count when no final usage came.

Called only after a disconnect, an idle timeout or an upstream failure, never per
chunk: the relay keeps the raw ``data`` of the events it forwarded and parses them
here once, at the end.
"""

from __future__ import annotations

import orjson


def chat_stream_text(datas: list[bytes]) -> str:
    """Content, reasoning and tool-call argument text of chat.completion.chunk events."""
    parts: list[str] = []
    for data in datas:
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            for field in ("content", "reasoning_content"):
                if isinstance(delta.get(field), str):
                    parts.append(delta[field])
            for call in delta.get("tool_calls") or ():
                fn = call.get("function") or {}
                for field in ("name", "arguments"):
                    if isinstance(fn.get(field), str):
                        parts.append(fn[field])
    return "".join(parts)


def messages_stream_text(datas: list[bytes]) -> str:
    """Text, thinking and tool-input JSON of messages-format content_block_delta events."""
    parts: list[str] = []
    for data in datas:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if event.get("type") != "content_block_delta":
            continue
        delta = event.get("delta") or {}
        for field in ("text", "thinking", "partial_json"):
            if isinstance(delta.get(field), str):
                parts.append(delta[field])
    return "".join(parts)


def message_text(message) -> str:
    """Text, thinking and tool input (as JSON) of a whole messages-format reply: what a
    provider produced, to count when its reply carries no usage."""
    parts: list[str] = []
    content = message.get("content") if isinstance(message, dict) else None
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        for field in ("text", "thinking"):
            if isinstance(block.get(field), str):
                parts.append(block[field])
        if block.get("type") == "tool_use":
            parts.append(orjson.dumps(block.get("input")).decode())
    return "".join(parts)


def responses_stream_text(datas: list[bytes]) -> str:
    """Output text and function-call argument deltas of responses-format events."""
    parts: list[str] = []
    for data in datas:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if event.get("type") in ("response.output_text.delta", "response.function_call_arguments.delta",
                                 "response.reasoning_summary_text.delta"):
            if isinstance(event.get("delta"), str):
                parts.append(event["delta"])
    return "".join(parts)
