"""The relay in-process: the order of ``Relay.serve``, the endpoint table, the error envelopes,
the provider-bytes boundary, the store failing at settlement, the idle timeout, cool-downs
and the request log line.

No process is spawned: the real listener, relay, ledger and SQLite file (tests/inproc.py),
an ``httpx.MockTransport`` as the provider, and trio's ``MockClock`` (autojump) driving the
deadlines, which run on trio's clock.
"""

from __future__ import annotations

import logging
import sqlite3

import httpx
import orjson
import pytest
import trio
import trio.testing

from gatewayd import endpoints
from gatewayd.api_routes import ApiRoutes
from gatewayd.errors import BodyError, GatewayError, error_body
from gatewayd.formats import usage as usage_mod
from gatewayd.store.base import StoreUnavailable
from tests.clocks import thread_aware_clock
from tests.inproc import Gateway

COMPLETION = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def chunk(text: str) -> bytes:
    doc = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return b"data: " + orjson.dumps(doc) + b"\n\n"


USAGE_CHUNK = b"data: " + orjson.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                         "choices": [], "usage": COMPLETION["usage"]}) + b"\n\n"


def chat(stream: bool = False, **extra) -> dict:
    return {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}], "stream": stream, **extra}


async def silence(request: httpx.Request) -> None:
    """A provider that stops sending, met as a real connection meets it: the read timeout the
    relay put on the request (``Upstream``'s idle cut-off) runs out on trio's clock, as
    httpcore's does, and the read raises ``httpx.ReadTimeout``."""
    read_timeout = request.extensions["timeout"]["read"]
    assert read_timeout, "a stream's request carries the idle cut-off as its read timeout"
    with trio.move_on_after(read_timeout):
        await trio.sleep_forever()
    raise httpx.ReadTimeout("timed out", request=request)


class Provider:
    """The provider's side: what it answers (set per test) and how often it was asked."""

    def __init__(self) -> None:
        self.calls = 0
        self.parts: list[bytes] = [orjson.dumps(COMPLETION)]
        self.hang_after_parts = False
        self.content_type = "application/json"

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        provider = self

        class Body(httpx.AsyncByteStream):
            async def __aiter__(self):
                for part in provider.parts:
                    yield part
                if provider.hang_after_parts:
                    await silence(request)

        return httpx.Response(200, stream=Body(), headers={"content-type": self.content_type})

    def streams(self, *parts: bytes, hang: bool = False) -> None:
        self.parts = list(parts)
        self.hang_after_parts = hang
        self.content_type = "text/event-stream"


@pytest.fixture
async def gw(tmp_path):
    provider = Provider()
    gateway = Gateway(tmp_path, provider.handle)
    gateway.provider = provider
    try:
        yield gateway
    finally:
        await gateway.aclose()


@pytest.fixture
def mock_clock(monkeypatch):
    """Jumps ahead whenever every task waits for longer than 20 ms of real time and no store
    thread is running (tests/clocks.py)."""
    return thread_aware_clock(monkeypatch)


async def post(gw: Gateway, secret: str, body: dict | bytes, path: str = "/v1/chat/completions") -> httpx.Response:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return await gw.http.post(path, content=content, headers={"authorization": f"Bearer {secret}",
                                                              "anthropic-version": "2023-06-01"})


# -- the endpoint table and the envelope -------------------------------------------------------


def test_every_endpoint_spec_is_routed_and_names_its_envelope(tmp_path):
    gw = Gateway(tmp_path, lambda request: httpx.Response(500))
    routes = ApiRoutes(gw.relay)
    assert {e.path for e in endpoints.ENDPOINTS} == {
        "/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/responses/compact", "/v1/embeddings",
        "/v1beta/models/{model}:generateContent", "/v1beta/models/{model}:streamGenerateContent",
        "/v1beta/models/{model}:countTokens"}
    for endpoint in endpoints.ENDPOINTS:
        path = endpoint.path.replace("{model}", "gemini-2.5-flash")
        assert routes.route(endpoint.method, path) is not None, endpoint.path
        assert endpoint.envelope in ("openai", "anthropic", "google")
    assert routes.route("GET", "/v1/chat/completions") is None
    # the model in the path: any id, never none; each method its own spec
    assert routes.route("POST", "/v1beta/models/:generateContent") is None
    assert routes.route("POST", "/v1beta/models/gemini-2.5-flash:embedContent") is None
    assert endpoints.path_model("/v1beta/models/models/gemini-2.5-flash:countTokens") == "gemini-2.5-flash"
    assert routes.route("GET", "/v1beta/models") is not None
    assert routes.route("GET", "/v1beta/models/gemini-2.5-flash") is not None
    assert routes.route("GET", "/v1beta/models/gemini-2.5-flash:generateContent") is None


def test_one_writer_puts_every_error_in_its_envelope():
    checked = GatewayError(401, "Invalid token", "")  # a check before the model step
    assert orjson.loads(error_body(checked, "r1", "anthropic")) == orjson.loads(checked.chat_body("r1")) == {
        "error": {"message": "Invalid token (request id: r1)", "type": "invalid_request_error", "code": ""}}
    body = BodyError("missing required field 'max_tokens'", param="max_tokens")
    assert orjson.loads(error_body(body, "r2", "anthropic")) == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "missing required field 'max_tokens' (request id: r2)"}}
    assert orjson.loads(error_body(body, "r2"))["error"]["param"] == "max_tokens"
    assert orjson.loads(error_body(body, "r2", "google")) == {"error": {
        "code": 400, "message": "missing required field 'max_tokens' (request id: r2)", "status": "INVALID_ARGUMENT",
        "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "invalid_request_error",
                     "domain": "gatewayd"}]}}
    assert orjson.loads(error_body(checked, "r1", "google")) == orjson.loads(checked.chat_body("r1"))


# -- the order of Relay.serve ------------------------------------------------------------------


async def test_the_key_comes_before_the_body_and_its_error_is_in_the_openai_envelope(gw):
    for path in ("/v1/chat/completions", "/v1/messages"):
        response = await post(gw, "sk-not-a-key", b"{not json", path)
        assert response.status_code == 401, response.text
        assert response.json()["error"]["message"].startswith("Invalid token")
    assert gw.provider.calls == 0


async def test_a_body_error_comes_before_the_model_check_and_nothing_is_held(gw):
    account_id, secret = await gw.funded_key()
    response = await post(gw, secret, {"model": "no-such-model", "messages": "hi"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "messages"
    response = await post(gw, secret, {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 503, response.text  # the body is right: now the model is checked
    assert response.json()["error"]["code"] == "model_not_found"
    assert gw.provider.calls == 0
    assert await gw.usage(account_id) == []
    assert gw.directory.accounts[account_id].held_nano == 0


async def test_messages_errors_at_the_model_step_are_in_anthropics_envelope(gw):
    _, secret = await gw.funded_key()
    response = await post(gw, secret, {"model": "claude-haiku-4-5", "messages": []}, "/v1/messages")
    assert response.status_code == 400, response.text
    assert response.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": (
        f"missing required field 'max_tokens' (request id: {response.headers['x-request-id']})")}}


async def test_a_served_request_is_held_settled_and_logged_once(gw, caplog):
    account_id, secret = await gw.funded_key()
    caplog.set_level(logging.INFO, logger="gatewayd.request")
    response = await post(gw, secret, chat())
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "hello"
    [row] = await gw.usage(account_id)
    assert (row["status"], row["http_status"], row["input_tokens"], row["output_tokens"]) == ("ok", 200, 10, 5)
    assert row["cost_nano"] > 0
    lines = [r.fields for r in caplog.records if r.name == "gatewayd.request"]
    [line] = [f for f in lines if f["request_id"] == response.headers["x-request-id"]]
    assert (line["endpoint"], line["model"], line["status"], line["usage_status"]) == (
        "chat", "gpt-4.1-mini", 200, "ok")
    assert line["cost_nano"] == row["cost_nano"] and line["route"].endswith("/gpt-4.1-mini")
    assert gw.directory.accounts[account_id].held_nano == 0


# -- the provider-bytes boundary: whose fault -------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_json_the_provider_sent_that_does_not_parse_is_the_providers_502(gw, stream):
    account_id, secret = await gw.funded_key()
    if stream:
        gw.provider.streams(b"data: {\"choices\": [\n\n")
    else:
        gw.provider.parts = [b'{"id": "c1", "choices": [']
    response = await post(gw, secret, chat(stream=stream))
    assert response.status_code == 502, response.text
    assert response.json()["error"]["code"] == "bad_gateway"
    [row] = await gw.usage(account_id)
    assert (row["status"], row["cost_nano"]) == ("upstream_invalid", 0)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_json_error_inside_our_own_code_is_ours_not_the_providers(gw, caplog, monkeypatch, stream):
    """Before the boundary, any JSONDecodeError was blamed on the provider (502, or "the
    provider stream broke off"); one raised after it, by our code, is a 500 of ours."""

    def broken(doc):
        return orjson.loads(b"{our own bytes")

    monkeypatch.setattr(usage_mod, "from_chat_completion", broken)
    account_id, secret = await gw.funded_key()
    if stream:
        gw.provider.streams(chunk("one"), USAGE_CHUNK, b"data: [DONE]\n\n")
    response = await post(gw, secret, chat(stream=stream, stream_options={"include_usage": True}) if stream
                          else chat())
    request_id = response.headers["x-request-id"]
    if stream:
        assert response.status_code == 200
        assert b"the gateway failed" in response.content and b"broke off" not in response.content
    else:
        assert response.status_code == 500, response.text
        assert response.json()["error"]["code"] == "internal_error"
    [row] = await gw.usage(account_id)
    assert row["status"] == "internal_error"
    faults = [r for r in caplog.records if r.levelno == logging.ERROR
              and getattr(r, "fields", {}).get("request_id") == request_id]
    assert faults and faults[0].exc_info is not None


# -- the store failing at settlement ------------------------------------------------------------


async def test_a_store_outage_at_settlement_is_a_503_store_unavailable_not_a_gateway_bug(gw, caplog, monkeypatch):
    _, secret = await gw.funded_key()

    async def store_down(*args, **kwargs):
        raise StoreUnavailable("PostgreSQL: connection refused")

    monkeypatch.setattr(gw.store, "settle", store_down)
    caplog.set_level(logging.INFO)
    response = await post(gw, secret, chat())
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "store_unavailable"
    assert response.headers["retry-after"] == "2"
    request_id = response.headers["x-request-id"]
    mine = [r for r in caplog.records if getattr(r, "fields", {}).get("request_id") == request_id]
    assert not [r for r in mine if r.levelno >= logging.ERROR], [r.getMessage() for r in mine]
    [warning] = [r for r in mine if r.levelno == logging.WARNING]
    assert warning.fields["error"] == "store_unavailable" and warning.exc_info is None
    [line] = [r.fields for r in mine if r.name == "gatewayd.request"]
    assert line["status"] == 503
    assert 'status="503"' in gw.relay.metrics.render().decode()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_sqlite_write_failing_at_settlement_is_store_unavailable_too(gw, caplog, monkeypatch, stream):
    """A full disk under the SQLite file: the settlement's write fails; the store says
    ``StoreUnavailable`` and the client is told so (mid-stream: an error event), not "gateway bug"."""
    _, secret = await gw.funded_key()
    write = gw.store.writer.write

    async def disk_full(job):
        if getattr(job, "__qualname__", "").startswith("SQLiteStore.settle"):
            raise sqlite3.OperationalError("database or disk is full")
        return await write(job)

    monkeypatch.setattr(gw.store.writer, "write", disk_full)
    if stream:
        gw.provider.streams(chunk("one"), USAGE_CHUNK, b"data: [DONE]\n\n")
    response = await post(gw, secret, chat(stream=stream, stream_options={"include_usage": True}) if stream
                          else chat())
    request_id = response.headers["x-request-id"]
    if stream:
        assert response.status_code == 200
        assert b"database is unavailable" in response.content and b"gateway failed" not in response.content
    else:
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "store_unavailable"
    mine = [r for r in caplog.records if getattr(r, "fields", {}).get("request_id") == request_id]
    assert not [r for r in mine if r.levelno >= logging.ERROR], [r.getMessage() for r in mine]
    assert [r.fields["error"] for r in mine if r.levelno == logging.WARNING] == ["store_unavailable"]


# -- deadlines on trio's clock ------------------------------------------------------------------


async def test_a_silent_stream_is_cut_at_the_idle_timeout_by_trios_clock(gw, mock_clock):
    account_id, secret = await gw.funded_key()
    gw.provider.streams(chunk("one two"), hang=True)
    started = trio.current_time()
    response = await post(gw, secret, chat(stream=True))
    idle = gw.relay.upstream.stream_idle_timeout_s
    assert idle <= trio.current_time() - started < idle + 1
    assert response.status_code == 200
    assert b"one two" in response.content
    assert f"the provider sent nothing for {idle:g} seconds".encode() in response.content
    [row] = await gw.usage(account_id)
    assert row["status"] == "idle_timeout" and row["output_tokens"] > 0  # what was streamed is charged
    assert gw.directory.accounts[account_id].held_nano == 0


async def test_route_cool_downs_run_on_trios_clock(gw, mock_clock):
    route = gw.config.models["gpt-4.1-mini"].routes[0]
    router = gw.relay.router
    router.failed(route, "503", retry_after_s=30)
    [state] = [r["state"] for r in router.report(gw.config.models) if r["route"] == route.name]
    assert state == "cooling"
    await trio.sleep(31)
    [state] = [r["state"] for r in router.report(gw.config.models) if r["route"] == route.name]
    assert state == "ready_to_probe"


async def test_provider_health_is_the_routers_and_reaches_the_metrics(gw):
    _, secret = await gw.funded_key()
    assert (await post(gw, secret, chat())).status_code == 200
    provider = gw.config.models["gpt-4.1-mini"].routes[0].provider.name
    assert gw.relay.router.provider_up == {provider: True}
    assert f'gateway_provider_up{{provider="{provider}"}} 1.0' in gw.relay.metrics.render().decode()
