"""Issue 36, prompt caching across translation (pure): where the gateway places breakpoints in a
translated messages body, and which client markers each translation carries."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from gatewayd.formats.cache_breakpoints import EPHEMERAL, MAX_BREAKPOINTS, has_breakpoints, place_breakpoints
from gatewayd.formats.chat_to_messages import chat_request_to_messages
from gatewayd.formats.responses_request import responses_request_to_chat

MARK = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}
TOOL = {"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}


def to_messages(chat: dict, *, markers: bool = True, auto: bool = True) -> dict:
    body = chat_request_to_messages(chat, upstream_model="claude-up", default_max_tokens=4096,
                                    cache_markers=markers)
    return place_breakpoints(body) if auto else body


def marks(body: dict) -> list[str]:
    """Where the breakpoints are, as readable paths."""
    found = [f"tools[{k}]" for k, t in enumerate(body.get("tools") or ()) if "cache_control" in t]
    system = body.get("system")
    if isinstance(system, list):
        found += [f"system[{k}]" for k, b in enumerate(system) if "cache_control" in b]
    for i, m in enumerate(body["messages"]):
        if isinstance(m["content"], list):
            found += [f"messages[{i}][{j}]" for j, b in enumerate(m["content"]) if "cache_control" in b]
    return found


def agent_turn(n: int) -> dict:
    """A Codex-shaped chat body after ``n`` tool rounds: system, tools, a task, then calls and results."""
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "fix the bug"}]
    for k in range(n):
        messages += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{k}", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": f"output {k}"}]
    return {"messages": messages, "tools": [TOOL]}


def test_first_turn_marks_tools_system_and_the_last_block():
    body = to_messages(agent_turn(0))
    assert marks(body) == ["tools[0]", "system[0]", "messages[0][0]"]
    assert body["messages"][0]["content"] == [{"type": "text", "text": "fix the bug", "cache_control": EPHEMERAL}]


def test_later_turns_also_mark_where_the_previous_request_ended():
    body = to_messages(agent_turn(3))
    # messages: user, (assistant, user(tool_result)) x 3; the previous request ended at messages[4]
    assert marks(body) == ["tools[0]", "system[0]", "messages[4][0]", "messages[6][0]"]
    assert len(marks(body)) == MAX_BREAKPOINTS


def test_the_previous_end_of_one_turn_is_the_last_block_of_the_turn_before():
    """Turn n+1 marks (again) the block turn n marked last: the cache entry turn n wrote is read
    back exactly, without relying on Anthropic's 20-block lookback."""
    before, after = to_messages(agent_turn(2)), to_messages(agent_turn(3))
    last_before = marks(before)[-1]
    assert last_before in marks(after)


def test_thinking_blocks_are_never_marked():
    chat = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "thinking_blocks": [
        {"type": "thinking", "thinking": "t", "signature": "s"}]}]}
    body = to_messages(chat)
    assert body["messages"][1]["content"][0] == {"type": "thinking", "thinking": "t", "signature": "s"}
    assert marks(body) == ["messages[0][0]", "messages[1][1]"]


def test_a_client_that_marks_anything_gets_no_breakpoints_of_ours():
    chat = agent_turn(2)
    chat["messages"][1] = {"role": "user", "content": [{"type": "text", "text": "fix the bug", "cache_control": HOUR}]}
    body = to_messages(chat)
    assert marks(body) == ["messages[0][0]"] and body["messages"][0]["content"][0]["cache_control"] == HOUR


def test_chat_markers_are_carried_only_when_asked():
    chat = {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "rules"}, {"type": "text", "text": "  "},
                                       {"type": "text", "text": "long rules", "cache_control": MARK}]},
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "cache_control": HOUR,
                                                                          "image_url": {"url": "https://x.test/a.png"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok", "cache_control": MARK}]},
    ], "tools": [{**TOOL, "cache_control": MARK}]}
    carried = to_messages(chat, auto=False)
    assert marks(carried) == ["tools[0]", "system[1]", "messages[0][1]", "messages[2][0]"]
    assert carried["messages"][0]["content"][1]["cache_control"] == HOUR
    dropped = to_messages(chat, markers=False, auto=False)
    assert "cache_control" not in json.dumps(dropped)


def test_responses_markers_reach_the_chat_parts():
    chat = responses_request_to_chat({"model": "m", "input": [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "big context", "cache_control": MARK}]}]})
    assert chat["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "big context", "cache_control": MARK}]}]
    assert marks(to_messages(chat, auto=False)) == ["messages[0][0]"]


@settings(max_examples=100, deadline=None)
@given(rounds=st.integers(0, 30), system=st.booleans(), tools=st.booleans())
def test_never_more_than_four_and_never_on_what_anthropic_refuses(rounds, system, tools):
    chat = agent_turn(rounds)
    if not system:
        chat["messages"].pop(0)
    if not tools:
        del chat["tools"]
        for m in chat["messages"]:
            m.pop("tool_calls", None)
    body = to_messages(chat)
    assert 1 <= len(marks(body)) <= MAX_BREAKPOINTS and has_breakpoints(body)
    for m in body["messages"]:
        for b in m["content"] if isinstance(m["content"], list) else ():
            assert "cache_control" not in b or (b["type"] not in ("thinking", "redacted_thinking") and b.get("text") != "")
