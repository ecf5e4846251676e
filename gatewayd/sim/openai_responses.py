"""OpenAI Responses (``POST /v1/responses``) on the wire.

The stream follows the order ``client.responses.stream()`` insists on:
``response.created``, ``response.in_progress``, then per output item
``output_item.added`` -> (content part / text or argument deltas) -> ``output_item.done``,
and ``response.completed`` (``response.incomplete`` when cut by ``max_output_tokens``) last.
Every event carries an ``event:`` line and a ``sequence_number``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import count

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
    is_reasoning_model,
    max_tokens_of,
    pieces,
    text_of,
)
from .openai_chat import check_service_tier, reported_tier

INVALID_JSON = b'{"id": "resp_sim", this is not json'
INVALID_STREAM = b"event: response.created\ndata: {this is not json\n\n"
_OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output")
SERVICE_TIERS = ("auto", "default", "flex", "scale", "priority", "fast", "ultrafast")
#: built-in tool types -> the server tool they run
_BUILT_IN = {"web_search": "web_search", "web_search_preview": "web_search", "web_search_2025_08_26": "web_search",
             "web_search_preview_2025_03_11": "web_search", "file_search": "file_search",
             "code_interpreter": "code_interpreter"}
_ITEM = {"web_search": ("ws", "web_search_call"), "file_search": ("fs", "file_search_call"),
         "code_interpreter": ("ci", "code_interpreter_call")}
#: the stream events of a built-in call between its ``output_item.added`` and ``.done``
_PHASES = {"web_search": ("in_progress", "searching", "completed"),
           "file_search": ("in_progress", "searching", "completed"),
           "code_interpreter": ("in_progress", "interpreting", "completed")}


def validate(body: dict) -> tuple[str, str | None] | tuple[str, str | None, str | None] | None:
    """The 400 a body earns, as (message, param[, code]); None when it is valid."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return "Missing required parameter: 'model'.", "model"
    value = body.get("input")
    if value is not None and not isinstance(value, (str, list)):
        return "Invalid type for 'input': expected a string or an array of input items.", "input"
    if isinstance(value, list) and not all(isinstance(item, dict) for item in value):
        return "Invalid type for 'input': every item must be an object.", "input"
    for name in ("max_tokens", "max_completion_tokens"):
        if name in body:
            return (f"Unsupported parameter: '{name}'. In the Responses API, this parameter has moved to "
                    "'max_output_tokens'.", name, "unsupported_parameter")
    for name in ("max_output_tokens", "max_tool_calls"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            return f"Invalid '{name}': integer below minimum value. Expected a value >= 1.", name, "integer_below_min_value"
    unreadable = _unreadable_compaction(body)
    if unreadable is not None:
        return (f"The encrypted content for item input[{unreadable}] could not be verified.",
                f"input[{unreadable}].encrypted_content", "invalid_encrypted_content")
    return check_service_tier(body, SERVICE_TIERS)


#: OpenAI's compaction: a request whose last input item is this gets one ``compaction`` item
#: back; ``POST /v1/responses/compact`` answers a ``response.compaction`` object
COMPACTION_TRIGGER = "compaction_trigger"
#: the simulator's own "encryption" of a summary (OpenAI's is opaque; only the model that made
#: it reads it back, and another provider's item is refused)
SIM_COMPACTION = "sim-compaction:"


def wants_compaction(body: dict) -> bool:
    value = body.get("input")
    return isinstance(value, list) and bool(value) and value[-1].get("type") == COMPACTION_TRIGGER


def _unreadable_compaction(body: dict) -> int | None:
    """The index of a ``compaction`` input item this provider did not make, if any."""
    value = body.get("input")
    for k, item in enumerate(value if isinstance(value, list) else ()):
        content = item.get("encrypted_content")
        if item.get("type") == "compaction" and not (isinstance(content, str) and content.startswith(SIM_COMPACTION)):
            return k
    return None


def compaction_item(plan: Plan, n: int) -> dict:
    """The item's content is the simulator's "summary": its reply text, or a note of what it
    summarised when its reply is a tool call."""
    return {"id": f"cmp_sim_{n}", "type": "compaction",
            "encrypted_content": SIM_COMPACTION + (plan.text or f"summary of request {n}")}


def render_compact(plan: Plan, body: dict, n: int) -> dict:
    """``POST /v1/responses/compact``: the input's user messages, then one compaction item."""
    value = body.get("input")
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}] \
        if isinstance(value, str) else [i for i in value or () if _is_user_message(i)]
    return {"id": response_id(n), "object": "response.compaction", "created_at": int(time.time()),
            "output": [*items, compaction_item(plan, n)], "usage": usage(plan)}


def _is_user_message(item: dict) -> bool:
    return item.get("role") == "user" and item.get("type", "message") == "message"


def extract(body: dict) -> Prompt:
    value = body.get("input")
    user_text, tool_result, ends_with_user = "", None, True
    if isinstance(value, str):
        user_text = value
    elif value:
        for item in reversed(value):
            if _is_user_message(item):
                user_text = text_of(item.get("content"))
                if user_text:
                    break
        last = value[-1]
        ends_with_user = _is_user_message(last)
        if isinstance(last.get("type"), str) and last["type"] in _OUTPUT_TYPES:
            output = last.get("output")
            tool_result = text_of(output) if output is not None else ""
    tools = tuple(
        Tool(tool["name"], tool.get("parameters"))
        for tool in body.get("tools") or ()
        if isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("name"), str)
    )
    choice = body.get("tool_choice")
    forced = None
    if isinstance(choice, dict):
        forced = choice.get("name")
        choice = "required" if choice.get("type") == "function" else "auto"
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    server = tuple((_BUILT_IN[t["type"]], None) for t in body.get("tools") or ()
                   if isinstance(t, dict) and isinstance(t.get("type"), str) and t["type"] in _BUILT_IN)
    return Prompt(
        user_text=user_text,
        tool_result=tool_result,
        ends_with_user=ends_with_user,
        tools=tools,
        tool_choice=choice if choice in ("none", "required") else "auto",
        forced_tool=forced if isinstance(forced, str) else None,
        max_tokens=max_tokens_of(body, "max_output_tokens"),
        thinking=effort != "none" if is_reasoning_model(body["model"]) else effort not in (None, "none"),
        input_tokens=count_input_tokens(body, "responses"),
        service_tier=reported_tier(body),
        server_tools=server,
        server_tool_limit=body.get("max_tool_calls"),
    )


def response_id(n: int) -> str:
    return f"resp_sim_{n}"


def usage(plan: Plan) -> dict:
    prompt = plan.prompt_tokens
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": plan.cache_read, "cache_write_tokens": plan.cache_write},
        "output_tokens": plan.output_tokens,
        "output_tokens_details": {"reasoning_tokens": plan.thinking_tokens},
        "total_tokens": prompt + plan.output_tokens,
    }


def container_id(body: dict, n: int) -> str:
    """The code interpreter's container: the id the tool names, else one made for this request."""
    for tool in body.get("tools") or ():
        if isinstance(tool, dict) and tool.get("type") == "code_interpreter" and isinstance(tool.get("container"), str):
            return tool["container"]
    return f"cntr_sim_{n}"


def _server_item(call, body: dict, n: int) -> dict:
    prefix, kind = _ITEM[call.name]
    item: dict = {"id": f"{prefix}_sim_{n}_{call.index}", "type": kind, "status": "completed"}
    if call.name == "web_search":
        item["action"] = {"type": "search", "query": call.query}
    elif call.name == "file_search":
        item.update(queries=[call.query], results=None)
    else:
        item.update(code=f"print({call.index + 1})", container_id=container_id(body, n), outputs=None)
    return item


def _items(plan: Plan, body: dict, n: int) -> list[dict]:
    """The finished output items, in order: reasoning, message, function calls; for a
    compaction trigger, the one compaction item."""
    if wants_compaction(body):
        return [compaction_item(plan, n)]
    status = "incomplete" if plan.stop == "max_tokens" else "completed"
    items: list[dict] = []
    if plan.thinking:
        item = {"id": f"rs_sim_{n}", "type": "reasoning", "summary": []}
        if "reasoning.encrypted_content" in (body.get("include") or ()):
            item["encrypted_content"] = plan.signature
        items.append(item)
    items.extend(_server_item(call, body, n) for call in plan.server_calls)
    if plan.text or not plan.tool_calls:
        part = {"type": "output_text", "text": plan.text, "annotations": [], "logprobs": []}
        items.append(
            {"id": f"msg_sim_{n}", "type": "message", "status": status, "role": "assistant", "content": [part]}
        )
    for call in plan.tool_calls:
        items.append(
            {
                "id": f"fc_sim_{n}_{call.index}",
                "type": "function_call",
                "status": "completed",
                "arguments": call.arguments,
                "call_id": f"call_sim_{n}_{call.index}",
                "name": call.name,
            }
        )
    return items


def _response(plan: Plan, body: dict, n: int, created: int, status: str, output: list) -> dict:
    reasoning = got if isinstance(got := body.get("reasoning"), dict) else {}
    return {
        "id": response_id(n),
        "object": "response",
        "created_at": created,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": body["model"],
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "service_tier": plan.service_tier or "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": None if status == "in_progress" or plan.faults.no_usage else usage(plan),
        "user": None,
        "metadata": body.get("metadata") or {},
    }


_SERVER_KINDS = {kind: name for name, (_, kind) in _ITEM.items()}


def _final_status(plan: Plan) -> str:
    return "incomplete" if plan.stop == "max_tokens" else "completed"


def render(plan: Plan, body: dict, n: int) -> dict:
    reply = _response(plan, body, n, int(time.time()), _final_status(plan), _items(plan, body, n))
    if plan.faults.no_usage:
        del reply["usage"]
    return reply


def events(plan: Plan, body: dict, n: int) -> Iterator[tuple[bytes, int]]:
    seq = count()

    def event(kind: str, payload: dict) -> bytes:
        data = {"type": kind, "sequence_number": next(seq), **payload}
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    created = int(time.time())
    items = _items(plan, body, n)
    opening = _response(plan, body, n, created, "in_progress", [])
    yield event("response.created", {"response": opening}), HEAD
    yield event("response.in_progress", {"response": opening}), HEAD
    for index, item in enumerate(items):
        kind = item["type"]
        where = {"item_id": item["id"], "output_index": index}
        if kind == "message":
            part = item["content"][0]
            added = {**item, "status": "in_progress", "content": []}
            yield event("response.output_item.added", {"output_index": index, "item": added}), HEAD
            empty = {**part, "text": ""}
            yield event("response.content_part.added", {**where, "content_index": 0, "part": empty}), HEAD
            for piece in pieces(part["text"]):
                payload = {**where, "content_index": 0, "delta": piece, "logprobs": []}
                yield event("response.output_text.delta", payload), CONTENT
            done = {**where, "content_index": 0, "text": part["text"], "logprobs": []}
            yield event("response.output_text.done", done), HEAD
            yield event("response.content_part.done", {**where, "content_index": 0, "part": part}), HEAD
        elif kind == "function_call":
            added = {**item, "status": "in_progress", "arguments": ""}
            yield event("response.output_item.added", {"output_index": index, "item": added}), HEAD
            for fragment in fragments(item["arguments"]):
                yield event("response.function_call_arguments.delta", {**where, "delta": fragment}), CONTENT
            done = {**where, "name": item["name"], "arguments": item["arguments"]}
            yield event("response.function_call_arguments.done", done), HEAD
        elif kind in _SERVER_KINDS:
            yield event("response.output_item.added", {"output_index": index, "item": {**item, "status": "in_progress"}}), HEAD
            name = _SERVER_KINDS[kind]
            first, middle_phase, last = _PHASES[name]
            yield event(f"response.{kind}.{first}", where), HEAD
            if name == "code_interpreter":
                for fragment in fragments(item["code"]):
                    yield event("response.code_interpreter_call_code.delta", {**where, "delta": fragment}), CONTENT
                yield event("response.code_interpreter_call_code.done", {**where, "code": item["code"]}), HEAD
            yield event(f"response.{kind}.{middle_phase}", where), HEAD
            yield event(f"response.{kind}.{last}", where), HEAD
        else:
            yield event("response.output_item.added", {"output_index": index, "item": item}), HEAD
        yield event("response.output_item.done", {"output_index": index, "item": item}), HEAD
    status = _final_status(plan)
    final = _response(plan, body, n, created, status, items)
    if plan.faults.no_usage:
        del final["usage"]
    yield event(f"response.{status}", {"response": final}), FINISH


def stream_error(sent: int) -> bytes:
    data = {
        "type": "error",
        "sequence_number": sent,
        "code": "server_error",
        "message": "simulated mid-stream error",
        "param": None,
    }
    return b"event: error\ndata: " + orjson.dumps(data) + b"\n\n"
