"""The simulator's pure rules: markers, token counts, reply planning."""

from __future__ import annotations

import json

from gatewayd.sim.behaviour import (
    Faults,
    Prompt,
    Tool,
    arguments_for,
    count_input_tokens,
    fragments,
    parse_markers,
    pieces,
    plan,
)


def test_count_input_tokens_rule():
    chat = {"messages": [{"role": "system", "content": "Be nice."}, {"role": "user", "content": "hi there"}]}
    assert count_input_tokens(chat, "chat") == (1 + 2) + (1 + 2) + 3 * 2
    assert count_input_tokens(chat, "openai") == count_input_tokens(chat, "chat")
    messages = {"system": "Be nice.", "messages": [{"role": "user", "content": [{"type": "text", "text": "a b c"}]}]}
    assert count_input_tokens(messages, "messages") == 2 + (1 + 3) + 3 + 3  # a text block counts its text
    marked = {**messages, "messages": [{"role": "user", "content": [{"type": "text", "text": "a b c", "cache_control": {"type": "ephemeral"}}]}]}
    assert count_input_tokens(marked, "messages") == count_input_tokens(messages, "messages")
    assert count_input_tokens({"input": "one two", "instructions": "x"}, "responses") == 2 + 1 + 3 + 3
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    assert count_input_tokens({"messages": [], "tools": tools}, "anthropic") == 2
    assert count_input_tokens({"messages": []}, "messages") == 1


def test_pieces_and_fragments_join_back_exactly():
    for text in ["Hello world", " lead and trail ", "one\n\ntwo  three", "", "x"]:
        assert "".join(pieces(text)) == text
    assert pieces("Hello big world") == ["Hello ", "big ", "world"]
    arguments = '{"city": "sim-city"}'
    assert len(fragments(arguments)) == 3 and "".join(fragments(arguments)) == arguments
    assert fragments("{}") == ["{}"]


def test_markers_combine():
    marks = parse_markers("a [[sim:text=Hi, there]] [[sim:fault=status:429]] [[sim:fault=delay_ms:5]] [[sim:cache_read=3]]")
    assert marks.text == "Hi, there" and marks.cache_read == 3
    assert marks.faults == Faults(status=429, delay_ms=5)
    assert parse_markers("[[sim:tools]]").tools == 1 and parse_markers("[[sim:tools=2]]").tools == 2
    assert parse_markers("[[sim:bogus]] plain").faults == Faults()
    assert Faults(drop_after=2, stall_after=1).cut == ("drop", 2)


def test_arguments_from_schema():
    schema = {"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "number"},
                                                "i": {"type": ["integer", "null"]}, "b": {"type": "boolean"},
                                                "a": {"type": "array"}, "e": {"type": "string", "enum": ["x", "y"]}}}
    assert arguments_for(schema) == {"s": "sim-s", "n": 42, "i": 42, "b": True, "a": None, "e": "x"}
    assert arguments_for(None) == {}


def test_plan_budget_order_thinking_text_tools():
    tools = (Tool("f", {"type": "object", "properties": {"q": {"type": "string"}}}),)
    full = plan(Prompt(user_text="[[sim:text_then_tool]] [[sim:thinking]]", tools=tools))
    assert (full.thinking_tokens, full.text, len(full.tool_calls), full.stop) == (8, "Let me check.", 1, "tool_use")
    assert full.output_tokens == 8 + 3 + 1 + 2
    cut_in_tool = plan(Prompt(user_text="[[sim:text_then_tool]] [[sim:thinking]]", tools=tools, max_tokens=12))
    assert cut_in_tool.tool_calls == () and cut_in_tool.text == "Let me check." and cut_in_tool.stop == "max_tokens"
    cut_in_thinking = plan(Prompt(user_text="[[sim:thinking]]", max_tokens=3))
    assert cut_in_thinking.thinking == "Let me think" and cut_in_thinking.text == "" and cut_in_thinking.output_tokens == 3
    forced = plan(Prompt(user_text="[[sim:text=hi]]", tools=tools + (Tool("g"),), forced_tool="g"))
    assert [c.name for c in forced.tool_calls] == ["g"] and forced.text == "hi"
    assert plan(Prompt(user_text="x", tools=tools, tool_choice="none")).tool_calls == ()
    assert plan(Prompt(user_text="x", tools=tools, ends_with_user=False)).tool_calls == ()


def test_tool_and_args_markers_pick_the_tool_and_its_arguments():
    tools = (Tool("f", {"type": "object", "properties": {"q": {"type": "string"}}}),
             Tool("apply_patch", {"type": "object", "properties": {"input": {"type": "string"}}}))
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
    text = '[[sim:tool=apply_patch]] [[sim:args={"input": "*** Begin Patch\\n*** Add File: a.txt\\n+hi\\n*** End Patch\\n"}]]'
    [call] = plan(Prompt(user_text=text, tools=tools, ends_with_user=False)).tool_calls  # the marker forces a call
    assert (call.name, json.loads(call.arguments)) == ("apply_patch", {"input": patch})
    [named] = plan(Prompt(user_text="[[sim:tool=apply_patch]]", tools=tools)).tool_calls
    assert (named.name, json.loads(named.arguments)) == ("apply_patch", {"input": "sim-input"})
    [fallback] = plan(Prompt(user_text="[[sim:tool=nope]] [[sim:args=not json]]", tools=tools)).tool_calls
    assert (fallback.name, json.loads(fallback.arguments)) == ("f", {"q": "sim-q"})
