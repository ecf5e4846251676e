"""Our faults are ours: a provider's bad answer is a 502, an exception in gatewayd's own code a 500.

Each pipe and each non-streaming finisher is fed answers it does not expect, through the
whole in-process gateway (tests/inproc.py): JSON that does not parse is the provider's
fault (502 ``bad_gateway`` or, mid-stream, "the provider stream broke off"), and nothing is
charged before the first byte; valid JSON of a shape our code trips over is the gateway's
fault: 500 ``internal_error`` (mid-stream: an error event saying the gateway failed), the
traceback logged with the request id, and charged nothing the client did not receive.
"""

from __future__ import annotations

import logging

import httpx
import orjson
import pytest

from gatewayd.formats import usage as usage_mod
from tests.inproc import Gateway


def sse(*events: tuple[str | None, object]) -> bytes:
    out = []
    for name, data in events:
        payload = data if isinstance(data, bytes) else orjson.dumps(data)
        out.append((f"event: {name}\n" if name else "").encode() + b"data: " + payload + b"\n\n")
    return b"".join(out)


def chunk(text: str) -> dict:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


MSG_START = ("message_start", {"type": "message_start", "message": {
    "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m",
    "usage": {"input_tokens": 7, "output_tokens": 1}}})
BLOCK_START = ("content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "text", "text": ""}})
DELTA = ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "one two three four"}})


async def run(tmp_path, answer: bytes, path: str, body: dict, *, stream_answer: bool):
    class Body(httpx.AsyncByteStream):  # unread, like a real network answer
        async def __aiter__(self):  # one event a read, so a stream can fail after its first bytes
            for part in answer.split(b"\n\n"):
                if part:
                    yield part + b"\n\n" if stream_answer else part

    def handler(request: httpx.Request) -> httpx.Response:
        kind = "text/event-stream" if stream_answer else "application/json"
        return httpx.Response(200, stream=Body(), headers={"content-type": kind})

    gw = Gateway(tmp_path, handler)
    try:
        account_id, secret = await gw.funded_key()
        response = await gw.http.post(path, json=body, headers={"authorization": f"Bearer {secret}"})
        [row] = await gw.usage(account_id)
        return response, row
    finally:
        await gw.aclose()


def chat(model: str, stream: bool = False) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}


def messages(stream: bool = False) -> dict:
    return {"model": "claude-haiku-4-5", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}],
            "stream": stream}


def logged_fault(caplog, request_id: str) -> logging.LogRecord:
    found = [r for r in caplog.records
             if r.levelno == logging.ERROR and getattr(r, "fields", {}).get("request_id") == request_id]
    assert found, f"no error logged for {request_id}: {[r.getMessage() for r in caplog.records]}"
    assert found[0].exc_info is not None, "the traceback was not logged"
    return found[0]


# -- non-streaming: the finisher ---------------------------------------------------------

OUR_FAULTS_PLAIN = [
    # a translated chat answer whose content is not a list: messages_response_to_chat trips
    pytest.param("/v1/chat/completions", chat("claude-haiku-4-5"), {"content": 5, "usage": {"input_tokens": 3}},
                 id="chat-via-messages"),
    pytest.param("/v1/responses", {"model": "claude-haiku-4-5", "input": "hi"},
                 {"content": [{"type": "text", "text": 5}], "usage": {"input_tokens": 3, "output_tokens": 2}},
                 id="responses-via-messages"),
]


@pytest.mark.parametrize("path,body,answer", OUR_FAULTS_PLAIN)
async def test_our_translator_failing_on_an_answer_is_a_500_and_charges_nothing(tmp_path, caplog, path, body,
                                                                                answer):
    response, row = await run(tmp_path, orjson.dumps(answer), path, body, stream_answer=False)
    assert response.status_code == 500, response.text
    error = response.json()["error"]
    assert error["code"] == "internal_error"
    assert "gateway bug, not a provider error" in error["message"]
    assert (row["status"], row["http_status"], row["cost_nano"]) == ("internal_error", 500, 0)
    logged_fault(caplog, response.headers["x-request-id"])


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", chat("claude-haiku-4-5")),
    ("/v1/chat/completions", chat("gpt-4.1-mini")),
    ("/v1/messages", messages()),
    ("/v1/responses", {"model": "deepseek-chat", "input": "hi"}),
], ids=["chat-via-messages", "chat", "messages", "responses-via-chat"])
@pytest.mark.parametrize("answer", [b"<html>502 Bad Gateway</html>", b"[1, 2]"], ids=["not-json", "not-object"])
async def test_an_answer_that_is_not_a_json_object_is_the_providers_502(tmp_path, caplog, path, body, answer):
    response, row = await run(tmp_path, answer, path, body, stream_answer=False)
    assert response.status_code == 502, response.text
    assert "invalid response" in response.text
    assert (row["status"], row["http_status"], row["cost_nano"]) == ("upstream_invalid", 502, 0)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "a provider fault was logged as ours"


async def test_embeddings_without_data_is_the_providers_502(tmp_path):
    response, row = await run(tmp_path, b'{"object": "list", "usage": {"prompt_tokens": 2}}', "/v1/embeddings",
                              {"model": "text-embedding-3-small", "input": ["a"]}, stream_answer=False)
    assert response.status_code == 502, response.text
    assert row["status"] == "upstream_invalid"


# -- streams: the pipes --------------------------------------------------------------------

def bug(*args, **kwargs):
    raise KeyError("a bug")


STREAM_OURS_BEFORE_FIRST_BYTE = [
    # the usage reader of message_start trips (the readers take any shape, so a bug is planted)
    pytest.param("/v1/messages", messages(True), sse(MSG_START), (usage_mod.MessagesTally, "start"),
                 id="messages"),
    # a chat chunk that is a JSON number: the responses translator tests `"error" in 5`
    pytest.param("/v1/responses", {"model": "deepseek-chat", "input": "hi", "stream": True}, sse((None, 5)), None,
                 id="responses-via-chat"),
    # the reader of a terminal responses event trips
    pytest.param("/v1/responses", {"model": "gpt-4.1-mini", "input": "hi", "stream": True},
                 sse(("response.completed", {"type": "response.completed", "response": {}})),
                 (usage_mod, "from_response"), id="responses"),
]


@pytest.mark.parametrize("path,body,answer,planted", STREAM_OURS_BEFORE_FIRST_BYTE)
async def test_a_pipe_failing_before_the_first_byte_is_a_500_and_charges_nothing(tmp_path, caplog, monkeypatch, path,
                                                                                 body, answer, planted):
    if planted is not None:
        monkeypatch.setattr(*planted, bug)
    response, row = await run(tmp_path, answer, path, body, stream_answer=True)
    assert response.status_code == 500, response.text
    assert "internal_error" in response.text or "gateway bug" in response.text
    assert (row["status"], row["http_status"], row["cost_nano"]) == ("internal_error", 500, 0)
    logged_fault(caplog, response.headers["x-request-id"])


@pytest.mark.parametrize("path,body", [
    ("/v1/messages", messages(True)), ("/v1/chat/completions", chat("claude-haiku-4-5", True)),
    ("/v1/chat/completions", chat("gpt-4.1-mini", True)),
], ids=["messages", "chat-via-messages", "chat"])
async def test_a_stream_that_is_not_json_is_the_providers_502(tmp_path, caplog, path, body):
    response, row = await run(tmp_path, b"data: <html>oops</html>\n\n", path, body, stream_answer=True)
    assert response.status_code == 502, response.text
    assert (row["status"], row["cost_nano"]) == ("upstream_invalid", 0)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_chat_pipe_failing_mid_stream_says_the_gateway_failed_and_charges_what_was_sent(tmp_path, caplog):
    # a usage-looking chunk that is a JSON array: ChatPassthrough calls .get on it
    answer = sse((None, chunk("one two three four")), (None, b'[{"usage": {"prompt_tokens": 3}}]'))
    response, row = await run(tmp_path, answer, "/v1/chat/completions", chat("gpt-4.1-mini", True),
                              stream_answer=True)
    assert response.status_code == 200
    assert "one two three four" in response.text
    last = orjson.loads(response.text.strip().split("\n\n")[-1].removeprefix("data: "))
    assert "gateway failed" in last["error"]["message"] and "gateway bug" in last["error"]["message"]
    assert row["status"] == "internal_error" and row["http_status"] == 200
    assert row["output_tokens"] == 4 and row["cost_nano"] > 0  # what the client did receive
    logged_fault(caplog, response.headers["x-request-id"])


async def test_a_messages_pipe_failing_mid_stream_sends_an_error_event(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(usage_mod.MessagesTally, "delta", bug)  # the message_delta reader trips
    answer = sse(MSG_START, BLOCK_START, DELTA, ("message_delta", {"type": "message_delta", "usage": {}}))
    response, row = await run(tmp_path, answer, "/v1/messages", messages(True), stream_answer=True)
    assert response.status_code == 200
    tail = response.text.strip().split("\n\n")[-1]
    assert tail.startswith("event: error")
    assert "gateway bug" in tail
    assert row["status"] == "internal_error"
    # the 4 streamed o200k tokens, counted as Claude's tokenizer would (x 3/2: docs/billing.md)
    assert row["output_tokens"] == 6 and row["input_tokens"] == 7
    logged_fault(caplog, response.headers["x-request-id"])


async def test_a_broken_chunk_mid_stream_is_the_providers_fault(tmp_path, caplog):
    answer = sse((None, chunk("one two three four")), (None, b'{"usage": {"prompt_tokens": 3'))
    response, row = await run(tmp_path, answer, "/v1/chat/completions", chat("gpt-4.1-mini", True),
                              stream_answer=True)
    assert response.status_code == 200
    assert "the provider stream broke off" in response.text
    assert row["status"] == "upstream_broken"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_an_exception_outside_the_relay_is_a_logged_500_with_the_request_id(tmp_path, caplog, monkeypatch):
    from gatewayd import endpoints

    def broken(relay, ctx):
        raise KeyError("a bug")

    monkeypatch.setattr(endpoints, "models_list", broken)
    gw = Gateway(tmp_path, lambda request: httpx.Response(500))
    try:
        _, secret = await gw.funded_key()
        response = await gw.http.get("/v1/models", headers={"authorization": f"Bearer {secret}"})
    finally:
        await gw.aclose()
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    request_id = response.headers["x-request-id"]
    assert request_id in response.json()["error"]["message"]
    logged_fault(caplog, request_id)


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", chat("gemini-2.5-flash")),
    ("/v1/responses", {"model": "gemini-2.5-flash", "input": "hi"}),
], ids=["chat", "responses"])
@pytest.mark.parametrize("answer", [
    {"candidates": [{"content": 5}]}, {"candidates": [{"content": {"parts": [{"text": 5}]}}]}, {"candidates": [5]},
    {"candidates": [{"content": {"parts": [{"functionCall": 5}]}}]},
], ids=["content", "text", "candidate", "function-call"])
async def test_a_gemini_answer_of_the_wrong_shape_is_the_providers_502_not_an_empty_success(tmp_path, caplog, path,
                                                                                            body, answer):
    answer = {**answer, "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2}}
    response, row = await run(tmp_path, orjson.dumps(answer), path, body, stream_answer=False)
    assert response.status_code == 502, response.text
    assert (row["status"], row["http_status"], row["cost_nano"]) == ("upstream_invalid", 502, 0)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "a provider fault was logged as ours"
