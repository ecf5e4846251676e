"""A client can leave at any await of the request path, and the hold is settled every time.

In process: the real listener, relay, ledger and SQLite store, with the provider an
``httpx.MockTransport`` whose answers yield to the scheduler between events. The ASGI app
is driven directly, so the test decides when the client's ``http.disconnect`` arrives: a
trio instrument counts scheduler steps and, on run k, lets the disconnect through at step
k. Run for k = 1 .. (steps of a whole request + a margin), so that the cancellation lands
at every checkpoint the request passes through: before the hold, at the hold, while the
provider is called, while a stream is forwarded, while settling. After each run the
account must hold nothing, show at most one usage row per request, and its balance must
equal what was paid less what the rows charged -- each charge within its hold.
"""

from __future__ import annotations

import orjson
import pytest
import trio

from tests.inproc import Gateway, body_then_disconnect, post_scope

WORDS = 6


def _chat_stream_events(model: str) -> list[bytes]:
    events = []
    for i in range(WORDS):
        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model,
                 "choices": [{"index": 0, "delta": {"content": f"w{i} "}, "finish_reason": None}]}
        events.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
    final = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model,
             "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    usage = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model, "choices": [],
             "usage": {"prompt_tokens": 9, "completion_tokens": WORDS, "total_tokens": 9 + WORDS}}
    return [*events, b"data: " + orjson.dumps(final) + b"\n\n", b"data: " + orjson.dumps(usage) + b"\n\n",
            b"data: [DONE]\n\n"]


def _messages_stream_events(model: str) -> list[bytes]:
    def event(name: str, doc: dict) -> bytes:
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **doc}) + b"\n\n"

    out = [event("message_start", {"message": {"id": "m1", "type": "message", "role": "assistant", "model": model,
                                               "content": [], "stop_reason": None,
                                               "usage": {"input_tokens": 9, "output_tokens": 1}}}),
           event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})]
    out += [event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": f"w{i} "}})
            for i in range(WORDS)]
    out += [event("content_block_stop", {"index": 0}),
            event("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": WORDS}}),
            event("message_stop", {})]
    return out


def _gemini_stream_events() -> list[bytes]:
    def event(doc: dict) -> bytes:
        return b"data: " + orjson.dumps(doc) + b"\r\n\r\n"  # Google frames its events with CRLF

    out = [event({"candidates": [{"content": {"role": "model", "parts": [{"text": f"w{i} "}]}, "index": 0}],
                  "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}, "modelVersion": "gemini-x"})
           for i in range(WORDS)]
    out.append(event({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP",
                                      "index": 0}],
                      "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": WORDS,
                                        "totalTokenCount": 9 + WORDS}, "modelVersion": "gemini-x"}))
    return out


GEMINI_ANSWER = {"candidates": [{"content": {"role": "model", "parts": [{"text": "hi there"}]}, "finishReason": "STOP",
                                 "index": 0}],
                 "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 2, "totalTokenCount": 11},
                 "modelVersion": "gemini-x"}


async def _provider(request):
    """The mock provider: OpenAI chat, Anthropic messages or Gemini, streamed or not,
    yielding to the scheduler between events as a network would."""
    body = orjson.loads(request.content)
    await trio.sleep(0)
    gemini = request.url.path.startswith("/v1beta/")
    if gemini:
        model, stream = "gemini-x", request.url.path.endswith(":streamGenerateContent")
    else:
        model, stream = body["model"], body.get("stream")
    anthropic = request.url.path.endswith("/v1/messages")
    if stream:
        if gemini:
            events = _gemini_stream_events()
        else:
            events = _messages_stream_events(model) if anthropic else _chat_stream_events(model)

        async def chunks():
            for event in events:
                await trio.sleep(0)
                yield event

        import httpx
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())
    import httpx
    for _ in range(3):  # generating: the client may leave meanwhile
        await trio.sleep(0)
    if gemini:
        doc = GEMINI_ANSWER
    elif anthropic:
        doc = {"id": "m1", "type": "message", "role": "assistant", "model": model,
               "content": [{"type": "text", "text": "hi there"}], "stop_reason": "end_turn",
               "usage": {"input_tokens": 9, "output_tokens": 2}}
    else:
        doc = {"id": "c1", "object": "chat.completion", "created": 1, "model": model,
               "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi there"},
                            "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}
    return httpx.Response(200, json=doc)


class DisconnectAtStep(trio.abc.Instrument):
    """Counts scheduler steps; at step ``at`` the client's disconnect is let through."""

    def __init__(self, at: int | None, gate: trio.Event) -> None:
        self.at = at
        self.gate = gate
        self.steps = 0

    def before_task_step(self, task) -> None:
        self.steps += 1
        if self.at is not None and self.steps == self.at:
            self.gate.set()


async def _request(gw: Gateway, path: str, body: dict, secret: str, at: int | None,
                   query: bytes = b"") -> tuple[int, list[dict]]:
    raw = orjson.dumps(body)
    gate = trio.Event()
    sent: list[dict] = []
    receive = body_then_disconnect(raw, gate)

    async def send(message):
        sent.append(message)
        await trio.sleep(0)  # the socket write: a checkpoint, where a gone client is noticed

    scope = post_scope(path, secret, raw, query)
    instrument = DisconnectAtStep(at, gate)
    trio.lowlevel.add_instrument(instrument)
    try:
        with trio.fail_after(10):
            await gw.app(scope, receive, send)
            await gw.relay.hangups.wait_idle()  # what the client left is settled by the daemon's task
    finally:
        trio.lowlevel.remove_instrument(instrument)
    return instrument.steps, sent


def _chat(model: str, stream: bool) -> dict:
    return {"model": model, "max_tokens": 50, "stream": stream, "messages": [{"role": "user", "content": "hello there"}]}


GEMINI_BODY = {"contents": [{"role": "user", "parts": [{"text": "hello there"}]}],
               "generationConfig": {"maxOutputTokens": 50}}
GEMINI_API = "/v1beta/models/"

# (path, query, body): every client format, and every provider protocol behind one
CASES = {
    "chat-stream": ("/v1/chat/completions", b"", _chat("gpt-4.1-mini", True)),
    "chat": ("/v1/chat/completions", b"", _chat("gpt-4.1-mini", False)),
    "messages-stream": ("/v1/messages", b"", _chat("claude-haiku-4-5", True)),
    "chat-via-messages": ("/v1/chat/completions", b"", _chat("claude-haiku-4-5", True)),
    "chat-via-gemini": ("/v1/chat/completions", b"", _chat("gemini-2.5-flash", True)),
    "chat-via-gemini-whole": ("/v1/chat/completions", b"", _chat("gemini-2.5-flash", False)),
    "responses-via-messages": ("/v1/responses", b"", {"model": "claude-haiku-4-5", "max_output_tokens": 50,
                                                       "stream": True, "input": "hello there"}),
    "gemini-api-via-messages": (GEMINI_API + "claude-haiku-4-5:streamGenerateContent", b"alt=sse", GEMINI_BODY),
    "gemini-api-via-chat": (GEMINI_API + "gpt-4.1-mini:generateContent", b"", GEMINI_BODY),
    "gemini-api-to-gemini": (GEMINI_API + "gemini-2.5-flash:streamGenerateContent", b"alt=sse", GEMINI_BODY),
}


@pytest.mark.parametrize("case", CASES)
async def test_a_client_leaving_at_any_step_leaves_no_hold_and_exact_money(tmp_path, case):
    path, query, body = CASES[case]
    gw = Gateway(tmp_path, _provider)
    try:
        account_id, secret = await gw.funded_key(usd=10)
        account = gw.directory.accounts[account_id]
        steps, whole = await _request(gw, path, body, secret, at=None, query=query)
        assert any(m.get("status") == 200 for m in whole), whole
        outcomes: dict[str, int] = {}
        for at in range(1, steps + 8):
            await _request(gw, path, body, secret, at=at, query=query)
            assert gw.ledger.open_holds == 0, f"a hold was left open when the client left at step {at}"
            assert account.held_nano == 0, f"held {account.held_nano} after leaving at step {at}"
            assert all(k.held_nano == 0 for k in gw.directory.keys.values() if k.account_id == account_id)
        rows = await gw.usage(account_id)
        for row in rows:
            outcomes[row["status"]] = outcomes.get(row["status"], 0) + 1
        assert len({r["request_id"] for r in rows}) == len(rows), "a request was settled twice"
        assert len(rows) <= steps + 8
        charged = sum(r["cost_nano"] for r in rows)
        assert account.balance_nano == 10 * 10**9 - charged
        assert account.total_paid_nano == 10 * 10**9
        assert "ok" in outcomes and "client_disconnected" in outcomes, outcomes
    finally:
        await gw.aclose()


async def _socket_response(gw: Gateway, secret: str, at: int | None) -> int:
    """One response over the Responses WebSocket; the client closes the socket at step ``at``
    (or once the response completed, whichever comes first). Returns the steps counted."""
    from tests.test_responses_ws import Socket

    socket = Socket(gw, secret)
    gate = trio.Event()
    instrument = DisconnectAtStep(at, gate)

    async def read_until_completed() -> None:
        while True:
            message = await socket.from_app.receive()
            if message["type"] == "websocket.send" and orjson.loads(message["text"])["type"] == "response.completed":
                gate.set()

    async def leave() -> None:
        await gate.wait()
        await socket.to_app.send({"type": "websocket.disconnect", "code": 1001})

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async def serve(task_status=trio.TASK_STATUS_IGNORED) -> None:
                await socket.run(task_status)
                nursery.cancel_scope.cancel()  # the app returned: the socket is done

            await nursery.start(serve)
            assert (await socket.from_app.receive())["type"] == "websocket.accept"
            nursery.start_soon(read_until_completed)
            nursery.start_soon(leave)
            trio.lowlevel.add_instrument(instrument)
            try:
                await socket.create(model="gpt-4.1-mini", input="hello there")
                await gate.wait()
            finally:
                trio.lowlevel.remove_instrument(instrument)
        await gw.relay.hangups.wait_idle()  # what the client left is settled by the daemon's task
    return instrument.steps


async def test_a_websocket_client_leaving_at_any_step_leaves_no_hold_and_exact_money(tmp_path):
    """The same over the Responses WebSocket (agent CLIs): the socket closes at every step of a
    response, from the upgrade's check to the settlement."""
    from tests.test_responses_ws import DATA, sse

    async def provider(request):
        await trio.sleep(0)

        async def chunks():
            for event in sse(DATA):
                await trio.sleep(0)
                yield event

        import httpx
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())

    gw = Gateway(tmp_path, provider)
    try:
        account_id, secret = await gw.funded_key(usd=10)
        account = gw.directory.accounts[account_id]
        steps = await _socket_response(gw, secret, at=None)
        for at in range(1, steps + 8):
            await _socket_response(gw, secret, at=at)
            assert gw.ledger.open_holds == 0, f"a hold was left open when the socket closed at step {at}"
            assert account.held_nano == 0, f"held {account.held_nano} after the socket closed at step {at}"
        rows = await gw.usage(account_id)
        assert len({r["request_id"] for r in rows}) == len(rows), "a response was settled twice"
        assert account.balance_nano == 10 * 10**9 - sum(r["cost_nano"] for r in rows)
        assert {"ok", "client_disconnected"} <= {r["status"] for r in rows}, rows
    finally:
        await gw.aclose()


async def test_a_client_gone_while_the_store_holds_pays_nothing_and_the_provider_is_not_called(tmp_path):
    """Issue 25, point 2: the hold lands after the client left (a database that answers
    slowly: the hold's thread cannot be abandoned), so the request stops at the next
    checkpoint, before any byte reaches a provider: a usage row with no charge, no hold."""
    import time

    calls = []

    async def provider(request):
        calls.append(request)
        return await _provider(request)

    gw = Gateway(tmp_path, provider)
    try:
        account_id, secret = await gw.funded_key(usd=10)
        account = gw.directory.accounts[account_id]
        reserve = gw.store.reserve

        async def slow_reserve(*args, **kwargs):
            await trio.to_thread.run_sync(time.sleep, 0.2)  # not cancellable, like a psycopg call
            return await reserve(*args, **kwargs)

        gw.store.reserve = slow_reserve
        body = {"model": "gpt-4.1-mini", "max_tokens": 50, "stream": True,
                "messages": [{"role": "user", "content": "hello there"}]}
        async with trio.open_nursery() as nursery:
            async def leave_soon():
                await trio.sleep(0.05)
                gate.set()

            gate = trio.Event()
            raw = orjson.dumps(body)
            receive = body_then_disconnect(raw, gate)

            sent = []

            async def send(message):
                sent.append(message)

            scope = post_scope("/v1/chat/completions", secret, raw)
            nursery.start_soon(leave_soon)
            with trio.fail_after(5):
                await gw.app(scope, receive, send)
        assert calls == [], "the provider was called for a client that had left"
        [row] = await gw.usage(account_id)
        assert (row["status"], row["cost_nano"], row["input_tokens"]) == ("client_disconnected", 0, 0)
        assert account.held_nano == 0 and account.balance_nano == 10 * 10**9
    finally:
        await gw.aclose()
