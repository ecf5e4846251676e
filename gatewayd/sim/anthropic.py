"""Anthropic Messages (``POST /v1/messages``) on the wire.

Every stream event has an ``event:`` line (the SDKs drop events without one):
``message_start`` (input usage, ``output_tokens: 1``), ``ping``, then per content block
``content_block_start`` / ``content_block_delta``... / ``content_block_stop`` with indexes
0..n-1, ``message_delta`` (stop reason and the cumulative ``output_tokens``) and
``message_stop``.
"""

from __future__ import annotations

import binascii
from collections.abc import Iterator
from typing import Any

import orjson

from .prompt_cache import MAX_CACHE_BREAKPOINTS, count_breakpoints
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
    for name in _FOREIGN_FIELDS:
        if name in body:
            return f"{name}: Extra inputs are not permitted", name
    tier = body.get("service_tier")
    if tier is not None and tier not in ("auto", "standard_only"):
        return "service_tier: Input should be 'auto' or 'standard_only'", "service_tier"
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1024:
            return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024", "thinking"
        if budget >= max_tokens:
            return "`max_tokens` must be greater than `thinking.budget_tokens`", "max_tokens"
    bad_source = _invalid_base64_source(messages)
    if bad_source is not None:
        return f"{bad_source}: invalid base64 data", bad_source
    breakpoints = count_breakpoints(body)
    if breakpoints > MAX_CACHE_BREAKPOINTS:
        return (f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found {breakpoints}."), None
    choice = body.get("tool_choice")
    if choice is not None and (not isinstance(choice, dict) or choice.get("type") not in _TOOL_CHOICE_TYPES):
        kind = choice.get("type") if isinstance(choice, dict) else choice
        return (f"tool_choice: Input tag {kind!r} found using 'type' does not match any of the expected tags: "
                "'auto', 'any', 'tool', 'none'"), "tool_choice"
    return None


def _invalid_base64_source(messages: list) -> str | None:
    """Where an image or document block carries base64 that is not standard base64 (Anthropic
    refuses it: "invalid base64 data"), as Anthropic names it (``messages.0.content.1.source``)."""
    for i, message in enumerate(messages):
        content = message.get("content")
        for j, block in enumerate(content if isinstance(content, list) else ()):
            inner = block.get("content") if isinstance(block, dict) and block.get("type") == "tool_result" else None
            for k, item in ((None, block), *enumerate(inner if isinstance(inner, list) else ())):
                source = item.get("source") if isinstance(item, dict) else None
                if isinstance(source, dict) and source.get("type") == "base64":
                    data = source.get("data")
                    try:
                        binascii.a2b_base64(data if isinstance(data, str) else "", strict_mode=True)
                        valid = isinstance(data, str) and bool(data)
                    except binascii.Error:
                        valid = False
                    if not valid:
                        where = f"messages.{i}.content.{j}" + (f".content.{k}" if k is not None else "")
                        return f"{where}.source.base64"
    return None


_TOOL_CHOICE_TYPES = ("auto", "any", "tool", "none")
#: fields of the other protocols (caps, choices) that the Messages API refuses as extra inputs
_FOREIGN_FIELDS = ("max_completion_tokens", "max_output_tokens", "n", "max_tokens_to_sample")
#: server tool type prefixes -> the server tool (``web_search_20250305`` -> ``web_search``)
_SERVER_TYPES = ("web_search_", "web_fetch_")


def _server_tools(body: dict) -> tuple[tuple[str, int | None], ...]:
    found = []
    for tool in body.get("tools") or ():
        if isinstance(tool, dict) and isinstance(tool.get("type"), str) and tool["type"].startswith(_SERVER_TYPES):
            limit = tool.get("max_uses")
            found.append((tool["type"].rsplit("_", 1)[0], limit if isinstance(limit, int) else None))
    return tuple(found)


def _asks_1h_cache(value) -> bool:
    """True when a ``cache_control`` breakpoint anywhere in ``value`` has ``ttl: "1h"``."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            control = item.get("cache_control")
            if isinstance(control, dict) and control.get("ttl") == "1h":
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


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
    forced = choice.get("name") if kind == "tool" and isinstance(choice, dict) else None
    thinking = body.get("thinking")
    return Prompt(
        user_text=user_text,
        tool_result=text_of(results[-1].get("content"), ("text",)) if results else None,
        ends_with_user=last.get("role") == "user" and not results,
        tools=tools,
        tool_choice={"none": "none", "any": "required", "tool": "required"}.get(str(kind), "auto"),
        forced_tool=forced if isinstance(forced, str) else None,
        max_tokens=body["max_tokens"],
        stop=tuple(s for s in body.get("stop_sequences") or () if isinstance(s, str)),
        thinking=isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"),
        input_tokens=count_input_tokens(body, "messages"),
        service_tier="standard",
        server_tools=_server_tools(body),
        cache_ttl_1h=_asks_1h_cache([body.get("system"), body.get("tools"), body.get("messages")]),
    )


def tool_use_id(n: int, index: int) -> str:
    return f"toolu_sim_{n}_{index}"


def server_tool_use(plan: Plan) -> dict:
    return {"web_search_requests": plan.server_count("web_search"),
            "web_fetch_requests": plan.server_count("web_fetch")}


def usage(plan: Plan) -> dict:
    """Anthropic's usage: ``input_tokens`` without the cache; ``cache_creation_input_tokens``
    is the sum of the 5-minute and 1-hour writes of ``cache_creation``; thinking is counted in
    ``output_tokens``; ``server_tool_use`` when a server tool ran."""
    doc = {
        "input_tokens": plan.input_tokens,
        "cache_creation_input_tokens": plan.cache_write,
        "cache_read_input_tokens": plan.cache_read,
        "cache_creation": {"ephemeral_5m_input_tokens": plan.cache_write - plan.cache_write_1h,
                           "ephemeral_1h_input_tokens": plan.cache_write_1h},
        "output_tokens": plan.output_tokens,
        "service_tier": plan.service_tier or "standard",
    }
    if plan.server_calls:
        doc["server_tool_use"] = server_tool_use(plan)
    return doc


def server_tool_id(n: int, index: int) -> str:
    return f"srvtoolu_sim_{n}_{index}"


def _server_blocks(plan: Plan, n: int) -> list[tuple[dict, dict]]:
    """(server_tool_use block, its result block) per call; a tool asked past its
    ``max_uses`` gets one more pair whose result is the ``max_uses_exceeded`` error."""
    pairs = []
    calls = [(call.index, call.name, call.query, False) for call in plan.server_calls]
    calls += [(len(calls) + k, name, "sim over the limit", True) for k, name in enumerate(plan.server_refused)]
    for index, name, query, refused in calls:
        tool_id = server_tool_id(n, index)
        if name == "web_fetch":
            use: dict[str, Any] = {"type": "server_tool_use", "id": tool_id, "name": name,
                                   "input": {"url": f"https://example.com/sim/{index}"}}
            content: dict | list = (
                {"type": "web_fetch_tool_result_error", "error_code": "max_uses_exceeded"} if refused else
                {"type": "web_fetch_result", "url": use["input"]["url"], "retrieved_at": "2025-01-01T00:00:00Z",
                 "content": {"type": "document", "title": "sim page",
                             "source": {"type": "text", "media_type": "text/plain", "data": "simulated page"}}})
            result = {"type": "web_fetch_tool_result", "tool_use_id": tool_id, "content": content}
        else:
            use = {"type": "server_tool_use", "id": tool_id, "name": name, "input": {"query": query}}
            content = (
                {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"} if refused else
                [{"type": "web_search_result", "url": f"https://example.com/sim/{index}", "title": f"sim result {index}",
                  "encrypted_content": f"enc-sim-{n}-{index}", "page_age": None}])
            result = {"type": "web_search_tool_result", "tool_use_id": tool_id, "content": content}
        pairs.append((use, result))
    return pairs


def _has_text_block(plan: Plan) -> bool:
    return bool(plan.text) or not (plan.tool_calls or plan.thinking)


def render(plan: Plan, body: dict, n: int) -> dict:
    content: list[dict] = []
    if plan.thinking:
        content.append({"type": "thinking", "thinking": plan.thinking, "signature": plan.signature})
    for use, result in _server_blocks(plan, n):
        content += [use, result]
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
    for use, result in _server_blocks(plan, n):
        partial = orjson.dumps(use["input"]).decode()
        blocks.append(({**use, "input": {}}, [({"type": "input_json_delta", "partial_json": f}, CONTENT)
                                              for f in fragments(partial)]))
        blocks.append((result, []))
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
        if plan.server_calls:
            closing["usage"]["server_tool_use"] = server_tool_use(plan)
    yield _event("message_delta", closing), FINISH
    yield STOP, HEAD


def stream_error(sent: int) -> bytes:
    return STREAM_ERROR
