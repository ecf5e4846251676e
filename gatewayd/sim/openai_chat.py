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
    is_reasoning_model,
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


#: ``service_tier`` values OpenAI accepts; the answer reports ``auto`` as ``default`` and
#: ``fast`` as ``priority``, the tier actually used.
SERVICE_TIERS = ("auto", "default", "flex", "scale", "priority", "fast")
REPORTED_TIER = {"auto": "default", "fast": "priority"}
MAX_CHOICES = 128


def reported_tier(body: dict) -> str:
    tier = body.get("service_tier")
    return REPORTED_TIER.get(tier, tier) if isinstance(tier, str) else "default"


def check_service_tier(body: dict, allowed: tuple[str, ...] = SERVICE_TIERS) -> tuple[str, str, str] | None:
    tier = body.get("service_tier")
    if tier is not None and tier not in allowed:
        listed = ", ".join(repr(t) for t in allowed)
        return f"Invalid value: {tier!r}. Supported values are: {listed}.", "service_tier", "invalid_value"
    return None


def _check_caps(body: dict) -> tuple[str, str | None, str | None] | None:
    """The cap fields as OpenAI reads them: reasoning models refuse ``max_tokens``, the two
    caps together are refused, a cap of another protocol is an unknown argument."""
    if "max_output_tokens" in body:
        return "Unrecognized request argument supplied: max_output_tokens", None, None
    if body.get("max_tokens") is not None and body.get("max_completion_tokens") is not None:
        return ("Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported.",
                "max_tokens", "invalid_parameter_combination")
    if body.get("max_tokens") is not None and is_reasoning_model(body.get("model")):
        return ("Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.", "max_tokens", "unsupported_parameter")
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            return f"Invalid '{name}': integer below minimum value. Expected a value >= 1.", name, "integer_below_min_value"
    n = body.get("n")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_CHOICES):
        return f"Invalid 'n': expected an integer from 1 to {MAX_CHOICES}.", "n", "invalid_value"
    return None


def validate(body: dict) -> tuple[str, str | None] | tuple[str, str | None, str | None] | None:
    """An error (message, param[, code]) when the body is not a valid request, else None."""
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
    return _check_caps(body) or check_service_tier(body)


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
        thinking=effort != "none" if is_reasoning_model(body["model"]) else isinstance(effort, str) and effort != "none",
        input_tokens=count_input_tokens(body, "chat"),
        choices=body.get("n") or 1,
        service_tier=reported_tier(body),
    )


def call_id(n: int, index: int, choice: int = 0) -> str:
    return f"call_sim_{n}_{index}" if choice == 0 else f"call_sim_{n}_{choice}_{index}"


def usage(plan: Plan) -> dict:
    """The usage of all ``n`` choices together (how OpenAI reports and bills them)."""
    prompt = plan.prompt_tokens
    output = plan.all_output_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": plan.cache_read, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": plan.all_thinking_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _choice(plan: Plan, n: int, choice: int) -> dict:
    message: dict = {
        "role": "assistant",
        "content": plan.text if (plan.text or not plan.tool_calls) else None,
        "refusal": None,
        "annotations": [],
    }
    if plan.tool_calls:
        message["tool_calls"] = [
            {
                "id": call_id(n, call.index, choice),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in plan.tool_calls
        ]
    return {"index": choice, "message": message, "logprobs": None, "finish_reason": FINISH_REASON[plan.stop]}


def render(plan: Plan, body: dict, n: int) -> dict:
    reply = {
        "id": f"chatcmpl-sim-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "choices": [_choice(plan, n, choice) for choice in range(plan.choices)],
        "usage": usage(plan),
        "service_tier": plan.service_tier or "default",
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
    tier = orjson.dumps(plan.service_tier or "default")
    tail = b',"usage":null}\n\n' if include_usage else b"}\n\n"
    middle = b',"logprobs":null,"finish_reason":null}]' + tail
    finish = FINISH_REASON[plan.stop].encode()
    # the choices one after the other (each with its own index); the first finish closes the reply
    for choice in range(plan.choices):
        open_choice = head + b'"service_tier":' + tier + b',"system_fingerprint":null,"choices":[{"index":%d,"delta":' % choice
        yield open_choice + b'{"role":"assistant","content":"","refusal":null}' + middle, HEAD
        for piece in pieces(plan.text):
            yield open_choice + b'{"content":' + orjson.dumps(piece) + b"}" + middle, CONTENT
        for call in plan.tool_calls:
            start = {
                "index": call.index,
                "id": call_id(n, call.index, choice),
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            yield open_choice + b'{"tool_calls":[' + orjson.dumps(start) + b"]}" + middle, HEAD
            for fragment in fragments(call.arguments):
                delta = {"index": call.index, "function": {"arguments": fragment}}
                yield open_choice + b'{"tool_calls":[' + orjson.dumps(delta) + b"]}" + middle, CONTENT
        yield open_choice + b'{},"logprobs":null,"finish_reason":"' + finish + b'"}]' + tail, (
            FINISH if choice == plan.choices - 1 else HEAD)
    if include_usage:
        yield head + b'"service_tier":' + tier + b',"system_fingerprint":null,"choices":[],"usage":' + orjson.dumps(usage(plan)) + b"}\n\n", HEAD
    yield DONE, HEAD


def stream_error(sent: int) -> bytes:
    return STREAM_ERROR
