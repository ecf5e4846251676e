"""Failover in-process: the real relay, ledger and SQLite store; providers are an httpx.MockTransport.

Each provider is a host (``a.test``, ``b.test``, ``c.test``) whose behaviour a test sets:
answer, fail with a status, refuse the connection, or hang before the first byte. Every
client request must be answered once, held once, settled once, with one usage row that
names the provider that served it and the number of attempts.
"""

from __future__ import annotations

import orjson
import httpx
import pytest
import trio
import trio.testing
from werkzeug.datastructures import Headers

from gatewayd import endpoints
from gatewayd.billing.ledger import Ledger
from gatewayd.config import load_config
from gatewayd.directory import Directory
from gatewayd.errors import GatewayError
from gatewayd.providers.upstream import Upstream
from gatewayd.relay import Ctx, Relay
from gatewayd.store.base import UsageQuery
from tests.clocks import thread_aware_clock

CONFIG = """
[routing]
max_attempts = {max_attempts}
{deadline}first_byte_timeout_s = 0.3
failures_to_cool = 2
cooldown_s = 60
[[providers]]
name = "a"
protocol = "openai"
base_url = "http://a.test/v1"
api_key = "ka"
[[providers]]
name = "b"
protocol = "openai"
base_url = "http://b.test/v1"
api_key = "kb"
[[providers]]
name = "c"
protocol = "azure-openai"
base_url = "http://c.test/openai"
api_version = "2024-10-21"
api_key = "kc"
[[models]]
id = "m"
input_price = 1.0
output_price = 2.0
[[models.routes]]
provider = "a"
priority = 2
[[models.routes]]
provider = "b"
upstream_id = "m-at-b"
priority = 1
[[models.routes]]
provider = "c"
upstream_id = "m-deployment"
[[providers]]
name = "h"
protocol = "openai"
base_url = "http://h.test/v1"
api_key = "kh"
[[providers]]
name = "g"
protocol = "gemini"
base_url = "http://g.test/v1beta"
api_key = "kg"
[[models]]
id = "gm"
input_price = 1.0
output_price = 2.0
[[models.routes]]
provider = "g"
upstream_id = "gemini-x"
priority = 1
[[models.routes]]
provider = "h"
upstream_id = "gm-at-h"
[[providers]]
name = "i"
protocol = "openai"
base_url = "http://i.test/v1"
api_key = "ki"
[[providers]]
name = "k"
protocol = "anthropic"
base_url = "http://k.test"
api_key = "kk"
[[models]]
id = "im"
input_price = 1.0
output_price = 2.0
max_output_tokens = 4096
[[models.routes]]
provider = "i"
upstream_id = "im-at-i"
priority = 1
[[models.routes]]
provider = "k"
upstream_id = "im-at-k"
[[models]]
id = "g1"
provider = "g"
upstream_id = "gemini-x"
input_price = 1.0
output_price = 2.0
"""

USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def completion(host: str) -> bytes:
    return orjson.dumps({"id": "x", "object": "chat.completion", "created": 1, "model": host,
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": f"from {host}"},
                                      "finish_reason": "stop"}], "usage": USAGE})


def stream_body(host: str) -> bytes:
    chunk = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": host,
             "choices": [{"index": 0, "delta": {"content": f"from {host}"}, "finish_reason": None}]}
    usage = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": host, "choices": [], "usage": USAGE}
    return b"data: " + orjson.dumps(chunk) + b"\n\ndata: " + orjson.dumps(usage) + b"\n\ndata: [DONE]\n\n"


class Providers:
    """What each host does; what each host was asked."""

    def __init__(self) -> None:
        self.mode: dict[str, str] = {}
        self.seen: list[httpx.Request] = []
        self.retry_delay = "37s"  # what Gemini (host g) asks for in its errors' RetryInfo
        self.body_delay_s = 120.0  # "slow_body": how long the body takes after the status line

    def hosts(self) -> list[str]:
        return [r.url.host.split(".")[0] for r in self.seen]

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        host = request.url.host.split(".")[0]
        mode = self.mode.get(host, "ok")
        stream = orjson.loads(request.content).get("stream") is True
        if mode == "refuse":
            raise httpx.ConnectError("connection refused", request=request)
        if mode == "hang":
            await trio.sleep_forever()
        if mode == "slow":  # a long answer: the status line comes when it is all generated
            await trio.sleep(120)
        if mode == "slow_body":  # the status line at once, the body later
            return httpx.Response(200, content=_late(completion(host), self.body_delay_s),
                                  headers={"content-type": "application/json"})
        if mode.isdigit() and host == "g":  # Google's shape: the hint in the body, no Retry-After
            return httpx.Response(int(mode), json={"error": {
                "code": int(mode), "message": f"{host} says {mode}", "status": "RESOURCE_EXHAUSTED", "details": [
                    {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaId": "q"}]},
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": self.retry_delay}]}})
        if mode.isdigit():
            headers = {"retry-after": "30"} if mode == "429" else {}
            return httpx.Response(int(mode), headers=headers, json={
                "error": {"message": f"{host} says {mode}", "type": "server_error", "code": None}})
        if host == "k":  # an Anthropic messages provider
            message = {"id": "msg_k", "type": "message", "role": "assistant", "model": "im-at-k",
                       "content": [{"type": "text", "text": "from k"}], "stop_reason": "end_turn",
                       "usage": {"input_tokens": 10, "output_tokens": 5}}
            return httpx.Response(200, content=_body(orjson.dumps(message)), headers={"content-type": "application/json"})
        if stream:
            return httpx.Response(200, content=_body(stream_body(host)), headers={"content-type": "text/event-stream"})
        return httpx.Response(200, content=_body(completion(host)), headers={"content-type": "application/json"})


async def _body(data: bytes):
    """A body still to be read, as from a real connection (the relay streams it)."""
    yield data


async def _late(data: bytes, delay_s: float):
    await trio.sleep(delay_s)
    yield data


@pytest.fixture
async def world(tmp_path, store):
    """On each store (SQLite file, PostgreSQL database: tests/conftest.py)."""

    async def make(max_attempts: int = 3, deadline_s: float | None = 30):
        """``deadline_s=None``: the default deadline."""
        path = tmp_path / f"g{max_attempts}.toml"
        deadline = f"deadline_s = {deadline_s}\n" if deadline_s is not None else ""
        path.write_text(CONFIG.format(max_attempts=max_attempts, deadline=deadline))
        config = load_config(path, environ={})
        directory = Directory(config, store)
        account = await directory.create_account(f"f{max_attempts}@example.com")
        await directory.pay(account, 10_000_000_000)
        _, secret = await directory.create_key(account, name="k")
        upstream = Upstream(connect_timeout_s=1, stream_idle_timeout_s=5)
        fake = Providers()
        upstream.transport = httpx.MockTransport(fake.handle)
        relay = Relay(config, directory, Ledger(store), upstream)
        return World(relay, store, account, secret, fake)

    return make


class World:
    def __init__(self, relay, store, account, secret, fake) -> None:
        self.relay, self.store, self.account, self.secret, self.providers = relay, store, account, secret, fake
        self.n = 0

    async def chat(self, stream: bool = False, model: str = "m", **extra):
        self.n += 1
        body = {"model": model, "messages": [{"role": "user", "content": f"hi {self.n}"}], "stream": stream, **extra}
        ctx = Ctx(request_id=f"req_{self.n}", client_ip="127.0.0.1",
                  headers=Headers({"authorization": f"Bearer {self.secret}"}), endpoint="chat")
        status, headers, out = await self.relay.serve(endpoints.CHAT, ctx, orjson.dumps(body))
        if not isinstance(out, bytes):
            out = b"".join([piece async for piece in out])
        return status, headers, out

    async def rows(self) -> list[dict]:
        """The account's usage rows, oldest first, as the store contract gives them."""
        await self.store.flush()
        rows = await self.store.usage_rows(UsageQuery(account_id=self.account.id), 100)
        return [{name: getattr(r, name) for name in ("request_id", "status", "http_status", "provider", "attempts",
                                                      "cost_nano")} for r in reversed(rows)]

    def money_is_consistent(self) -> None:
        assert self.account.held_nano == 0


# 10 input tokens at $1/M + 5 output at $2/M
COST = 10 * 1000 + 5 * 2000


@pytest.mark.parametrize("fault", ["503", "500", "429", "refuse"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_failing_first_route_gives_way_and_one_row_names_the_second(world, fault, stream):
    w = await world()
    w.providers.mode["a"] = fault
    status, _, out = await w.chat(stream=stream)
    assert status == 200 and b"from b" in out
    assert w.providers.hosts() == ["a", "b"]
    assert orjson.loads(w.providers.seen[1].content)["model"] == "m-at-b"
    rows = await w.rows()
    assert rows == [{"request_id": "req_1", "status": "ok", "http_status": 200, "provider": "b", "attempts": 2,
                     "cost_nano": COST}]
    w.money_is_consistent()


async def test_a_client_error_is_returned_as_is_without_trying_another_route(world):
    w = await world()
    w.providers.mode["a"] = "400"
    status, _, out = await w.chat()
    assert status == 400 and orjson.loads(out)["error"]["message"] == "a says 400"
    assert w.providers.hosts() == ["a"]
    assert (await w.rows())[0] | {} == {"request_id": "req_1", "status": "upstream_error", "http_status": 400,
                                        "provider": "a", "attempts": 1, "cost_nano": 0}


async def test_every_route_failing_gives_the_last_provider_error(world):
    w = await world()
    w.providers.mode.update(a="503", b="429", c="refuse")
    status, headers, out = await w.chat()
    assert w.providers.hosts() == ["a", "b", "c"]
    assert status == 429 and orjson.loads(out)["error"]["message"] == "b says 429"
    assert headers.get("retry-after") == "30"
    row = (await w.rows())[0]
    assert (row["status"], row["http_status"], row["attempts"], row["cost_nano"]) == ("upstream_error", 429, 3, 0)
    w.money_is_consistent()


async def test_no_route_reachable_is_503_model_not_found(world):
    w = await world()
    w.providers.mode.update(a="refuse", b="refuse", c="refuse")
    with pytest.raises(GatewayError) as e:
        await w.chat()
    assert e.value.status == 503 and e.value.code == "model_not_found"
    assert "none of its 3 routes could be reached" in e.value.message
    row = (await w.rows())[0]
    assert (row["status"], row["http_status"], row["attempts"], row["cost_nano"]) == ("upstream_unreachable", 503, 3, 0)


async def test_attempts_are_capped(world):
    w = await world(max_attempts=2)
    w.providers.mode.update(a="502", b="502")
    status, _, out = await w.chat()
    assert status == 502 and w.providers.hosts() == ["a", "b"]
    assert (await w.rows())[0]["attempts"] == 2


async def test_a_stream_that_hangs_before_its_first_byte_moves_on_in_time(world):
    w = await world()
    w.providers.mode["a"] = "hang"
    with trio.fail_after(3):
        status, _, out = await w.chat(stream=True)
    assert status == 200 and b"from b" in out and out.endswith(b"data: [DONE]\n\n")
    rows = await w.rows()
    assert [(r["provider"], r["attempts"], r["status"]) for r in rows] == [("b", 2, "ok")]


async def test_the_last_route_is_not_cut_by_the_first_byte_timeout(world):
    """The first-byte limit only exists to try another route: alone, a slow provider is waited for."""
    w = await world(max_attempts=1)
    slow = w.providers.handle

    async def late(request):
        await trio.sleep(0.6)  # twice first_byte_timeout_s
        return await slow(request)

    w.relay.upstream.transport = httpx.MockTransport(late)
    status, _, out = await w.chat(stream=True)
    assert status == 200 and b"from a" in out


async def test_no_cut_when_the_deadline_leaves_no_time_for_another_route(world):
    """Cutting a slow first route is only worth it if another attempt may still start."""
    w = await world(deadline_s=0.2)
    slow = w.providers.handle

    async def late(request):
        await trio.sleep(0.6)
        return await slow(request)

    w.relay.upstream.transport = httpx.MockTransport(late)
    status, _, out = await w.chat(stream=True)
    assert status == 200 and b"from a" in out
    assert (await w.rows())[0]["attempts"] == 1


async def test_a_failing_route_cools_down_and_is_skipped(world):
    w = await world()
    w.providers.mode["a"] = "503"
    await w.chat()
    await w.chat()  # a's second failure in a row: cooled for 60 s
    assert w.providers.hosts() == ["a", "b", "a", "b"]
    w.providers.seen.clear()
    for _ in range(3):
        status, _, _ = await w.chat()
        assert status == 200
    assert w.providers.hosts() == ["b", "b", "b"]
    report = {r["provider"]: r for r in w.relay.router.report(w.relay.config.models)}
    assert report["a"]["state"] == "cooling" and report["a"]["last_error"] == "503: a says 503"
    assert report["b"]["state"] == "healthy" and report["b"]["latency_ms"] is not None


async def test_retry_after_takes_the_route_out_at_once(world):
    w = await world()
    w.providers.mode["a"] = "429"
    await w.chat()
    w.providers.mode["a"] = "ok"
    w.providers.seen.clear()
    await w.chat()
    assert w.providers.hosts() == ["b"]  # a asked for 30 s


async def test_azure_route_is_addressed_by_deployment_with_api_key(world):
    w = await world()
    w.providers.mode.update(a="503", b="503")
    status, _, out = await w.chat()
    assert status == 200 and b"from c" in out
    request = w.providers.seen[-1]
    assert str(request.url) == "http://c.test/openai/deployments/m-deployment/chat/completions?api-version=2024-10-21"
    assert request.headers["api-key"] == "kc" and "authorization" not in request.headers


async def test_a_client_that_leaves_during_failover_pays_only_the_input_once(world):
    w = await world()
    w.providers.mode.update(a="503", b="hang", c="hang")
    with trio.move_on_after(0.1):
        await w.chat(stream=False)
    rows = await w.rows()
    assert len(rows) == 1 and rows[0]["status"] == "client_disconnected" and rows[0]["provider"] == "b"
    w.money_is_consistent()
    report = {r["provider"]: r for r in w.relay.router.report(w.relay.config.models)}
    assert report["b"]["state"] == "healthy" and report["b"]["failures"] == 0  # leaving says nothing of b


async def test_gemini_retry_info_cools_its_route_for_the_delay_it_asks(world):
    """Google puts the retry hint in the error body (google.rpc.RetryInfo), not in Retry-After:
    one 429 takes the route out for that long (failures_to_cool = 2 would not cool it yet)."""
    w = await world()
    w.providers.mode["g"] = "429"
    status, _, out = await w.chat(model="gm")
    assert status == 200 and b"from h" in out
    assert w.providers.hosts() == ["g", "h"]
    report = {r["route"]: r for r in w.relay.router.report(w.relay.config.models)}
    assert report["g/gemini-x"]["state"] == "cooling" and 36 <= report["g/gemini-x"]["cooling_for_s"] <= 37
    w.providers.mode["g"] = "ok"
    w.providers.seen.clear()
    await w.chat(model="gm")
    assert w.providers.hosts() == ["h"]


async def test_a_gemini_client_with_one_route_gets_retry_after_from_retry_info(world):
    w = await world()
    w.providers.mode["g"] = "429"
    w.providers.retry_delay = "1.5s"
    status, headers, out = await w.chat(model="g1")
    assert status == 429 and headers["retry-after"] == "2"  # whole seconds, rounded up
    assert orjson.loads(out)["error"] == {"message": "g says 429", "type": "rate_limit_error", "param": None,
                                          "code": "resource_exhausted"}
    row = (await w.rows())[0]
    assert (row["status"], row["http_status"], row["cost_nano"]) == ("upstream_error", 429, 0)


# -- non-streaming requests: the time to the provider's status line ---------------------------
#
# Providers send a non-streaming answer's status line only once the whole answer is generated,
# so the default waits a minute before giving up on a route; a trio MockClock that jumps ahead
# whenever every task waits, and no store thread is running (tests/clocks.py), lets the tests run
# the defaults without waiting for them.


@pytest.fixture
def jumping_clock(monkeypatch):
    return thread_aware_clock(monkeypatch, 0.05)


async def test_by_default_a_hung_provider_of_a_non_streaming_request_gives_way_after_60_s(world, jumping_clock):
    w = await world(deadline_s=None)  # every routing default but the stream's first-byte limit
    assert w.relay.config.routing.non_stream_first_byte_timeout_s == 60
    w.providers.mode["a"] = "hang"
    started = trio.current_time()
    status, _, out = await w.chat()
    assert status == 200 and b"from b" in out
    assert 60 <= trio.current_time() - started < 61
    assert w.providers.hosts() == ["a", "b"]
    assert [(r["provider"], r["attempts"], r["status"]) for r in await w.rows()] == [("b", 2, "ok")]
    report = {r["provider"]: r for r in w.relay.router.report(w.relay.config.models)}
    assert report["a"]["last_error"] == "no status line within 60 s"


async def test_the_last_route_of_a_non_streaming_request_is_never_cut(world, jumping_clock):
    """The spec: no cutoff of a non-streaming request by the service. Alone, a slow provider is waited for."""
    w = await world(max_attempts=1, deadline_s=None)
    w.providers.mode["a"] = "slow"
    started = trio.current_time()
    status, _, out = await w.chat()
    assert status == 200 and b"from a" in out and trio.current_time() - started >= 120


async def test_the_first_byte_limit_does_not_cut_a_body_that_has_started(world, jumping_clock):
    """The limit is on the status line; once it came, the answer is the provider's, however long."""
    w = await world(deadline_s=None)
    w.providers.mode["a"] = "slow_body"
    status, _, out = await w.chat()
    assert status == 200 and b"from a" in out and w.providers.hosts() == ["a"]


async def test_route_latency_is_the_time_to_the_status_line_for_a_non_streaming_answer(world, jumping_clock):
    """``gatewayctl routes`` shows each route's time to first byte: for a non-streaming answer,
    to the provider's status line, not to the end of its body (trio's clock, here a MockClock:
    the body's two minutes pass in no real time, and nothing else moves it)."""
    w = await world(deadline_s=None)
    w.providers.mode["a"] = "slow_body"  # the status line at once, the body 120 s later
    started = trio.current_time()
    status, _, _ = await w.chat()
    assert status == 200 and trio.current_time() - started >= 120
    report = {r["provider"]: r for r in w.relay.router.report(w.relay.config.models)}
    assert report["a"]["latency_ms"] < 1000, report["a"]  # the status line, not the body's 120 s


async def test_the_hold_covers_every_route_of_the_plan_not_only_the_first(world):
    """An image costs an Anthropic route more tokens than an OpenAI one: the request is held
    for the dearer route of its plan, so the charge stays within the hold whichever serves."""
    from gatewayd.billing.estimate import route_hold
    from gatewayd.providers.base import Call

    w = await world()
    w.providers.mode["i"] = "503"
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    content = [{"type": "text", "text": "what is this?"}, image]
    status, _, out = await w.chat(model="im", messages=[{"role": "user", "content": content}])
    assert status == 200, out
    assert w.providers.hosts() == ["i", "k"]
    [row] = await w.store.usage_rows(UsageQuery(account_id=w.account.id), 10)
    body = {"model": "im", "messages": [{"role": "user", "content": content}], "stream": False}
    model = w.relay.config.models["im"]
    call = Call(client_format="chat", model=model, body=body, raw=orjson.dumps(body), stream=False)
    holds = {target.provider.name: route_hold(model, w.relay._build(call, target), 1) for target in model.routes}
    assert holds["k"] > holds["i"], holds
    assert row.hold_nano == holds["k"] and row.cost_nano <= row.hold_nano
