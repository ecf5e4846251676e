"""Prompt-cache breakpoints the gateway places in a translated messages-format body.

Anthropic caches only what ``cache_control`` breakpoints mark (at most 4 a request; a marked
prefix is written at 1.25x the input rate, or 2x for an hour, and read back at 0.1x). Chat,
responses and Gemini-API clients send no such markers (Codex, for one, repeats a 100-600 KB
prefix every turn), so on a route with ``auto_cache`` (on by default for Claude routes) the
gateway marks, for a body that carries none of the client's own:

1. the last tool (the tools are the start of the prefix);
2. the last system block;
3. the end of the previous exchange: the last block of the user's turn before the last
   assistant turn, which is where the previous request of the conversation ended (it was
   marked then, so this turn reads it back exactly, however many blocks this turn adds:
   Anthropic looks back only about 20 blocks from a breakpoint);
4. the last block of the conversation, which the next turn will repeat.

Thinking blocks cannot carry a marker (the block before them does), nor can an empty text.
A body with any marker of the client's is left as it is: the client has placed its own.
Pure: the body is edited in place and returned.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EPHEMERAL", "MAX_BREAKPOINTS", "has_breakpoints", "place_breakpoints"]

#: Anthropic's limit of breakpoints a request (a 5th is its 400).
MAX_BREAKPOINTS = 4
#: The default (5-minute) breakpoint: the cheapest write, refreshed by every read.
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}

_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and "cache_control" in block


def has_breakpoints(body: dict[str, Any]) -> bool:
    """Whether the body carries any ``cache_control`` marker (tools, system, content blocks,
    blocks inside tool results)."""
    if any(_marked(tool) for tool in body.get("tools") or ()):
        return True
    system = body.get("system")
    if isinstance(system, list) and any(_marked(block) for block in system):
        return True
    for message in body.get("messages") or ():
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if _marked(block):
                return True
            inner = block.get("content") if isinstance(block, dict) else None
            if isinstance(inner, list) and any(_marked(b) for b in inner):
                return True
    return False


def _mark_last_block(message: dict[str, Any]) -> bool:
    """Mark the last markable block of ``message`` (a string content becomes one text block);
    False when it has none."""
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            return False
        message["content"] = [{"type": "text", "text": content, "cache_control": dict(EPHEMERAL)}]
        return True
    blocks: list[Any] = content if isinstance(content, list) else []
    for block in reversed(blocks):
        if isinstance(block, dict) and block.get("type") not in _UNMARKABLE and block.get("text", "x") != "":
            block["cache_control"] = dict(EPHEMERAL)
            return True
    return False


def place_breakpoints(body: dict[str, Any]) -> dict[str, Any]:
    """Mark ``body`` as the module docstring says (at most :data:`MAX_BREAKPOINTS`), unless
    it carries markers of its own."""
    if has_breakpoints(body):
        return body
    placed = 0
    tools = body.get("tools")
    if tools:
        tools[-1] = {**tools[-1], "cache_control": dict(EPHEMERAL)}
        placed += 1
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": dict(EPHEMERAL)}]
        placed += 1
    elif isinstance(system, list) and system:
        system[-1] = {**system[-1], "cache_control": dict(EPHEMERAL)}
        placed += 1
    messages = body.get("messages") or []
    if not messages:
        return body
    last_assistant = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "assistant"),
                          None)
    previous_end = last_assistant - 1 if last_assistant is not None else -1
    if previous_end >= 0 and placed < MAX_BREAKPOINTS - 1 and messages[previous_end].get("role") == "user":
        placed += _mark_last_block(messages[previous_end])
    if placed < MAX_BREAKPOINTS:
        _mark_last_block(messages[-1])
    return body
