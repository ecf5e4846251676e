"""Every stream pipe fed shapes it does not expect, at the first event and mid-stream.

Whatever the provider sends, a stream ends the same way: the hold settled, exactly one
usage row, and (once bytes went out) an error event in the client's own format. Who is
to blame follows relay.PROVIDER_FAULTS: a shape checked on purpose (``InvalidAnswer``) or
JSON that does not parse is the provider's bad answer (502 before the first byte,
"the provider stream broke off" after, nothing logged as ours); an exception our own code
trips over is the gateway's fault (500, or an error event saying the gateway failed, the
traceback logged with the request id). A pass-through forwards what it does not read, so
there the stream simply ends early. In every case the client is charged nothing it did
not receive: nothing before the first byte; after it, the input and what was streamed.
"""

from __future__ import annotations

import logging

import httpx
import orjson
import pytest

from tests.inproc import Gateway
from tests.test_our_faults import BLOCK_START, DELTA, MSG_START, chunk, sse

# client format, path, request body
PIPES = {
    "chat": ("chat", "/v1/chat/completions", "gpt-4.1-mini"),
    "messages": ("messages", "/v1/messages", "claude-haiku-4-5"),
    "responses": ("responses", "/v1/responses", "gpt-4.1-mini"),
    "messages-to-chat": ("chat", "/v1/chat/completions", "claude-haiku-4-5"),
    "gemini-to-chat": ("chat", "/v1/chat/completions", "gemini-2.5-flash"),
    "gemini-to-responses": ("responses", "/v1/responses", "gemini-2.5-flash"),
    "chat-to-responses": ("responses", "/v1/responses", "deepseek-chat"),
    "messages-to-responses": ("responses", "/v1/responses", "claude-haiku-4-5"),
}
UPSTREAM = {  # each pipe's upstream protocol
    "chat": "chat", "messages": "messages", "responses": "responses", "messages-to-chat": "messages",
    "gemini-to-chat": "gemini", "gemini-to-responses": "gemini", "chat-to-responses": "chat",
    "messages-to-responses": "messages",
}


def request_body(client: str, model: str) -> dict:
    if client == "chat":
        return {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    if client == "messages":
        return {"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    return {"model": model, "input": "hi", "stream": True}


def gemini(parts, **extra) -> dict:
    return {"candidates": [{"content": {"role": "model", "parts": parts}, **extra}]}


# A good opening that streams "one two three four" to the client, per upstream protocol.
GOOD_START = {
    "chat": [(None, chunk("one two three four"))],
    "messages": [MSG_START, BLOCK_START, DELTA],
    "responses": [
        ("response.created", {"type": "response.created", "response": {"id": "r1", "status": "in_progress"}}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "m1", "output_index": 0,
                                        "content_index": 0, "delta": "one two three four"}),
    ],
    "gemini": [(None, gemini([{"text": "one two three four"}]))],
}

# Shapes each upstream protocol's pipes may not expect (each a valid JSON event).
BAD = {
    "chat": {
        "choices-number": {"choices": 5},
        "choice-number": {"choices": [5]},
        "delta-number": {"choices": [{"index": 0, "delta": 5}]},
        "tool-calls-number": {"choices": [{"index": 0, "delta": {"tool_calls": 5}}]},
        "tool-call-number": {"choices": [{"index": 0, "delta": {"tool_calls": [5]}}]},
        "function-number": {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": 5}]}}]},
        "content-number": {"choices": [{"index": 0, "delta": {"content": 5}}]},
        "usage-strings": {"choices": [], "usage": {"prompt_tokens": "x", "completion_tokens": [1]}},
        "event-number": 5,
        "event-array": [1, 2],
    },
    "messages": {
        "start-message-number": ("message_start", {"type": "message_start", "message": 5}),
        "block-number": ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": 5}),
        "tool-name-number": ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": "t1", "name": 5, "input": {}}}),
        "delta-number": ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": 5}),
        "text-number": ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "text_delta", "text": 5}}),
        "usage-number": ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                           "usage": 5}),
        "event-number": ("content_block_delta", 5),
    },
    "responses": {
        "delta-number": ("response.output_text.delta", {"type": "response.output_text.delta", "delta": 5}),
        "args-delta-array": ("response.function_call_arguments.delta",
                             {"type": "response.function_call_arguments.delta", "delta": [1]}),
        "event-number": ("response.output_text.delta", 5),
    },
    "gemini": {
        "candidates-number": {"candidates": 5},
        "candidate-number": {"candidates": [5]},
        "content-number": {"candidates": [{"content": 5}]},
        "parts-number": {"candidates": [{"content": {"parts": 5}}]},
        "part-number": gemini([5]),
        "text-number": gemini([{"text": 5}]),
        "function-call-number": gemini([{"functionCall": 5}]),
        "usage-number": {"usageMetadata": 5, **gemini([{"text": "x"}])},
        "event-number": 5,
    },
}

CASES = [
    pytest.param(pipe, shape, at_start, id=f"{pipe}-{shape}-{'first' if at_start else 'mid'}")
    for pipe, upstream in UPSTREAM.items()
    for shape in BAD[upstream]
    for at_start in (True, False)
]


def as_event(upstream: str, item) -> tuple[str | None, object]:
    return item if upstream in ("messages", "responses") else (None, item)


async def run_stream(tmp_path, pipe: str, events: list) -> tuple[httpx.Response, list[dict], Gateway]:
    answer = sse(*events)

    class Body(httpx.AsyncByteStream):  # one event a read, then the provider closes
        async def __aiter__(self):
            for part in answer.split(b"\n\n"):
                if part:
                    yield part + b"\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Body(), headers={"content-type": "text/event-stream"})

    client, path, model = PIPES[pipe]
    gw = Gateway(tmp_path, handler)
    try:
        account_id, secret = await gw.funded_key()
        response = await gw.http.post(path, json=request_body(client, model),
                                      headers={"authorization": f"Bearer {secret}"})
        rows = await gw.usage(account_id)
        return response, rows, gw
    finally:
        await gw.aclose()


def events_of(text: str) -> list[tuple[str | None, object]]:
    out = []
    for block in text.strip().split("\n\n"):
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                raw = line.removeprefix("data: ")
                data = raw if raw == "[DONE]" else orjson.loads(raw)
        out.append((name, data))
    return out


def error_message(client: str, text: str) -> str:
    """The stream's error event in the client's format (it must have one), as its message."""
    events = events_of(text)
    if client == "chat":
        name, data = events[-1]
        assert isinstance(data, dict) and isinstance(data.get("error"), dict), f"no chat error chunk last: {text}"
        return data["error"]["message"]
    if client == "messages":
        name, data = events[-1]
        assert name == "error" and data["type"] == "error", f"no messages error event last: {text}"
        return data["error"]["message"]
    errors = [data for name, data in events if name == "error"]
    assert errors, f"no responses error event: {text}"
    assert events[-1][0] in ("error", "response.failed"), f"the stream did not end on its error: {text}"
    return errors[-1]["message"]


def ours(caplog, request_id: str) -> bool:
    """Whether the gateway logged the request as its own fault (then with its traceback)."""
    found = [r for r in caplog.records if r.levelno >= logging.ERROR]
    for record in found:
        assert getattr(record, "fields", {}).get("request_id") == request_id, \
            f"an error logged without the request id: {record.getMessage()}"
        assert record.exc_info is not None, "a fault logged without its traceback"
    return bool(found)


@pytest.mark.parametrize("pipe,shape,at_start", CASES)
async def test_an_unexpected_shape_settles_once_and_ends_in_the_clients_format(tmp_path, caplog, pipe, shape,
                                                                               at_start):
    upstream = UPSTREAM[pipe]
    bad = as_event(upstream, BAD[upstream][shape])
    events = [bad] if at_start else [*GOOD_START[upstream], bad]
    response, rows, gw = await run_stream(tmp_path, pipe, events)
    client = PIPES[pipe][0]
    request_id = response.headers["x-request-id"]

    assert (gw.ledger.open_holds, gw.ledger.held_nano) == (0, 0), "the hold was left open"
    [row] = rows
    blamed_on_us = ours(caplog, request_id)
    if response.status_code != 200:  # nothing reached the client: an error answer, nothing charged
        assert at_start
        assert row["cost_nano"] == 0 and row["http_status"] == response.status_code
        if blamed_on_us:
            assert (response.status_code, row["status"]) == (500, "internal_error"), response.text
            assert "gateway bug" in response.text
        else:
            assert response.status_code == 502 and row["status"].startswith("upstream_"), response.text
        return
    message = error_message(client, response.text)
    assert row["http_status"] == 200
    if blamed_on_us:
        assert row["status"] == "internal_error" and "gateway bug" in message, (row, message)
    else:
        assert row["status"] in ("upstream_broken", "upstream_invalid"), row
        assert "provider" in message and "gateway bug" not in message, message
    if not at_start:  # the client received the opening: the input and what was streamed are charged
        assert "one two three four" in response.text
        assert row["output_tokens"] >= 4 and row["input_tokens"] > 0 and row["cost_nano"] > 0, row


async def test_counting_that_fails_still_settles_at_the_input_estimate(tmp_path, caplog, monkeypatch):
    from gatewayd.formats import pipes

    def broken(self):
        raise RuntimeError("a counting bug")

    monkeypatch.setattr(pipes.ChatPassthrough, "produced_text", broken)
    response, [row], gw = await run_stream(tmp_path, "chat", [(None, chunk("one two three four"))])
    assert (gw.ledger.open_holds, gw.ledger.held_nano) == (0, 0)
    assert "ended the stream early" in error_message("chat", response.text)
    assert row["status"] == "upstream_broken" and row["input_tokens"] > 0 and row["cost_nano"] > 0
    assert ours(caplog, response.headers["x-request-id"]), "the counting fault was not logged"


async def test_a_shutdown_before_the_first_byte_is_a_503_not_a_gateway_bug(tmp_path, caplog):
    import trio

    class Silent(httpx.AsyncByteStream):
        async def __aiter__(self):
            await trio.sleep(30)
            yield b""

    gw = Gateway(tmp_path, lambda request: httpx.Response(200, stream=Silent(),
                                                          headers={"content-type": "text/event-stream"}))
    try:
        account_id, secret = await gw.funded_key()

        async def shut_down():  # SIGTERM's cut, while the provider has sent nothing yet
            await trio.sleep(0.2)
            gw.relay.drain.begin(0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(shut_down)
            response = await gw.http.post("/v1/chat/completions", json=request_body("chat", "gpt-4.1-mini"),
                                          headers={"authorization": f"Bearer {secret}"})
        [row] = await gw.usage(account_id)
    finally:
        await gw.aclose()
    assert response.status_code == 503, response.text
    assert "shutting down" in response.text and "gateway bug" not in response.text
    assert (row["status"], row["cost_nano"]) == ("shutdown", 0)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("pipe", ["gemini-to-chat", "gemini-to-responses"])
@pytest.mark.parametrize("shape", ["candidate-number", "content-number", "parts-number", "part-number",
                                   "text-number", "function-call-number"])
@pytest.mark.parametrize("at_start", [True, False], ids=["first", "mid"])
async def test_a_gemini_event_of_the_wrong_shape_is_the_providers_bad_answer(tmp_path, caplog, pipe, shape, at_start):
    bad = (None, BAD["gemini"][shape])
    events = [bad] if at_start else [*GOOD_START["gemini"], bad, (None, gemini([{"text": " five"}]))]
    response, [row], gw = await run_stream(tmp_path, pipe, events)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    if at_start:
        assert response.status_code == 502, response.text
        assert (row["status"], row["cost_nano"]) == ("upstream_invalid", 0)
        return
    assert "provider stream broke off (InvalidAnswer)" in error_message(PIPES[pipe][0], response.text)
    assert "five" not in response.text, "the stream went on past the provider's bad event"
    assert row["status"] == "upstream_broken" and row["output_tokens"] >= 4
