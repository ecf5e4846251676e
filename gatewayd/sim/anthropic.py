"""Anthropic Messages (``POST /v1/messages``) on the wire.

Every stream event has an ``event:`` line (the SDKs drop events without one):
``message_start`` (input usage, ``output_tokens: 1``), ``ping``, then per content block
``content_block_start`` / ``content_block_delta``... / ``content_block_stop`` with indexes
0..n-1, ``message_delta`` (stop reason and the cumulative ``output_tokens``) and
``message_stop``.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from .behaviour import (
    CONTENT,
    FINISH,
    HEAD,
    Plan,
    Prompt,
    Tool,
    count_input_tokens,
    fragments,
    pieces,
    text_of,
)

STREAM_ERROR = (
    b"event: error\n"
    b'data: {"type":"error","error":{"type":"overloaded_error","message":"simulated mid-stream error"}}\n\n'
)
INVALID_JSON = b'{"id": "msg_sim", this is not json'
INVALID_STREAM = b"event: message_start\ndata: {this is not json\n\n"
PING = b'event: ping\ndata: {"type":"ping"}\n\n'
STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def validate(body: dict) -> tuple[str, str | None] | None:
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required", "model"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        return "max_tokens: Field required", "max_tokens"
    messages = body.get("messages")
    if not isinstance(messages, list):
        return "messages: Field required", "messages"
    if not messages:
        return "messages: at least one message is required", "messages"
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        return "messages: each message needs a role", "messages"
    choice = body.get("tool_choice")
    if choice is not None and (not isinstance(choice, dict) or choice.get("type") not in _TOOL_CHOICE_TYPES):
        kind = choice.get("type") if isinstance(choice, dict) else choice
        return (f"tool_choice: Input tag {kind!r} found using 'type' does not match any of the expected tags: "
                "'auto', 'any', 'tool', 'none'"), "tool_choice"
    return None


_TOOL_CHOICE_TYPES = ("auto", "any", "tool", "none")


def _tool_results(content) -> list[dict]:
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def extract(body: dict) -> Prompt:
    messages = body["messages"]
    user_text = ""
    for message in reversed(messages):
        if message.get("role") == "user":
            user_text = text_of(message.get("content"), ("text",))
            if user_text:
                break
    last = messages[-1]
    results = _tool_results(last.get("content")) if last.get("role") == "user" else []
    tools = tuple(
        Tool(tool["name"], tool.get("input_schema"))
        for tool in body.get("tools") or ()
        if isinstance(tool, dict) and "input_schema" in tool and isinstance(tool.get("name"), str)
    )
    choice = body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else None
    forced = choice.get("name") if kind == "tool" else None
    thinking = body.get("thinking")
    return Prompt(
        user_text=user_text,
        tool_result=text_of(results[-1].get("content"), ("text",)) if results else None,
        ends_with_user=last.get("role") == "user" and not results,
        tools=tools,
        tool_choice={"none": "none", "any": "required", "tool": "required"}.get(kind, "auto"),
        forced_tool=forced if isinstance(forced, str) else None,
        max_tokens=body["max_tokens"],
        stop=tuple(s for s in body.get("stop_sequences") or () if isinstance(s, str)),
        thinking=isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"),
        input_tokens=count_input_tokens(body, "messages"),
    )


def tool_use_id(n: int, index: int) -> str:
    return f"toolu_sim_{n}_{index}"


def usage(plan: Plan) -> dict:
    return {
        "input_tokens": plan.input_tokens,
        "cache_creation_input_tokens": plan.cache_write,
        "cache_read_input_tokens": plan.cache_read,
        "output_tokens": plan.output_tokens,
    }


def _has_text_block(plan: Plan) -> bool:
    return bool(plan.text) or not (plan.tool_calls or plan.thinking)


def render(plan: Plan, body: dict, n: int) -> dict:
    content: list[dict] = []
    if plan.thinking:
        content.append({"type": "thinking", "thinking": plan.thinking, "signature": plan.signature})
    if _has_text_block(plan):
        content.append({"type": "text", "text": plan.text})
    for call in plan.tool_calls:
        content.append({"type": "tool_use", "id": tool_use_id(n, call.index), "name": call.name, "input": call.input})
    reply = {
        "id": f"msg_sim_{n}",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": plan.stop,
        "stop_sequence": plan.stop_sequence,
        "usage": usage(plan),
    }
    if plan.faults.no_usage:
        del reply["usage"]
    return reply


def _event(kind: str, data: dict) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _delta(index: int, delta: dict) -> bytes:
    return _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def events(plan: Plan, body: dict, n: int) -> Iterator[tuple[bytes, int]]:
    message = {
        "id": f"msg_sim_{n}",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
    }
    if not plan.faults.no_usage:
        message["usage"] = {**usage(plan), "output_tokens": 1}
    yield _event("message_start", {"type": "message_start", "message": message}), HEAD
    yield PING, HEAD

    index = 0
    blocks: list[tuple[dict, list[tuple[dict, int]]]] = []
    if plan.thinking:
        deltas = [({"type": "thinking_delta", "thinking": p}, CONTENT) for p in pieces(plan.thinking)]
        deltas.append(({"type": "signature_delta", "signature": plan.signature}, HEAD))
        blocks.append(({"type": "thinking", "thinking": "", "signature": ""}, deltas))
    if _has_text_block(plan):
        deltas = [({"type": "text_delta", "text": p}, CONTENT) for p in pieces(plan.text)]
        blocks.append(({"type": "text", "text": ""}, deltas))
    for call in plan.tool_calls:
        start = {"type": "tool_use", "id": tool_use_id(n, call.index), "name": call.name, "input": {}}
        deltas = [({"type": "input_json_delta", "partial_json": f}, CONTENT) for f in fragments(call.arguments)]
        blocks.append((start, deltas))

    for start, deltas in blocks:
        yield _event(
            "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
        ), HEAD
        for delta, kind in deltas:
            yield _delta(index, delta), kind
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index}), HEAD
        index += 1

    closing: dict = {
        "type": "message_delta",
        "delta": {"stop_reason": plan.stop, "stop_sequence": plan.stop_sequence},
    }
    if not plan.faults.no_usage:
        closing["usage"] = {"output_tokens": plan.output_tokens}
    yield _event("message_delta", closing), FINISH
    yield STOP, HEAD


def stream_error(sent: int) -> bytes:
    return STREAM_ERROR
