"""Responses over WebSocket, in process: the listener driven with a ``websocket`` scope as
hypercorn hands it over, the provider an ``httpx.MockTransport`` the test controls (when each
event comes, or that it never comes), a real SQLite file and the real ledger."""

from __future__ import annotations

import orjson
import httpx
import trio

from tests.inproc import Gateway

RESPONSE = {"id": "resp_up_1", "object": "response", "status": "completed", "model": "gpt-4.1-mini",
            "output": [{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "hello there", "annotations": []}]}],
            "usage": {"input_tokens": 10, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}}
# the provider's events, as it frames them; over the socket each data line must come out as is
DATA = [
    b'{"type":"response.created","sequence_number":0,"response":{"id":"resp_up_1","status":"in_progress",'
    b'"output":[],"usage":null}}',
    b'{"type":"response.output_text.delta",  "sequence_number":1,"item_id":"msg_1","delta":"hello"}',
    b'{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_1","delta":" there"}',
    b'{"type":"response.completed","sequence_number":3,"response":' + orjson.dumps(RESPONSE) + b"}",
]
PRICE = 10 * 400 + 5 * 1600  # gpt-4.1-mini: the usage above, in nano-dollars


def sse(data: list[bytes]) -> list[bytes]:
    return [b"event: " + orjson.loads(d)["type"].encode() + b"\ndata: " + d + b"\n\n" for d in data]


class Upstream(httpx.AsyncByteStream):
    """The provider's stream, event by event; after ``pause_after`` events it waits for ``go``."""

    def __init__(self, chunks: list[bytes], go: trio.Event | None = None, pause_after: int = 1) -> None:
        self.chunks, self.go, self.pause_after = chunks, go, pause_after

    async def __aiter__(self):
        for i, chunk in enumerate(self.chunks):
            if self.go is not None and i == self.pause_after:
                await self.go.wait()
            yield chunk


class Socket:
    """The client side of one WebSocket, as ASGI messages."""

    def __init__(self, gw: Gateway, secret: str | None, path: str = "/v1/responses") -> None:
        headers = [(b"host", b"gateway.test")]
        if secret is not None:
            headers.append((b"authorization", f"Bearer {secret}".encode()))
        self.scope = {"type": "websocket", "asgi": {"version": "3.0"}, "http_version": "1.1", "scheme": "ws",
                      "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                      "headers": headers, "client": ("127.0.0.1", 5555), "server": ("127.0.0.1", 8080),
                      "subprotocols": [], "extensions": {"websocket.http.response": {}}}
        self.gw = gw
        self.to_app, self.app_in = trio.open_memory_channel(100)
        self.app_out, self.from_app = trio.open_memory_channel(100)

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await self.to_app.send({"type": "websocket.connect"})
        task_status.started()
        await self.gw.app(self.scope, self.app_in.receive, self.app_out.send)

    async def next(self) -> dict:
        with trio.fail_after(10):
            return await self.from_app.receive()

    async def event(self) -> tuple[bytes, dict]:
        message = await self.next()
        assert message["type"] == "websocket.send", message
        return message["text"].encode(), orjson.loads(message["text"])

    async def create(self, **body) -> None:
        await self.to_app.send({"type": "websocket.receive", "text": orjson.dumps(
            {"type": "response.create", **body}).decode()})


async def test_a_refused_handshake_is_an_http_answer_in_the_envelope(tmp_path):
    gw = Gateway(tmp_path, lambda request: httpx.Response(500))
    try:
        socket = Socket(gw, "sk-not-a-key")
        async with trio.open_nursery() as nursery:
            await nursery.start(socket.run)
            start = await socket.next()
            body = await socket.next()
        assert start["type"] == "websocket.http.response.start" and start["status"] == 401
        assert orjson.loads(body["body"])["error"]["message"].startswith("Invalid token")
    finally:
        await gw.aclose()


async def test_events_pass_byte_for_byte_and_each_response_is_billed(tmp_path):
    sent: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(orjson.loads(request.content))
        return httpx.Response(200, stream=Upstream(sse(DATA)), headers={"content-type": "text/event-stream"})

    gw = Gateway(tmp_path, handler)
    try:
        account_id, secret = await gw.funded_key()
        socket = Socket(gw, secret)
        async with trio.open_nursery() as nursery:
            await nursery.start(socket.run)
            accept = await socket.next()
            assert accept["type"] == "websocket.accept"
            await socket.create(model="gpt-4.1-mini", input="hi", store=False)
            first = [await socket.event() for _ in DATA]
            await socket.create(model="gpt-4.1-mini", input=[{"role": "user", "content": "more"}],
                                previous_response_id="resp_up_1")
            second = [await socket.event() for _ in DATA]
            await socket.to_app.send({"type": "websocket.disconnect", "code": 1000})
        assert [raw for raw, _ in first] == DATA and [raw for raw, _ in second] == DATA  # not re-encoded
        assert {k: sent[0].get(k) for k in ("model", "input", "store", "stream", "type")} == {
            "model": "gpt-4.1-mini", "input": "hi", "store": False, "stream": True, "type": None}
        assert sent[1]["input"] == [{"type": "message", "role": "user", "content": "hi"}, *RESPONSE["output"],
                                    {"role": "user", "content": "more"}]
        assert "previous_response_id" not in sent[1]
        rows = await gw.usage(account_id)
        assert [(r["status"], r["cost_nano"]) for r in rows] == [("ok", PRICE)] * 2
        assert len({r["request_id"] for r in rows}) == 2
        assert gw.ledger.open_holds == 0
    finally:
        await gw.aclose()


async def test_busy_then_disconnect_mid_response_is_billed_as_a_disconnect(tmp_path):
    go = trio.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Upstream(sse(DATA), go), headers={"content-type": "text/event-stream"})

    gw = Gateway(tmp_path, handler)
    try:
        account_id, secret = await gw.funded_key()
        socket = Socket(gw, secret)
        async with trio.open_nursery() as nursery:
            await nursery.start(socket.run)
            await socket.next()  # accepted
            await socket.create(model="gpt-4.1-mini", input="hi")
            _, created = await socket.event()
            assert created["type"] == "response.created"
            await socket.create(model="gpt-4.1-mini", input="too soon")
            _, busy = await socket.event()
            assert (busy["type"], busy["status"], busy["error"]["code"]) == ("error", 409, "response_in_progress")
            assert gw.ledger.open_holds == 1  # the first still runs, undisturbed
            await socket.to_app.send({"type": "websocket.disconnect", "code": 1001})
            await trio.sleep(0.05)
            go.set()  # the provider goes on after the client left: the pump reads on to its usage
        rows = await gw.usage(account_id)
        assert [(r["status"], r["output_tokens"], r["cost_nano"]) for r in rows] == [
            ("client_disconnected", 5, PRICE)]
        assert gw.ledger.open_holds == 0
    finally:
        await gw.aclose()


async def test_a_warm_up_is_checked_as_the_same_request_would_be_and_costs_nothing(tmp_path):
    """``generate: false`` runs the relay's checks (``Relay.check``: the Responses body reader,
    the stored objects it names, the key's model list), then is answered by the socket: no
    provider call, no hold, no usage row."""
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    gw = Gateway(tmp_path, handler)
    try:
        account_id, secret = await gw.funded_key()
        socket = Socket(gw, secret)
        async with trio.open_nursery() as nursery:
            await nursery.start(socket.run)
            await socket.next()  # accepted
            refused = []
            for body in ({"input": 5}, {"input": "x", "background": True},
                         {"input": "x", "previous_response_id": "resp_never_received"}, {"input": "x", "model": "nope"}):
                await socket.create(**{"model": "gpt-4.1-mini", **body}, generate=False)
                _, error = await socket.event()
                refused.append((error["type"], error["status"], error["error"].get("param"),
                                error["error"]["message"].endswith(")") and "(request id: req_" in error["error"]["message"]))
            await socket.create(model="gpt-4.1-mini", instructions="be brief", input="context", generate=False)
            warm = [(await socket.event())[1] for _ in range(2)]
            await socket.to_app.send({"type": "websocket.disconnect", "code": 1000})
        assert refused == [("error", 400, "input", True), ("error", 400, "background", True),
                           ("error", 400, "previous_response_id", True), ("error", 503, None, True)]
        assert [e["type"] for e in warm] == ["response.created", "response.completed"]
        assert warm[1]["response"]["usage"]["total_tokens"] == 0 and warm[1]["response"]["output"] == []
        assert sent == [] and await gw.usage(account_id) == [] and gw.ledger.open_holds == 0
    finally:
        await gw.aclose()


async def test_other_paths_still_refuse_the_upgrade(tmp_path):
    gw = Gateway(tmp_path, lambda request: httpx.Response(500))
    try:
        _, secret = await gw.funded_key()
        for path, status in (("/v1/chat/completions", 400), ("/v1/realtime", 404), ("/v1/files", 501)):
            socket = Socket(gw, secret, path)
            async with trio.open_nursery() as nursery:
                await nursery.start(socket.run)
                start = await socket.next()
                await socket.next()
            assert (start["type"], start["status"]) == ("websocket.http.response.start", status), path
    finally:
        await gw.aclose()


async def test_a_bug_of_ours_mid_stream_closes_the_socket_with_1011_and_settles(tmp_path, monkeypatch, caplog):
    import gatewayd.responses_ws as responses_ws

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Upstream(sse(DATA)), headers={"content-type": "text/event-stream"})

    real = responses_ws.finished_response
    seen = []

    def broken(name, data):
        seen.append(name)
        if len(seen) == 2:
            raise RuntimeError("a bug of ours")
        return real(name, data)

    monkeypatch.setattr(responses_ws, "finished_response", broken)
    gw = Gateway(tmp_path, handler)
    try:
        account_id, secret = await gw.funded_key()
        socket = Socket(gw, secret)
        async with trio.open_nursery() as nursery:
            await nursery.start(socket.run)
            await socket.next()  # accepted
            await socket.create(model="gpt-4.1-mini", input="hi")
            raw, _ = await socket.event()
            assert raw == DATA[0]
            closed = await socket.next()
            assert (closed["type"], closed["code"]) == ("websocket.close", 1011)
            await socket.to_app.send({"type": "websocket.disconnect", "code": 1011})
        assert "internal error while streaming the answer" in caplog.text and "a bug of ours" in caplog.text
        [row] = await gw.usage(account_id)
        assert row["cost_nano"] <= PRICE and gw.ledger.open_holds == 0
    finally:
        await gw.aclose()
