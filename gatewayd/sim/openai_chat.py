"""OpenAI Chat Completions (``POST /v1/chat/completions``) on the wire.

Request in: :func:`validate` and :func:`extract` (to a neutral :class:`Prompt`).
Reply out: :func:`render` (the ``chat.completion`` object) and :func:`events` (the
``chat.completion.chunk`` stream), both from the same :class:`Plan`.
"""

from __future__ import annotations

import time
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
    max_tokens_of,
    pieces,
    text_of,
)

FINISH_REASON = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}
DONE = b"data: [DONE]\n\n"
STREAM_ERROR = (
    b'data: {"error":{"message":"simulated mid-stream error","type":"server_error","param":null,"code":null}}\n\n'
)
INVALID_JSON = b'{"id": "chatcmpl-sim", this is not json'
INVALID_STREAM = b"data: {this is not json\n\n"


def validate(body: dict) -> tuple[str, str | None] | None:
    """An error (message, param) when the body is not a valid request, else None."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return "you must provide a model parameter", "model"
    messages = body.get("messages")
    if not isinstance(messages, list):
        return "'messages' is a required property", "messages"
    if not messages:
        return "[] is too short - 'messages'", "messages"
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        return "Invalid value for 'messages': each message needs a 'role'.", "messages"
    return None


def extract(body: dict) -> Prompt:
    messages = body["messages"]
    last = messages[-1]
    user_text = ""
    for message in reversed(messages):
        if message.get("role") == "user":
            user_text = text_of(message.get("content"))
            if user_text:
                break
    tools = tuple(
        Tool(fn["name"], fn.get("parameters"))
        for tool in body.get("tools") or ()
        if isinstance(tool, dict)
        and tool.get("type", "function") == "function"
        and isinstance(fn := tool.get("function"), dict)
        and isinstance(fn.get("name"), str)
    )
    choice = body.get("tool_choice")
    forced = None
    if isinstance(choice, dict):
        forced = (choice.get("function") or {}).get("name")
        choice = "required"
    stop = body.get("stop")
    effort = body.get("reasoning_effort")
    return Prompt(
        user_text=user_text,
        tool_result=text_of(last.get("content")) if last.get("role") == "tool" else None,
        ends_with_user=last.get("role") == "user",
        tools=tools,
        tool_choice=choice if choice in ("none", "required") else "auto",
        forced_tool=forced if isinstance(forced, str) else None,
        max_tokens=max_tokens_of(body, "max_completion_tokens", "max_tokens"),
        stop=(stop,) if isinstance(stop, str) else tuple(s for s in stop or () if isinstance(s, str)),
        thinking=isinstance(effort, str) and effort != "none",
        input_tokens=count_input_tokens(body, "chat"),
    )


def call_id(n: int, index: int) -> str:
    return f"call_sim_{n}_{index}"


def usage(plan: Plan) -> dict:
    prompt = plan.prompt_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": plan.output_tokens,
        "total_tokens": prompt + plan.output_tokens,
        "prompt_tokens_details": {"cached_tokens": plan.cache_read, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": plan.thinking_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def render(plan: Plan, body: dict, n: int) -> dict:
    message: dict = {
        "role": "assistant",
        "content": plan.text if (plan.text or not plan.tool_calls) else None,
        "refusal": None,
        "annotations": [],
    }
    if plan.tool_calls:
        message["tool_calls"] = [
            {
                "id": call_id(n, call.index),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in plan.tool_calls
        ]
    reply = {
        "id": f"chatcmpl-sim-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": FINISH_REASON[plan.stop]}
        ],
        "usage": usage(plan),
        "service_tier": "default",
        "system_fingerprint": None,
    }
    if plan.faults.no_usage:
        del reply["usage"]
    return reply


def events(plan: Plan, body: dict, n: int) -> Iterator[tuple[bytes, int]]:
    """The chunk stream. Chunks share a prefix, so only each delta is serialised."""
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    include_usage = include_usage and not plan.faults.no_usage
    head = b'data: {"id":"chatcmpl-sim-%d","object":"chat.completion.chunk","created":%d,"model":%s,' % (
        n,
        int(time.time()),
        orjson.dumps(body["model"]),
    )
    open_choice = head + b'"system_fingerprint":null,"choices":[{"index":0,"delta":'
    tail = b',"usage":null}\n\n' if include_usage else b"}\n\n"
    middle = b',"logprobs":null,"finish_reason":null}]' + tail

    yield open_choice + b'{"role":"assistant","content":"","refusal":null}' + middle, HEAD
    for piece in pieces(plan.text):
        yield open_choice + b'{"content":' + orjson.dumps(piece) + b"}" + middle, CONTENT
    for call in plan.tool_calls:
        start = {
            "index": call.index,
            "id": call_id(n, call.index),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        yield open_choice + b'{"tool_calls":[' + orjson.dumps(start) + b"]}" + middle, HEAD
        for fragment in fragments(call.arguments):
            delta = {"index": call.index, "function": {"arguments": fragment}}
            yield open_choice + b'{"tool_calls":[' + orjson.dumps(delta) + b"]}" + middle, CONTENT
    finish = FINISH_REASON[plan.stop].encode()
    yield open_choice + b'{},"logprobs":null,"finish_reason":"' + finish + b'"}]' + tail, FINISH
    if include_usage:
        yield head + b'"system_fingerprint":null,"choices":[],"usage":' + orjson.dumps(usage(plan)) + b"}\n\n", HEAD
    yield DONE, HEAD


def stream_error(sent: int) -> bytes:
    return STREAM_ERROR
