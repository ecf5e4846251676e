"""Responses tools on a chat upstream: custom (free-form) tools and namespaces become chat
functions and their calls come back as the items the client offered them as; built-in
tools are dropped unless the request requires them. Shapes as Codex CLI 0.169 sends them."""

from __future__ import annotations

import json

import pytest

from gatewayd.formats.errors import TranslationError
from gatewayd.formats.responses import ChatToResponsesStream, chat_response_to_responses, responses_request_to_chat
from gatewayd.formats.responses_tools import DROPPED_REASON, plan_tools
from tests.formats.test_responses_translation import (
    CREATED, RESP_ID, USAGE, chat_completion, chunk, run_stream, sdk_client, sse_body, tool_args, tool_start,
)

GRAMMAR = 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\n'
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files. FREEFORM, not JSON.",
               "format": {"type": "grammar", "syntax": "lark", "definition": GRAMMAR}}
EXEC = {"type": "function", "name": "exec_command", "description": "Runs a command", "strict": False,
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}
AGENTS = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [
    {"type": "function", "name": "close_agent", "parameters": {"type": "object", "properties": {}}},
    {"type": "custom", "name": "note"}]}
CODEX_TOOLS = [EXEC, APPLY_PATCH, AGENTS, {"type": "web_search", "external_web_access": True},
               {"type": "tool_search", "execution": "client", "parameters": {"type": "object"}},
               {"type": "image_generation"}, {"type": "web_search"}]
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hi \"there\"\n*** End Patch\n"


def request(**extra) -> dict:
    return {"model": "claude-x", "input": "edit it", "tools": CODEX_TOOLS, **extra}


def test_codex_tools_become_chat_functions_and_built_ins_are_dropped():
    chat = responses_request_to_chat(request(tool_choice="auto"))
    functions = [t["function"] for t in chat["tools"]]
    assert all(t["type"] == "function" for t in chat["tools"])
    assert [f["name"] for f in functions] == ["exec_command", "apply_patch", "multi_agent_v1__close_agent",
                                              "multi_agent_v1__note"]
    assert functions[0] == {"name": "exec_command", "description": "Runs a command", "strict": False,
                            "parameters": EXEC["parameters"]}
    patch = functions[1]
    assert patch["parameters"] == {"type": "object", "properties": {"input": {
        "type": "string", "description": "The tool's whole input as raw text (a free-form tool: not JSON)."}},
        "required": ["input"], "additionalProperties": False}
    assert patch["description"].startswith("Edit files. FREEFORM, not JSON.\n\nThe input must match this lark grammar:")
    assert patch["description"].endswith(GRAMMAR)
    assert chat["tool_choice"] == "auto"
    assert plan_tools(CODEX_TOOLS).dropped == ("web_search", "tool_search", "image_generation")


def test_custom_tool_without_format_keeps_its_description():
    [tool] = plan_tools([{"type": "custom", "name": "say", "description": "Say it", "format": {"type": "text"}}]).chat_tools
    assert tool["function"]["description"] == "Say it"


@pytest.mark.parametrize("choice, expected", [
    ({"type": "custom", "name": "apply_patch"}, {"type": "function", "function": {"name": "apply_patch"}}),
    ({"type": "function", "name": "close_agent", "namespace": "multi_agent_v1"},
     {"type": "function", "function": {"name": "multi_agent_v1__close_agent"}}),
    ("required", "required"),
])
def test_tool_choice_names_the_chat_function(choice, expected):
    assert responses_request_to_chat(request(tool_choice=choice))["tool_choice"] == expected


@pytest.mark.parametrize("choice, named", [
    ({"type": "web_search"}, "web_search"),
    ({"type": "web_search_preview"}, "web_search_preview"),
    ({"type": "file_search"}, "file_search"),
    ({"type": "image_generation"}, "image_generation"),
    ({"type": "code_interpreter"}, "code_interpreter"),
    ({"type": "mcp", "server_label": "deepwiki"}, "mcp"),
])
def test_a_required_built_in_tool_is_a_400_naming_it(choice, named):
    with pytest.raises(TranslationError) as info:
        responses_request_to_chat(request(tool_choice=choice))
    assert info.value.param == "tool_choice"
    assert info.value.message == (f"tool_choice requires the {named} tool, which is not available for this model "
                                  f"({DROPPED_REASON})")


def test_required_with_only_built_in_tools_is_a_400():
    with pytest.raises(TranslationError) as info:
        responses_request_to_chat({"model": "m", "input": "x", "tools": [{"type": "web_search"}, {"type": "file_search"}],
                                   "tool_choice": "required"})
    assert info.value.param == "tool_choice" and "web_search, file_search" in info.value.message
    # not required: dropped, and the request runs without tools
    chat = responses_request_to_chat({"model": "m", "input": "x", "tools": [{"type": "web_search"}]})
    assert "tools" not in chat


def test_earlier_custom_and_namespaced_calls_go_back_as_chat_tool_calls():
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "edit it"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "sealed"},
        {"type": "custom_tool_call", "id": "ctc_1", "status": "completed", "call_id": "call_1", "name": "apply_patch",
         "input": PATCH},
        {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "close_agent",
         "namespace": "multi_agent_v1", "arguments": "{}"},
        {"type": "custom_tool_call_output", "call_id": "call_1", "output": "Success. Updated: A hello.txt"},
        {"type": "function_call_output", "call_id": "call_2", "output": "closed"},
    ]
    chat = responses_request_to_chat({"model": "m", "input": items, "tools": CODEX_TOOLS})
    assert chat["messages"] == [
        {"role": "user", "content": "edit it"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "apply_patch", "arguments": json.dumps({"input": PATCH})}},
            {"id": "call_2", "type": "function", "function": {"name": "multi_agent_v1__close_agent", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Success. Updated: A hello.txt"},
        {"role": "tool", "tool_call_id": "call_2", "content": "closed"},
    ]


@pytest.mark.parametrize("item, param", [
    ({"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": {"patch": 1}}, "input[0].input"),
    ({"type": "custom_tool_call", "name": "apply_patch", "input": ""}, "input[0].call_id"),
    ({"type": "function_call", "call_id": "c", "name": "f", "namespace": 3, "arguments": "{}"}, "input[0].namespace"),
    ({"type": "custom_tool_call_output", "output": "x"}, "input[0].call_id"),
])
def test_malformed_tool_items_are_refused(item, param):
    with pytest.raises(TranslationError) as info:
        responses_request_to_chat({"model": "m", "input": [item]})
    assert info.value.param == param


def chat_call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_answer_gives_custom_tool_calls_and_namespaced_function_calls():
    chat = chat_completion({"role": "assistant", "content": None, "tool_calls": [
        chat_call("call_1", "apply_patch", json.dumps({"input": PATCH})),
        chat_call("call_2", "multi_agent_v1__close_agent", "{}"),
        chat_call("call_3", "exec_command", '{"cmd": "ls"}'),
        chat_call("call_4", "multi_agent_v1__note", "not json at all"),
    ]}, "tool_calls")
    doc = chat_response_to_responses(chat, request=request(), response_id=RESP_ID, created_at=CREATED)
    assert doc["output"] == [
        {"type": "custom_tool_call", "id": "ctc_abc123_0", "call_id": "call_1", "name": "apply_patch", "input": PATCH,
         "status": "completed"},
        {"type": "function_call", "id": "fc_abc123_1", "call_id": "call_2", "name": "close_agent", "arguments": "{}",
         "status": "completed", "namespace": "multi_agent_v1"},
        {"type": "function_call", "id": "fc_abc123_2", "call_id": "call_3", "name": "exec_command",
         "arguments": '{"cmd": "ls"}', "status": "completed"},
        # a model that wrote bare text for a free-form tool meant that text
        {"type": "custom_tool_call", "id": "ctc_abc123_3", "call_id": "call_4", "name": "note",
         "input": "not json at all", "status": "completed", "namespace": "multi_agent_v1"},
    ]
    assert doc["tools"] == CODEX_TOOLS  # the request's tools echoed as the client sent them


def test_stream_sends_a_custom_tool_call_as_its_own_events():
    arguments = json.dumps({"input": PATCH})
    events = run_stream([
        chunk({"content": "Patching."}),
        tool_start(0, "call_1", "apply_patch"),
        tool_args(0, arguments[:10]), tool_args(0, arguments[10:25]), tool_args(0, arguments[25:]),
        tool_start(1, "call_2", "multi_agent_v1__close_agent"),
        tool_args(1, "{}"),
        chunk({}, "tool_calls"),
        chunk(None, usage=USAGE),
    ], request(stream=True))
    custom = [e for e in events if e.get("output_index") == 1]
    assert [e["type"] for e in custom] == ["response.output_item.added", "response.custom_tool_call_input.delta",
                                           "response.custom_tool_call_input.done", "response.output_item.done"]
    added, delta, done, item_done = custom
    assert added["item"] == {"type": "custom_tool_call", "id": "ctc_abc123_1", "call_id": "call_1",
                             "name": "apply_patch", "input": "", "status": "in_progress"}
    assert delta["delta"] == PATCH and done["input"] == PATCH and delta["item_id"] == done["item_id"] == "ctc_abc123_1"
    assert item_done["item"]["input"] == PATCH and item_done["item"]["status"] == "completed"
    namespaced = [e for e in events if e.get("output_index") == 2]
    assert namespaced[0]["item"]["name"] == "close_agent" and namespaced[0]["item"]["namespace"] == "multi_agent_v1"
    assert [e["name"] for e in namespaced if e["type"] == "response.function_call_arguments.done"] == ["close_agent"]
    final = events[-1]["response"]
    assert [o["type"] for o in final["output"]] == ["message", "custom_tool_call", "function_call"]

    client, _ = sdk_client(sse_body(events), "text/event-stream")
    with client.responses.stream(model="claude-x", input="edit it") as stream:
        for _ in stream:
            pass
        response = stream.get_final_response()
    assert response.output[1].type == "custom_tool_call" and response.output[1].input == PATCH
    assert response.output[2].namespace == "multi_agent_v1"


def test_stream_cut_inside_a_custom_call_reports_it_incomplete():
    stream = ChatToResponsesStream(request=request(stream=True), response_id=RESP_ID, created_at=CREATED)
    stream.feed(tool_start(0, "call_1", "apply_patch"))
    stream.feed(tool_args(0, '{"input": "*** Begin'))
    events = stream.fail({"message": "gone"})
    [item] = events[-1]["response"]["output"]
    assert item["type"] == "custom_tool_call" and item["status"] == "incomplete"
    assert item["input"] == '{"input": "*** Begin'  # not valid JSON yet: the raw fragments, never lost
