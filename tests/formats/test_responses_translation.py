"""Responses <-> chat translation, checked against the real openai-python SDK.

The request side is a table of bodies and the chat bodies they must become. The answer
side is checked twice: field by field, and by handing our output to the SDK itself
(strict pydantic validation of every event, and ``responses.create`` /
``responses.stream`` over an ``httpx.MockTransport``), because "the official SDK works"
is the contract and the SDK's accumulator is stricter than any hand-written check.
"""

from __future__ import annotations

import json
import typing

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from gatewayd.formats import sse
from gatewayd.formats.errors import TranslationError
from gatewayd.formats.responses import (
    ChatToResponsesStream,
    chat_response_to_responses,
    responses_request_to_chat,
)
from gatewayd.formats.responses_request import IGNORED_FIELDS

RESP_ID = "resp_abc123"
CREATED = 1_760_000_000

# -- helpers ---------------------------------------------------------------------------

_EVENT_CLASSES = {
    typing.get_args(cls.model_fields["type"].annotation)[0]: cls
    for cls in typing.get_args(typing.get_args(ResponseStreamEvent)[0])
}


def validate_event(event: dict) -> None:
    """Strict pydantic validation against the SDK's own class for this event type."""
    _EVENT_CLASSES[event["type"]].model_validate(event)


def sdk_client(body: bytes, content_type: str) -> tuple[openai.OpenAI, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"content-type": content_type}, content=body)

    client = openai.OpenAI(
        api_key="sk-test",
        base_url="http://gateway.test/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
        max_retries=0,
    )
    return client, seen


def sse_body(events: list[dict]) -> bytes:
    return b"".join(sse.encode(event, event=event["type"]) for event in events)


def chunk(delta: dict | None = None, finish_reason=None, usage=None) -> dict:
    out = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "claude-x",
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def tool_start(index: int, call_id: str, name: str) -> dict:
    return chunk(
        {"tool_calls": [{"index": index, "id": call_id, "type": "function",
                         "function": {"name": name, "arguments": ""}}]}
    )


def tool_args(index: int, fragment: str) -> dict:
    return chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})


USAGE = {
    "prompt_tokens": 20,
    "completion_tokens": 7,
    "total_tokens": 27,
    "prompt_tokens_details": {"cached_tokens": 5},
    "completion_tokens_details": {"reasoning_tokens": 2},
}


def run_stream(chunks: list[dict], request: dict | None = None, *, end: str = "finish") -> list[dict]:
    request = request or {"model": "claude-x", "input": "hi", "stream": True}
    stream = ChatToResponsesStream(request=request, response_id=RESP_ID, created_at=CREATED)
    events: list[dict] = []
    for c in chunks:
        events += stream.feed(c)
    events += stream.finish() if end == "finish" else stream.fail({"message": "upstream connection lost"})
    for event in events:
        validate_event(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


def types(events: list[dict]) -> list[str]:
    return [e["type"] for e in events]


def order(events: list[dict]) -> list[str]:
    """Event types without the ``response.`` prefix, to compare with a split string."""
    return [e["type"].removeprefix("response.") for e in events]


# -- request translation ---------------------------------------------------------------


def chat_call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_string_input_becomes_one_user_message():
    chat = responses_request_to_chat({"model": "claude-x", "input": "hello"})
    assert chat == {"model": "claude-x", "messages": [{"role": "user", "content": "hello"}]}


def test_instructions_lead_as_system_message():
    chat = responses_request_to_chat({"model": "m", "instructions": "Be brief.", "input": "hi"})
    assert chat["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]


def test_items_with_tool_round_trip():
    body = {
        "model": "m",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
            {"role": "user", "content": "weather in Paris and Rome?"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA..."},
            {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather", "arguments": '{"c":"P"}'},
            {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "weather", "arguments": '{"c":"R"}'},
            {"type": "function_call_output", "id": "fco_1", "call_id": "call_1", "output": "18C"},
            {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "21C"}]},
        ],
    }
    assert responses_request_to_chat(body)["messages"] == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [chat_call("call_1", "weather", '{"c":"P"}'), chat_call("call_2", "weather", '{"c":"R"}')],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "21C"},
    ]


def test_function_call_without_preceding_text_and_text_after_calls():
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"role": "assistant", "content": "then this"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        ],
    }
    messages = responses_request_to_chat(body)["messages"]
    assert messages[1:] == [
        {"role": "assistant", "content": "then this", "tool_calls": [chat_call("c1", "f", "{}")]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": None, "tool_calls": [chat_call("c2", "f", "{}")]},
    ]


def test_images_and_pdf_become_chat_parts():
    pdf = "data:application/pdf;base64,JVBERi0x"
    content = [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBO", "detail": "high"},
        {"type": "input_image", "image_url": "https://example.com/a.jpg"},
        {"type": "input_file", "filename": "a.pdf", "file_data": pdf},
    ]
    body = {"model": "m", "input": [{"role": "user", "content": content}]}
    assert responses_request_to_chat(body)["messages"][0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
        {"type": "file", "file": {"filename": "a.pdf", "file_data": pdf}},
    ]


@pytest.mark.parametrize(
    "part, param",
    [
        ({"type": "input_image", "file_id": "file-1", "detail": "auto"}, "input[0].content[0].file_id"),
        ({"type": "input_file", "file_id": "file-1"}, "input[0].content[0].file_id"),
        ({"type": "input_file", "file_data": "data:text/plain;base64,aGk="}, "input[0].content[0].file_data"),
        ({"type": "input_audio", "input_audio": {}}, "input[0].content[0]"),
    ],
)
def test_unstorable_or_unknown_parts_are_refused(part, param):
    with pytest.raises(TranslationError) as info:
        responses_request_to_chat({"model": "m", "input": [{"role": "user", "content": [part]}]})
    assert info.value.param == param


def test_tools_tool_choice_and_options():
    params = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    body = {
        "model": "m",
        "input": "hi",
        "tools": [{"type": "function", "name": "w", "description": "Weather", "parameters": params, "strict": True}],
        "tool_choice": {"type": "function", "name": "weather"},
        "parallel_tool_calls": False,
        "max_output_tokens": 300,
        "temperature": 0.2,
        "top_p": 0.9,
        "reasoning": {"effort": "high", "summary": "auto"},
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": True}},
        "stream": True,
    }
    chat = responses_request_to_chat(body)
    function = {"name": "w", "description": "Weather", "parameters": params, "strict": True}
    assert chat["tools"] == [{"type": "function", "function": function}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert chat["parallel_tool_calls"] is False
    assert chat["max_completion_tokens"] == 300
    assert (chat["temperature"], chat["top_p"]) == (0.2, 0.9)
    assert chat["reasoning_effort"] == "high"
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
    }
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert "max_output_tokens" not in chat and "text" not in chat and "reasoning" not in chat


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
def test_tool_choice_strings_carried(choice):
    assert responses_request_to_chat({"model": "m", "input": "x", "tool_choice": choice})["tool_choice"] == choice


@pytest.mark.parametrize("fmt, expected", [
    ({"type": "json_object"}, {"type": "json_object"}),
    ({"type": "text"}, None),
])
def test_text_format(fmt, expected):
    chat = responses_request_to_chat({"model": "m", "input": "x", "text": {"format": fmt}})
    assert chat.get("response_format") == expected


def test_bookkeeping_fields_are_ignored():
    body = {"model": "m", "input": "x", "background": False, "stream": False}
    body.update({field: "v" for field in IGNORED_FIELDS})
    body.update({"store": False, "include": ["reasoning.encrypted_content"], "metadata": {"a": "b"}})
    assert responses_request_to_chat(body) == {"model": "m", "messages": [{"role": "user", "content": "x"}]}


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"conversation": {"id": "conv_1"}}, "conversation"),
        ({"background": True}, "background"),
        ({"tools": [{"type": "function"}]}, "tools[0].name"),
        ({"tools": [{"name": "f"}]}, "tools[0].type"),
        ({"tools": ["web_search"]}, "tools[0]"),
        ({"tools": [{"type": "custom", "name": "g", "format": {"type": "grammar"}}]}, "tools[0].format"),
        ({"tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "web_search"}]}]}, "tools[0].tools[0]"),
        ({"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}}, "tool_choice"),
        ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
    ],
)
def test_refusals(extra, param):
    with pytest.raises(TranslationError) as info:
        responses_request_to_chat({"model": "m", "input": "x", **extra})
    assert info.value.param == param
    if param in ("previous_response_id", "conversation"):
        assert "not supported for this model" in info.value.message
        assert "send the whole conversation in input" in info.value.message
    if param == "tools[0].tools[0]":
        assert "function and custom tools only" in info.value.message


@pytest.mark.parametrize("kind", ["web_search_call", "item_reference", "local_shell_call"])
def test_unknown_item_type_names_its_index(kind):
    items = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
        {"type": kind, "id": "x_1"},
    ]
    with pytest.raises(TranslationError) as info:
        responses_request_to_chat({"model": "m", "input": items})
    assert info.value.param == "input[3]"
    if kind == "item_reference":  # says what to change: responses are not stored
        assert "send store: false" in info.value.message
    assert kind in info.value.message


def test_bad_role_and_missing_call_id():
    with pytest.raises(TranslationError) as info:
        responses_request_to_chat({"model": "m", "input": [{"role": "tool", "content": "x"}]})
    assert info.value.param == "input[0].role"
    with pytest.raises(TranslationError) as info:
        responses_request_to_chat({"model": "m", "input": [{"type": "function_call_output", "output": "x"}]})
    assert info.value.param == "input[0].call_id"


# -- whole-answer translation ----------------------------------------------------------


def chat_completion(message: dict, finish_reason="stop", usage=USAGE) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": CREATED,
        "model": "upstream-id",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}],
        "usage": usage,
    }


REQUEST = {"model": "claude-x", "input": "hi", "instructions": "Be brief.", "max_output_tokens": 50}


def translate(chat: dict, request: dict = REQUEST) -> dict:
    return chat_response_to_responses(chat, request=request, response_id=RESP_ID, created_at=CREATED)


def test_text_answer():
    response = translate(chat_completion({"content": "Hello there."}))
    assert response["id"] == RESP_ID and response["object"] == "response"
    assert response["status"] == "completed" and response["incomplete_details"] is None
    assert response["model"] == "claude-x" and response["created_at"] == CREATED
    assert response["instructions"] == "Be brief." and response["max_output_tokens"] == 50
    part = {"type": "output_text", "text": "Hello there.", "annotations": [], "logprobs": []}
    assert response["output"] == [
        {"type": "message", "id": "msg_abc123_0", "status": "completed", "role": "assistant", "content": [part]}
    ]
    assert response["usage"] == {
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 5, "cache_write_tokens": 0},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 27,
    }
    assert Response.model_validate(response).output_text == "Hello there."


def test_reasoning_and_tool_calls():
    message = {
        "content": "Let me check.",
        "reasoning_content": "User wants weather.",
        "tool_calls": [chat_call("call_1", "weather", '{"city":"Paris"}'), chat_call("call_2", "weather", "{}")],
    }
    response = translate(chat_completion(message, "tool_calls"))
    output = response["output"]
    assert [item["type"] for item in output] == ["reasoning", "message", "function_call", "function_call"]
    summary = [{"type": "summary_text", "text": "User wants weather."}]
    assert output[0] == {"type": "reasoning", "id": "rs_abc123_0", "summary": summary}
    assert output[2] == {
        "type": "function_call", "id": "fc_abc123_2", "call_id": "call_1",
        "name": "weather", "arguments": '{"city":"Paris"}', "status": "completed",
    }
    assert response["status"] == "completed"
    assert Response.model_validate(response).output_text == "Let me check."


@pytest.mark.parametrize("finish, reason", [("length", "max_output_tokens"), ("content_filter", "content_filter")])
def test_cut_answer_is_incomplete(finish, reason):
    response = translate(chat_completion({"content": "Once upon a"}, finish))
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": reason}
    assert response["output"][-1]["status"] == "incomplete"
    Response.model_validate(response)


def test_missing_usage_and_total_computed():
    assert translate(chat_completion({"content": "x"}, usage=None))["usage"] is None
    response = translate(chat_completion({"content": "x"}, usage={"prompt_tokens": 3, "completion_tokens": 4}))
    assert response["usage"]["total_tokens"] == 7
    assert response["usage"]["output_tokens_details"] == {"reasoning_tokens": 0}


def test_sdk_create_parses_translated_answer():
    request = {
        "model": "claude-x",
        "input": "hi",
        "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}, "strict": False}],
        "tool_choice": "auto",
        "text": {"format": {"type": "text"}},
        "reasoning": {"effort": "low"},
    }
    message = {"content": "Sunny.", "tool_calls": [chat_call("call_9", "weather", "{}")]}
    response = translate(chat_completion(message, "tool_calls"), request)
    client, seen = sdk_client(json.dumps(response).encode(), "application/json")
    parsed = client.responses.create(**request)
    assert seen[0].url.path == "/v1/responses"
    assert parsed.output_text == "Sunny."
    assert parsed.usage.input_tokens == 20 and parsed.usage.input_tokens_details.cached_tokens == 5
    assert parsed.output[1].type == "function_call" and parsed.output[1].call_id == "call_9"
    assert parsed.tools[0].name == "weather" and parsed.reasoning.effort == "low"


# -- stream translation ----------------------------------------------------------------


def test_text_stream_event_order_and_ids():
    events = run_stream(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hello"}),
            chunk({"content": " world"}),
            chunk({}, finish_reason="stop"),
            chunk(None, usage=USAGE),
        ]
    )
    assert order(events) == """
        created in_progress
        output_item.added content_part.added
            output_text.delta output_text.delta output_text.done content_part.done
            output_item.done
        completed
    """.split()
    item_ids = {e["item_id"] for e in events if "item_id" in e}
    assert item_ids == {"msg_abc123_0"}
    assert events[2]["item"]["id"] == events[8]["item"]["id"] == "msg_abc123_0"
    assert events[2]["item"]["status"] == "in_progress" and events[8]["item"]["status"] == "completed"
    assert events[6]["text"] == "Hello world"
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["usage"]["total_tokens"] == 27
    assert final["output"] == [events[8]["item"]]


def test_reasoning_text_and_two_tool_calls_stream():
    events = run_stream(
        [
            chunk({"role": "assistant", "reasoning_content": "Think"}),
            chunk({"reasoning_content": "ing."}),
            chunk({"content": "Checking."}),
            tool_start(0, "call_1", "weather"),
            tool_args(0, '{"city":'),
            tool_args(0, '"Paris"}'),
            tool_start(1, "call_2", "weather"),
            tool_args(1, '{"city":"Rome"}'),
            chunk({}, finish_reason="tool_calls"),
            chunk(None, usage=USAGE),
        ]
    )
    assert order(events) == """
        created in_progress
        output_item.added reasoning_summary_part.added
            reasoning_summary_text.delta reasoning_summary_text.delta reasoning_summary_text.done
            reasoning_summary_part.done output_item.done
        output_item.added content_part.added output_text.delta output_text.done content_part.done output_item.done
        output_item.added
            function_call_arguments.delta function_call_arguments.delta function_call_arguments.done
            output_item.done
        output_item.added function_call_arguments.delta function_call_arguments.done output_item.done
        completed
    """.split()
    added = [e for e in events if e["type"] == "response.output_item.added"]
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["output_index"] for e in added] == [0, 1, 2, 3] == [e["output_index"] for e in done]
    assert [e["item"]["id"] for e in added] == [e["item"]["id"] for e in done]
    assert added[2]["item"]["arguments"] == "" and added[2]["item"]["call_id"] == "call_1"
    assert events[6]["text"] == "Thinking." and done[0]["item"]["summary"][0]["text"] == "Thinking."
    assert events[18]["arguments"] == '{"city":"Paris"}'
    for event in events:
        if "item_id" in event:
            assert event["item_id"] == added[event["output_index"]]["item"]["id"]
    final_types = [item["type"] for item in events[-1]["response"]["output"]]
    assert final_types == ["reasoning", "message", "function_call", "function_call"]


def test_text_after_tool_call_closes_the_call_first():
    events = run_stream(
        [tool_start(0, "call_1", "f"), tool_args(0, "{}"), chunk({"content": "done"}), chunk({}, finish_reason="stop")]
    )
    assert order(events) == """
        created in_progress
        output_item.added function_call_arguments.delta function_call_arguments.done output_item.done
        output_item.added content_part.added output_text.delta output_text.done content_part.done output_item.done
        completed
    """.split()


def test_length_ends_incomplete():
    events = run_stream([chunk({"content": "Once upon"}), chunk({}, finish_reason="length"), chunk(None, usage=USAGE)])
    assert types(events)[-2:] == ["response.output_item.done", "response.incomplete"]
    assert events[-2]["item"]["status"] == "incomplete"
    final = events[-1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["usage"]["output_tokens"] == 7


def test_error_chunk_fails_the_stream_and_keeps_partial_output():
    stream = ChatToResponsesStream(request={"model": "claude-x"}, response_id=RESP_ID, created_at=CREATED)
    events = stream.feed(chunk({"content": "par"}))
    events += stream.feed({"error": {"message": "overloaded", "type": "overloaded_error", "code": None}})
    assert types(events)[-2:] == ["error", "response.failed"]
    assert events[-2]["message"] == "overloaded" and events[-2]["code"] == "overloaded_error"
    failed = events[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": "overloaded"}
    assert failed["output"][0]["content"][0]["text"] == "par" and failed["output"][0]["status"] == "incomplete"
    for event in events:
        validate_event(event)
    assert stream.feed(chunk({"content": "more"})) == [] and stream.finish() == [] and stream.fail({}) == []


def test_fail_before_any_chunk_still_starts_with_created():
    events = run_stream([], end="fail")
    assert types(events) == ["response.created", "response.in_progress", "error", "response.failed"]
    assert events[2]["message"] == "upstream connection lost"


def test_rate_limit_error_code_maps_to_sdk_member():
    stream = ChatToResponsesStream(request={"model": "m"}, response_id=RESP_ID, created_at=CREATED)
    events = stream.fail({"error": {"message": "slow down", "type": "rate_limit_error"}})
    assert events[-1]["response"]["error"]["code"] == "rate_limit_exceeded"


def test_empty_stream_completes_with_no_output():
    events = run_stream([chunk({"role": "assistant", "content": ""}), chunk({}, finish_reason="stop")])
    assert types(events) == ["response.created", "response.in_progress", "response.completed"]
    assert events[-1]["response"]["output"] == []


def test_response_property_mid_stream():
    stream = ChatToResponsesStream(request={"model": "m"}, response_id=RESP_ID, created_at=CREATED)
    stream.feed(chunk({"content": "Hel"}))
    stream.feed(chunk({"content": "lo"}))
    snapshot = stream.response
    assert snapshot["status"] == "in_progress"
    assert snapshot["output"][0]["content"][0]["text"] == "Hello"
    Response.model_validate(snapshot)


def test_tool_call_deltas_without_index():
    events = run_stream(
        [
            chunk({"tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{"}}]}),
            chunk({"tool_calls": [{"function": {"arguments": "}"}}]}),
            chunk({"tool_calls": [{"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}),
            chunk({}, finish_reason="tool_calls"),
        ]
    )
    calls = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [(c["call_id"], c["name"], c["arguments"]) for c in calls] == [("a", "f", "{}"), ("b", "g", "{}")]


def test_refusal_stream_is_its_own_content_part():
    events = run_stream([chunk({"refusal": "I can't"}), chunk({"refusal": " help."}), chunk({}, finish_reason="stop")])
    assert "response.refusal.delta" in types(events) and "response.refusal.done" in types(events)
    assert events[-1]["response"]["output"][0]["content"] == [{"type": "refusal", "refusal": "I can't help."}]


# -- the real SDK consuming our stream -------------------------------------------------


def test_sdk_stream_accumulates_text():
    request = {"model": "claude-x", "input": "hi", "stream": True}
    events = run_stream(
        [chunk({"role": "assistant", "content": "Hello"}), chunk({"content": " world"}),
         chunk({}, "stop"), chunk(None, usage=USAGE)],
        request,
    )
    client, seen = sdk_client(sse_body(events), "text/event-stream")
    with client.responses.stream(model="claude-x", input="hi") as stream:
        seen_types = [event.type for event in stream]
        final = stream.get_final_response()
    assert json.loads(seen[0].content)["stream"] is True
    assert seen_types == types(events)
    assert final.output_text == "Hello world"
    assert final.id == RESP_ID and final.status == "completed" and final.usage.total_tokens == 27


def test_sdk_stream_accumulates_reasoning_and_strict_tool_calls():
    tools = [
        {
            "type": "function",
            "name": "weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
            "strict": True,
        }
    ]
    request = {"model": "claude-x", "input": "hi", "tools": tools, "stream": True}
    events = run_stream(
        [
            chunk({"reasoning_content": "Need weather."}),
            chunk({"content": "One moment."}),
            tool_start(0, "call_1", "weather"),
            tool_args(0, '{"city":'),
            tool_args(0, '"Paris"}'),
            chunk({}, "tool_calls"),
            chunk(None, usage=USAGE),
        ],
        request,
    )
    client, _ = sdk_client(sse_body(events), "text/event-stream")
    with client.responses.stream(model="claude-x", input="hi", tools=tools) as stream:
        deltas = [e for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    assert deltas[-1].snapshot == '{"city":"Paris"}'
    assert final.output_text == "One moment."
    call = final.output[2]
    assert call.type == "function_call" and call.call_id == "call_1"
    assert call.parsed_arguments == {"city": "Paris"}
    assert final.output[0].type == "reasoning" and final.output[0].summary[0].text == "Need weather."


def test_sdk_stream_sees_failure_as_no_final_response():
    stream_t = ChatToResponsesStream(request={"model": "claude-x"}, response_id=RESP_ID, created_at=CREATED)
    events = stream_t.feed(chunk({"content": "par"})) + stream_t.fail({"error": {"message": "boom"}})
    client, _ = sdk_client(sse_body(events), "text/event-stream")
    with client.responses.stream(model="claude-x", input="hi") as stream:
        got = [event.type for event in stream]
        assert got[-2:] == ["error", "response.failed"]
        with pytest.raises(RuntimeError):
            stream.get_final_response()
