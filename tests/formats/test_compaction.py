"""Issue 36: the gateway's compaction for translated routes, pure (gatewayd/formats/compaction.py)."""

from __future__ import annotations

import pytest

from gatewayd.formats.compaction import (
    COMPACTION_PROMPT, SUMMARY_HEADING, CompactionStream, compacted_response, compaction_response,
    summarising_request, summary_message, wants_compaction, wrap_summary,
)
from gatewayd.formats.errors import TranslationError
from gatewayd.formats.responses_request import responses_request_to_chat

TRIGGER = {"type": "compaction_trigger"}
TASK = {"type": "message", "role": "user", "content": "fix it"}


def test_the_summarising_request_is_the_conversation_then_the_prompt_with_no_tool_and_no_reasoning():
    body = {"model": "m", "instructions": "be Codex", "tools": [{"type": "function", "name": "shell"}],
            "reasoning": {"effort": "high"}, "include": ["reasoning.encrypted_content"], "stream": True,
            "input": [TASK, TRIGGER]}
    assert wants_compaction(body) and not wants_compaction({"input": [TASK]}) and not wants_compaction({"input": "x"})
    out = summarising_request(body)
    assert out == {"model": "m", "instructions": "be Codex", "tools": body["tools"], "stream": True,
                   "tool_choice": "none", "input": [TASK, {"type": "message", "role": "user", "content": [
                       {"type": "input_text", "text": COMPACTION_PROMPT}]}]}


@pytest.mark.parametrize("inp,param", [([TRIGGER, TASK, TRIGGER], "input[0]"), ([TRIGGER], "input")])
def test_a_misplaced_or_lonely_trigger_is_refused(inp, param):
    with pytest.raises(TranslationError) as refused:
        summarising_request({"model": "m", "input": inp})
    assert refused.value.param == param


def test_the_summary_comes_back_as_a_user_message_and_foreign_or_damaged_items_are_refused():
    item = compaction_response({"output": [{"type": "message", "content": [{"type": "output_text", "text": "Did X; "},
                                                                          {"type": "output_text", "text": "do Y."}]}]}
                               )["output"][0]
    assert item["type"] == "compaction" and item["encrypted_content"] == wrap_summary("Did X; do Y.")
    chat = responses_request_to_chat({"model": "m", "input": [item, {"role": "user", "content": "go on"}]})
    assert chat["messages"][0] == {"role": "user", "content": f"{SUMMARY_HEADING}\n\nDid X; do Y."}
    for content in ("gAAAA-openai", "gatewayd-compaction-v1.%%%"):
        with pytest.raises(TranslationError) as refused:
            summary_message({"type": "compaction", "encrypted_content": content}, "input[0]")
        assert refused.value.param == "input[0].encrypted_content"


def test_the_compact_endpoint_answer_keeps_the_user_messages():
    doc = {"id": "resp_1", "created_at": 5, "usage": {"input_tokens": 3},
           "output": [{"type": "message", "content": [{"type": "output_text", "text": "S"}]}]}
    out = compacted_response(doc, {"input": [TASK, {"type": "message", "role": "assistant", "content": "a"}]})
    assert out["object"] == "response.compaction" and out["usage"] == {"input_tokens": 3}
    assert out["output"][0] == TASK and [i["type"] for i in out["output"]] == ["message", "compaction"]


def test_the_stream_holds_the_summary_back_and_ends_with_the_one_item():
    stream = CompactionStream()
    events = [{"type": "response.created", "sequence_number": 0, "response": {"output": []}},
              {"type": "response.output_item.added", "sequence_number": 1, "item": {"type": "message"}},
              {"type": "response.output_text.delta", "sequence_number": 2, "delta": "S"},
              {"type": "response.completed", "sequence_number": 3, "response": {"output": [
                  {"type": "message", "content": [{"type": "output_text", "text": "S"}]}], "usage": {"x": 1}}}]
    out = [e for event in events for e in stream.feed(event)]
    assert [e["type"] for e in out] == ["response.created", "response.output_item.added",
                                        "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in out] == [0, 1, 2, 3]
    assert out[-1]["response"]["output"] == [out[2]["item"]] and out[-1]["response"]["usage"] == {"x": 1}
    assert out[2]["item"]["encrypted_content"] == wrap_summary("S")


def test_without_tools_the_tool_items_are_transcribed_as_text():
    """``/v1/responses/compact`` declares no tools, and Anthropic refuses tool blocks then."""
    out = summarising_request({"model": "m", "input": [
        TASK, {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"cmd": "ls"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "a.txt"}]})
    assert out["input"][1:3] == [
        {"type": "message", "role": "assistant", "content": '[called the tool shell with {"cmd": "ls"}]'},
        {"type": "message", "role": "user", "content": "[the tool call c1 returned: a.txt]"}]
    assert "tool_choice" not in out
    chat = responses_request_to_chat(out)
    assert not any(m.get("tool_calls") or m["role"] == "tool" for m in chat["messages"])
