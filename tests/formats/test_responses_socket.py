"""The Responses WebSocket protocol part: events to bodies, and the socket's last response."""

from __future__ import annotations

import orjson
import pytest

from gatewayd.formats.errors import TranslationError
from gatewayd.formats.responses_socket import (
    LastResponse, create_body, error_event, event_type, finished_response, is_warmup, remembered, socket_event,
    warmup_events,
)


def test_a_create_event_is_the_http_body_streamed():
    event = {"type": "response.create", "model": "m", "input": "hi", "store": False}
    assert create_body(event, None) == {"model": "m", "input": "hi", "store": False, "stream": True}
    assert create_body({**event, "stream": True}, None)["stream"] is True
    with pytest.raises(TranslationError) as refused:
        create_body({**event, "stream": False}, None)
    assert refused.value.param == "stream"


def test_a_previous_response_id_naming_the_last_response_becomes_the_whole_history():
    earlier = {"model": "m", "input": "first", "stream": True}
    output = [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]
    last = remembered(earlier, {"id": "resp_1", "output": output})
    assert last == LastResponse("resp_1", ({"type": "message", "role": "user", "content": "first"}, *output))
    new = [{"type": "function_call_output", "call_id": "c1", "output": "ok"}]
    body = create_body({"type": "response.create", "model": "m", "previous_response_id": "resp_1", "input": new},
                       last)
    assert "previous_response_id" not in body
    assert body["input"] == [*last.items, *new]
    # another id is left to the endpoint's rule; without a last response nothing is resolved
    other = create_body({"type": "response.create", "model": "m", "previous_response_id": "resp_9", "input": []}, last)
    assert other["previous_response_id"] == "resp_9" and other["input"] == []
    assert create_body({"type": "response.create", "previous_response_id": "resp_1", "input": "x"},
                       None)["previous_response_id"] == "resp_1"


def test_remembered_needs_an_id():
    assert remembered({"input": "x"}, {"output": []}) is None
    assert remembered({"input": "x"}, {"id": "", "output": []}) is None


@pytest.mark.parametrize("text", ["nope", "[1]", '{"model": "m"}', '{"type": 3}'])
def test_a_message_that_is_not_an_event_is_the_clients_error(text):
    with pytest.raises(TranslationError):
        socket_event(text)


def test_the_events_that_end_a_response_are_found_by_name_or_by_their_head():
    completed = b'{"type":"response.completed","response":{"id":"r","output":[]}}'
    assert event_type(None, completed) == "response.completed"
    assert event_type("response.completed", completed) == "response.completed"
    assert event_type("response.output_text.delta", b'{"type":"response.output_text.delta"}') is None
    assert event_type(None, b'{"type":"error","code":"x"}') == "error"
    assert finished_response(None, completed) == {"id": "r", "output": []}
    assert finished_response("error", b'{"type":"error"}') is None
    assert finished_response(None, b'{"type":"response.output_text.delta","delta":"response.completed"}') is None


def test_an_error_event_carries_the_status_and_the_error_object():
    event = orjson.loads(error_event(402, b'{"error":{"message":"no money","type":"insufficient_quota","code":"x"}}'))
    assert event == {"type": "error", "status": 402,
                     "error": {"message": "no money", "type": "insufficient_quota", "code": "x"}}
    plain = orjson.loads(error_event(502, b"Bad Gateway"))
    assert plain["status"] == 502 and plain["error"]["message"] == "Bad Gateway"


def test_a_warm_up_is_recognised_and_answered_without_usage():
    body = create_body({"type": "response.create", "model": "m", "input": "x", "generate": False}, None)
    assert is_warmup(body)
    assert "generate" not in create_body({"type": "response.create", "model": "m", "generate": True}, None)
    created, completed = (orjson.loads(e) for e in warmup_events(body, "resp_w", 7))
    assert created["type"] == "response.created" and completed["type"] == "response.completed"
    assert completed["response"]["id"] == "resp_w" and completed["response"]["output"] == []
    assert completed["response"]["usage"]["input_tokens"] == completed["response"]["usage"]["output_tokens"] == 0
    assert finished_response(None, warmup_events(body, "resp_w", 7)[1])["id"] == "resp_w"
