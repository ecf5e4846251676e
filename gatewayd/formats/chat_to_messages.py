"""Request translation: a chat-format (OpenAI Chat Completions) body becomes a
messages-format (Anthropic Messages) body, for dual-format models called through
``/v1/chat/completions``.

A pure writer: :func:`gatewayd.formats.chat_request.read_chat_request` reads and checks
the body (one rule per field, shared with every chat -> X translator); this module only
says how the neutral :class:`ChatRequest` is written for Anthropic, and refuses what
Anthropic cannot carry (audio input, image types it does not read) naming the client's
field, so the client gets a 400 that points at its own field instead of a confusing
upstream error.

The rules are tabulated in ``docs/translation.md``; each rule lives in exactly one
function below.
"""

from __future__ import annotations

from typing import Any

import re

from gatewayd.formats.chat_request import (
    AssistantTurn,
    Audio,
    ChatRequest,
    Document,
    Image,
    ImageUrl,
    Part,
    Thinking,
    Tool,
    ToolChoice,
    UserTurn,
    pdf_only,
    read_chat_request,
)
from gatewayd.formats.errors import TranslationError
from gatewayd.formats.thinking import THINKING_ANSWER_ROOM, fit_budget

__all__ = [
    "CONTINUE_PLACEHOLDER",
    "EFFORT_BUDGET_TOKENS",
    "THINKING_ANSWER_ROOM",
    "chat_request_to_messages",
    "messages_request",
]

#: ``reasoning_effort`` -> ``thinking.budget_tokens``. Anthropic's floor is 1024;
#: the steps roughly quadruple, like the effort levels of reasoning models do. Anthropic
#: sets no ceiling but ``max_tokens`` (which is raised to fit, see below), so ``xhigh`` and
#: ``max`` keep climbing. ``none`` means no thinking (as does an absent field).
EFFORT_BUDGET_TOKENS: dict[str, int] = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 24576,
    "xhigh": 32768,
    "max": 49152,
}

#: Anthropic refuses a conversation whose first turn is the assistant's; such a
#: conversation gets this user turn in front of it.
CONTINUE_PLACEHOLDER = "(continue)"

_IMAGE_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_NOT_TOOL_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_FORCED_TOOL_CHOICES = frozenset({"any", "tool"})
_THINKING_BLOCK_TYPES = frozenset({"thinking", "redacted_thinking"})
_TOOL_CHOICE_TYPES = {"auto": "auto", "required": "any", "none": "none"}


def chat_request_to_messages(body: dict[str, Any], *, upstream_model: str, default_max_tokens: int,
                             max_output_tokens: int | None = None, cache_markers: bool = False) -> dict[str, Any]:
    """Translate a chat-format request body into a messages-format request body.

    ``upstream_model`` is the provider's model id (routing already happened).
    ``default_max_tokens`` is used when the client sets no cap, because the messages
    format requires one; ``max_output_tokens`` is the model's own maximum, which the
    returned ``max_tokens`` never exceeds. The returned ``max_tokens`` may exceed the
    client's cap when thinking needs room (see :func:`_enable_thinking`): holds must be
    computed from the returned body, not from the client's. ``cache_markers``: the client's
    ``cache_control`` markers (on system, user and tool content parts, and on tools) are
    carried; otherwise they are dropped (the spec's rule for chat clients, unless the route's
    operator turned ``auto_cache`` on).
    """
    return messages_request(read_chat_request(body), upstream_model=upstream_model,
                            default_max_tokens=default_max_tokens, max_output_tokens=max_output_tokens,
                            cache_markers=cache_markers)


def messages_request(request: ChatRequest, *, upstream_model: str, default_max_tokens: int,
                     max_output_tokens: int | None = None, cache_markers: bool = False) -> dict[str, Any]:
    """The messages-format body for a read chat request (see :func:`chat_request_to_messages`)."""
    turns = _turns(request, cache_markers)
    tool_choice = _tool_choice(request) if request.tools else None

    cap = request.max_tokens or default_max_tokens
    if max_output_tokens is not None:
        cap = min(cap, max_output_tokens)
    out: dict[str, Any] = {"model": upstream_model, "max_tokens": cap, "messages": turns}
    if request.system:
        out["system"] = [_text(text) for text in request.system]
        if cache_markers:
            for k, control in request.system_cache:
                out["system"][k]["cache_control"] = control
    if request.tools:
        out["tools"] = [_tool(tool, cache_markers) for tool in request.tools]
    if tool_choice is not None:
        out["tool_choice"] = tool_choice
    if request.stop:
        out["stop_sequences"] = list(request.stop)
    if request.temperature is not None:
        out["temperature"] = _unit_interval(request.temperature)
    if request.top_p is not None:
        out["top_p"] = _unit_interval(request.top_p)
    if request.user_id is not None:
        out["metadata"] = {"user_id": request.user_id}
    if request.stream is not None:
        out["stream"] = request.stream

    budget = EFFORT_BUDGET_TOKENS.get(request.reasoning_effort) if request.reasoning_effort else None
    if budget is not None and _thinking_allowed(tool_choice, turns):
        _enable_thinking(out, budget, max_output_tokens)
    return out


# --- messages ---------------------------------------------------------------------------------


def _turns(request: ChatRequest, cache_markers: bool) -> list[dict[str, Any]]:
    """Turns alternate roles: consecutive turns of one side (tool results count as user)
    merge into one. The reader put the tool results first on the user's side, as Anthropic
    requires (right after the tool_use turn, before any text)."""
    turns: list[dict[str, Any]] = []
    blocks: list[dict[str, Any]]
    for turn in request.turns:
        if isinstance(turn, str):  # a user message of one text, the commonest turn
            role, blocks = "user", [{"type": "text", "text": turn}]
        elif isinstance(turn, UserTurn):
            role, blocks = "user", [_part_block(part) for part in turn.parts]
            if cache_markers:
                for k, control in turn.cache:
                    blocks[k]["cache_control"] = control
        elif isinstance(turn, AssistantTurn):
            role, blocks = "assistant", _assistant_blocks(turn)
        else:
            role, blocks = "user", [_tool_result_block(turn.call_id, turn.content)]
            if cache_markers and turn.cache is not None:
                blocks[0]["cache_control"] = turn.cache
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    _strip_final_assistant_whitespace(turns)
    if turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [_text(CONTINUE_PLACEHOLDER)]})
    for finished in turns:  # a turn that is a single text block is sent as a plain string
        blocks = finished["content"]
        if len(blocks) == 1 and blocks[0]["type"] == "text" and "cache_control" not in blocks[0]:
            finished["content"] = blocks[0]["text"]
    return turns


def _strip_final_assistant_whitespace(turns: list[dict[str, Any]]) -> None:
    """A conversation ending with the assistant's turn is a prefill, and Anthropic
    rejects a prefill ending in whitespace."""
    last = turns[-1]
    if last["role"] == "assistant" and last["content"][-1]["type"] == "text":
        last["content"][-1] = _text(last["content"][-1]["text"].rstrip())


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _part_block(part: Part) -> dict[str, Any]:
    """One user (or tool result) part."""
    if isinstance(part, str):
        return _text(part)
    if isinstance(part, Image):
        if part.media_type not in _IMAGE_MEDIA_TYPES:
            raise TranslationError(
                f"image type {part.media_type!r} is not supported; use one of {', '.join(sorted(_IMAGE_MEDIA_TYPES))}",
                f"{part.where}.image_url.url",
            )
        return {"type": "image", "source": {"type": "base64", "media_type": part.media_type, "data": part.data}}
    if isinstance(part, ImageUrl):
        return {"type": "image", "source": {"type": "url", "url": part.url}}
    if isinstance(part, Document):
        source = {"type": "base64", "media_type": "application/pdf", "data": pdf_only(part)}
        return {"type": "document", "source": source}
    assert isinstance(part, Audio)
    raise TranslationError("audio input is not supported for this model", part.where)


def _assistant_blocks(turn: AssistantTurn) -> list[dict[str, Any]]:
    """Echoed thinking first, then text, then tool calls: the order Anthropic emits them."""
    blocks: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
        if isinstance(block, Thinking) else {"type": "redacted_thinking", "data": block.data}
        for block in turn.thinking
    ] if turn.thinking else []
    for text in turn.parts:
        blocks.append({"type": "text", "text": text})
    for call in turn.tool_calls:
        blocks.append({"type": "tool_use", "id": _tool_id(call.id), "name": call.name, "input": call.arguments})
    return blocks


def _tool_id(tool_id: str) -> str:
    """Anthropic ids must match ``[A-Za-z0-9_-]+``; other characters become ``_``.
    The mapping is deterministic, so a tool_use and its tool_result still pair up.
    (An id that already matches, the usual case, is checked without the regex.)"""
    if tool_id.isascii() and tool_id.replace("_", "a").replace("-", "a").isalnum():
        return tool_id
    return _NOT_TOOL_ID_CHARS.sub("_", tool_id)


def _tool_result_block(call_id: str, content: str | tuple[Part, ...]) -> dict[str, Any]:
    """Tool results take the parts user turns take (Anthropic tool results can hold
    images and documents); empty content gives a result without ``content``."""
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": _tool_id(call_id)}
    if isinstance(content, str):
        if content:
            block["content"] = content
    elif content:
        block["content"] = [_part_block(part) for part in content]
    return block


# --- tools ------------------------------------------------------------------------------------


def _tool(tool: Tool, cache_markers: bool) -> dict[str, Any]:
    """``strict`` is dropped: Anthropic has no per-tool equivalent in this API."""
    parameters = tool.parameters
    if parameters is None:
        schema = {"type": "object", "properties": {}}
    else:
        schema = parameters if "type" in parameters else {"type": "object", **parameters}
    out: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        out["description"] = tool.description
    out["input_schema"] = schema
    if cache_markers and tool.cache is not None:
        out["cache_control"] = tool.cache
    return out


def _tool_choice(request: ChatRequest) -> dict[str, Any] | None:
    """Only with tools: without them there is nothing to choose (clients often send
    ``"none"`` anyway), so tool_choice and the parallel flag are dropped by the caller."""
    choice: ToolChoice | None = request.tool_choice
    translated: dict[str, Any] | None
    if choice is None:
        translated = None
    elif choice.mode == "function":
        translated = {"type": "tool", "name": choice.name}
    else:
        translated = {"type": _TOOL_CHOICE_TYPES[choice.mode]}
    if request.parallel_tool_calls is False:
        if translated is None:
            translated = {"type": "auto"}
        if translated["type"] != "none":
            translated["disable_parallel_tool_use"] = True
    return translated


# --- scalar fields ----------------------------------------------------------------------------


def _unit_interval(value: float) -> float:
    """The chat format allows temperature up to 2, the messages format up to 1:
    values are clamped into 0..1 rather than refused, as both mean "more random"."""
    return min(max(value, 0), 1)


# --- reasoning --------------------------------------------------------------------------------


def _thinking_allowed(tool_choice: dict[str, Any] | None, turns: list[dict[str, Any]]) -> bool:
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


def _enable_thinking(out: dict[str, Any], wanted: int, max_output_tokens: int | None) -> None:
    """Anthropic: ``1024 <= budget_tokens < max_tokens``; temperature only 1 (any
    other value is dropped); ``top_p`` at least 0.95 (raised to it).

    A cap that leaves the effort's budget no room is raised to ``budget + 4096`` (room for
    the answer), but never above the model's maximum; where even that cannot hold the
    budget, the budget is lowered to fit (:func:`fit_budget`), so a higher effort still
    thinks at least as much as a lower one and the pair is always one Anthropic accepts. A
    cap of 1024 or less that cannot be raised leaves thinking off."""
    cap = out["max_tokens"]
    if cap <= wanted:
        cap = wanted + THINKING_ANSWER_ROOM
        if max_output_tokens is not None:
            cap = min(cap, max_output_tokens)
    budget = fit_budget(wanted, cap)
    if budget is None:
        return
    out["max_tokens"] = cap
    out["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if out.get("temperature", 1) != 1:
        del out["temperature"]
    if out.get("top_p", 1) < 0.95:
        out["top_p"] = 0.95
