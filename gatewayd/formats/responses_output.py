"""Chat-format answer -> Responses-format ``response`` object.

The builders here are shared by the whole-answer translation and by the stream
translator (:mod:`gatewayd.formats.responses_stream`), so the object a client gets from
``responses.create`` and the one in ``response.completed`` are built by the same rules.

The shape follows openai-python's ``Response`` model: every field it declares without a
default (``id``, ``created_at``, ``model``, ``object``, ``output``, ``parallel_tool_calls``,
``tool_choice``, ``tools``) is always present, and the request's settings are echoed
back the way the real API echoes them.
"""

from __future__ import annotations

from typing import Any

from gatewayd.formats.responses_tools import ToolPlan, call_item, plan_tools

__all__ = [
    "call_prefix",
    "chat_response_to_responses",
    "envelope",
    "function_call_item",
    "incomplete_reason",
    "item_id",
    "message_item",
    "reasoning_item",
    "usage_from_chat",
]

# chat finish_reason -> Responses incomplete_details.reason; absent means "completed".
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def incomplete_reason(finish_reason: Any) -> str | None:
    return _INCOMPLETE.get(finish_reason)


def item_id(prefix: str, response_id: str, output_index: int) -> str:
    """Ids of output items: derived from the response id, so they are unique, stable in
    tests, and need no randomness in a sans-I/O module (``msg_<base>_<index>``)."""
    base = response_id[5:] if response_id.startswith("resp_") else response_id
    return f"{prefix}_{base}_{output_index}"


def envelope(request: dict[str, Any], *, response_id: str, created_at: int, status: str) -> dict[str, Any]:
    """A response object with no output yet; the request's settings echoed as the SDK expects."""
    text = request.get("text")
    reasoning = request.get("reasoning")
    metadata = request.get("metadata")
    parallel = request.get("parallel_tool_calls")
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": request.get("model"),
        "output": [],
        "parallel_tool_calls": parallel if isinstance(parallel, bool) else True,
        "previous_response_id": None,
        "reasoning": reasoning if isinstance(reasoning, dict) else {"effort": None, "summary": None},
        "store": False,
        "temperature": request.get("temperature"),
        "text": text if isinstance(text, dict) else {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice") if request.get("tool_choice") is not None else "auto",
        "tools": got if isinstance(got := request.get("tools"), list) else [],
        "top_p": request.get("top_p"),
        "truncation": "disabled",
        "usage": None,
        "metadata": metadata if isinstance(metadata, dict) else {},
    }


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def usage_from_chat(usage: Any) -> dict[str, Any] | None:
    """Chat ``usage`` -> Responses ``usage``; None when the upstream reported none."""
    if not isinstance(usage, dict):
        return None
    prompt_details = usage.get("prompt_tokens_details")
    prompt_details = prompt_details if isinstance(prompt_details, dict) else {}
    completion_details = usage.get("completion_tokens_details")
    completion_details = completion_details if isinstance(completion_details, dict) else {}
    input_tokens = _count(usage.get("prompt_tokens"))
    output_tokens = _count(usage.get("completion_tokens"))
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": _count(prompt_details.get("cached_tokens")),
            "cache_write_tokens": _count(prompt_details.get("cache_write_tokens")),
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": _count(completion_details.get("reasoning_tokens"))},
        "total_tokens": _count(usage.get("total_tokens")) or input_tokens + output_tokens,
    }


def output_text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def refusal_part(text: str) -> dict[str, Any]:
    return {"type": "refusal", "refusal": text}


def message_item(id_: str, content: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {"type": "message", "id": id_, "status": status, "role": "assistant", "content": content}


def reasoning_item(id_: str, summary: list[str]) -> dict[str, Any]:
    return {"type": "reasoning", "id": id_, "summary": [{"type": "summary_text", "text": t} for t in summary]}


def function_call_item(id_: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": id_,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def call_prefix(plan: ToolPlan, chat_name: str) -> str:
    """Item id prefix of a tool call: ``ctc`` for a free-form (custom) tool, else ``fc``."""
    return "ctc" if chat_name in plan.custom else "fc"


def _text(content: Any) -> str:
    """Chat content is a string, or (from some upstreams) a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def reasoning_text(message_or_delta: dict[str, Any]) -> str:
    """``reasoning_content`` (DeepSeek, our messages translator) or ``reasoning`` (some routers)."""
    value = message_or_delta.get("reasoning_content")
    if value is None:
        value = message_or_delta.get("reasoning")
    return value if isinstance(value, str) else ""


def chat_response_to_responses(chat: dict[str, Any], *, request: dict[str, Any], response_id: str,
                               created_at: int) -> dict[str, Any]:
    """A whole ``chat.completion`` -> a whole Responses ``response``.

    Output order is reasoning, message, then function calls: the order in which a chat
    model produces them, and the order the real Responses API reports them. When the
    answer was cut (``finish_reason`` ``length`` or ``content_filter``), the response is
    ``incomplete`` and so is its last item, the one that was cut.
    """
    choices = got if isinstance(got := chat.get("choices"), list) else []
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = got if isinstance(got := choice.get("message"), dict) else {}
    reason = incomplete_reason(choice.get("finish_reason"))

    output: list[dict[str, Any]] = []
    thinking = reasoning_text(message)
    if thinking:
        output.append(reasoning_item(item_id("rs", response_id, len(output)), [thinking]))
    content = []
    text = _text(message.get("content"))
    if text:
        content.append(output_text_part(text))
    if isinstance(message.get("refusal"), str) and message["refusal"]:
        content.append(refusal_part(message["refusal"]))
    if content:
        output.append(message_item(item_id("msg", response_id, len(output)), content, "completed"))
    plan = plan_tools(request.get("tools"))
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        function = got if isinstance(got := call.get("function"), dict) else {}
        index = len(output)
        name = function.get("name") or ""
        output.append(
            call_item(
                plan,
                item_id(call_prefix(plan, name), response_id, index),
                call.get("id") or item_id("call", response_id, index),
                name,
                function.get("arguments") or "",
                "completed",
            )
        )
    if reason is not None and output and "status" in output[-1]:
        output[-1]["status"] = "incomplete"

    response = envelope(
        request,
        response_id=response_id,
        created_at=created_at,
        status="incomplete" if reason else "completed",
    )
    response["output"] = output
    if reason:
        response["incomplete_details"] = {"reason": reason}
    response["usage"] = usage_from_chat(chat.get("usage"))
    return response
