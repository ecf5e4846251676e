"""OpenTelemetry over OTLP: the spans, attributes, parent links and metrics a collector gets.

The in-process gateway (tests/inproc.py: listener, relay, ledger, SQLite) with the simulator
as provider, exporting to a real OTLP receiver on loopback (tests/otlp_receiver.py: the
OpenTelemetry protobuf definitions over HTTP, and gRPC). A collector that is down or slow
must change nothing for clients.
"""

from __future__ import annotations

import orjson
import httpx
import pytest
import trio

from gatewayd.config import ConfigError, load_config
from gatewayd.providers.upstream import Upstream
from gatewayd.telemetry.otel import SECONDS_BUCKETS, TOKEN_BUCKETS, Telemetry
from gatewayd.telemetry.settings import TelemetrySettings
from tests.inproc import Gateway
from tests.otlp_receiver import GrpcReceiver, HttpReceiver

SERVER, CLIENT = 2, 3  # the protobuf's SpanKind values
ERROR = 2  # Status.STATUS_CODE_ERROR
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"

FAILOVER = """
[[providers]]
name = "down"
protocol = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key = "k"
[[models]]
id = "fo-model"
family = "gpt"
input_price = 1.0
output_price = 2.0
[[models.routes]]
provider = "down"
upstream_id = "gpt-4.1-mini"
priority = 2
[[models.routes]]
provider = "openai"
upstream_id = "gpt-4.1-mini"
priority = 1
"""


def telemetry_to(url: str, protocol: str = "http/protobuf", **settings) -> Telemetry:
    return Telemetry(TelemetrySettings(endpoint=url, protocol=protocol, export_delay_s=0.05,
                                       metrics_interval_s=3600, export_timeout_s=2, **settings))


async def flushed(telemetry: Telemetry) -> None:
    await trio.to_thread.run_sync(telemetry.flush)


@pytest.fixture
def receiver():
    r = HttpReceiver()
    yield r
    r.stop()


class Traced(Gateway):
    """The in-process gateway with telemetry, its provider the simulator through the real pool."""

    def __init__(self, tmp_path, sim, telemetry: Telemetry, extra: str = "") -> None:
        super().__init__(tmp_path, None, upstream=Upstream(connect_timeout_s=3, stream_idle_timeout_s=10),
                         upstream_url=sim.url, extra=extra, telemetry=telemetry)
        self.telemetry = telemetry

    async def aclose(self) -> None:
        await super().aclose()
        await self.relay.upstream.aclose()
        await trio.to_thread.run_sync(self.telemetry.shutdown)


async def gateway(tmp_path, sim, telemetry: Telemetry, extra: str = "") -> tuple[Gateway, str]:
    gw = Traced(tmp_path, sim, telemetry, extra)
    _, secret = await gw.funded_key()
    return gw, secret


def latest(points: list[dict]) -> dict[str, list[dict]]:
    """The last export's point of each series (cumulative: a later export repeats the earlier ones)."""
    series = {(p["name"], orjson.dumps(p["attributes"], option=orjson.OPT_SORT_KEYS)): p for p in points}
    by_name: dict[str, list[dict]] = {}
    for point in series.values():
        by_name.setdefault(point["name"], []).append(point)
    return by_name


def only(spans: list[dict]) -> dict:
    assert len(spans) == 1, spans
    return spans[0]


async def test_a_passthrough_chat_continues_the_clients_trace(tmp_path, sim, receiver):
    telemetry = telemetry_to(receiver.url)
    gw, secret = await gateway(tmp_path, sim, telemetry)
    try:
        answer = await gw.http.post("/v1/chat/completions", headers={
            "authorization": f"Bearer {secret}", "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
            "tracestate": "vendor=1"}, json={"model": "gpt-4.1-mini", "max_tokens": 50,
                                             "messages": [{"role": "user", "content": "a secret prompt"}]})
        assert answer.status_code == 200
        body = answer.json()
        await flushed(telemetry)
    finally:
        await gw.aclose()
    received = receiver.received
    server = only(received.named("POST /v1/chat/completions"))
    client = only(received.named("chat "))
    assert server["kind"] == SERVER and client["kind"] == CLIENT
    # the client's trace goes on: the server span's parent is the client's span, the attempt's is the server span
    assert server["trace_id"] == client["trace_id"] == CLIENT_TRACE
    assert server["parent_span_id"] == CLIENT_SPAN
    assert client["parent_span_id"] == server["span_id"]
    a = server["attributes"]
    assert a["http.request.method"] == "POST" and a["http.route"] == "/v1/chat/completions"
    assert a["http.response.status_code"] == 200
    assert a["gatewayd.request_id"] == answer.headers["x-request-id"]
    assert a["gatewayd.account_id"] and a["gatewayd.key_id"] and a["gen_ai.request.model"] == "gpt-4.1-mini"
    assert secret not in str(server) and secret not in str(client)
    assert "a secret prompt" not in str(received.spans)  # capture_content is off
    c = client["attributes"]
    assert client["name"] == "chat gpt-4.1-mini"
    assert c["gen_ai.operation.name"] == "chat" and c["gen_ai.provider.name"] == "openai"
    assert c["gen_ai.request.model"] == "gpt-4.1-mini" and c["gen_ai.request.max_tokens"] == 50
    assert c["gen_ai.response.model"] == body["model"] and c["gen_ai.response.id"] == body["id"]
    assert c["gen_ai.response.finish_reasons"] == [body["choices"][0]["finish_reason"]]
    assert c["gen_ai.usage.input_tokens"] == body["usage"]["prompt_tokens"]
    assert c["gen_ai.usage.output_tokens"] == body["usage"]["completion_tokens"]
    assert c["server.address"] == "127.0.0.1" and "error.type" not in c
    events = dict(server["events"])
    assert events["gatewayd.hold"]["gatewayd.hold_nano"] > 0
    settlement = events["gatewayd.settlement"]
    assert settlement["gatewayd.usage_status"] == "ok" and settlement["gatewayd.cost_nano"] > 0
    assert received.resources[0]["service.name"] == "gatewayd" and received.resources[0]["service.instance.id"]


async def test_a_translated_stream_has_its_first_chunk_and_answer_facts_and_the_metrics(tmp_path, sim, receiver):
    telemetry = telemetry_to(receiver.url)
    gw, secret = await gateway(tmp_path, sim, telemetry)
    try:
        async with gw.http.stream("POST", "/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                                  json={"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 64,
                                        "messages": [{"role": "user", "content": "Hello"}]}) as answer:
            assert answer.status_code == 200
            text = (await answer.aread()).decode()
        assert text.rstrip().endswith("data: [DONE]")
        await flushed(telemetry)
    finally:
        await gw.aclose()
    received = receiver.received
    server = only(received.named("POST /v1/chat/completions"))
    client = only(received.named("chat "))
    assert client["parent_span_id"] == server["span_id"] and server["parent_span_id"] == ""
    c = client["attributes"]
    assert c["gen_ai.provider.name"] == "anthropic" and c["gatewayd.stream"] is True
    assert c["gen_ai.response.id"].startswith("chatcmpl") or c["gen_ai.response.id"]
    assert c["gen_ai.response.finish_reasons"] and c["gen_ai.usage.output_tokens"] > 0
    assert [name for name, _ in client["events"]] == ["gatewayd.first_chunk"]
    assert server["attributes"]["gatewayd.stream"] is True
    by_name = latest(received.metrics)
    usage = {p["attributes"]["gen_ai.token.type"]: p for p in by_name["gen_ai.client.token.usage"]}
    assert usage["output"]["sum"] == c["gen_ai.usage.output_tokens"] and usage["output"]["count"] == 1
    assert usage["input"]["bounds"] == list(TOKEN_BUCKETS)
    assert usage["input"]["attributes"]["gen_ai.provider.name"] == "anthropic"
    duration = only(by_name["gen_ai.client.operation.duration"])
    assert duration["bounds"] == list(SECONDS_BUCKETS) and duration["count"] == 1
    assert only(by_name["gen_ai.client.operation.time_to_first_chunk"])["count"] == 1
    requests = only(by_name["gatewayd.requests"])
    assert requests["value"] == 1 and requests["attributes"]["http.response.status_code"] == 200
    cost = only(by_name["gatewayd.cost"])
    assert cost["value"] > 0 and cost["attributes"]["gatewayd.model"] == "claude-sonnet-4-5"


async def test_a_failover_is_two_attempts_and_an_event(tmp_path, sim, receiver):
    telemetry = telemetry_to(receiver.url)
    gw, secret = await gateway(tmp_path, sim, telemetry, extra=FAILOVER)
    try:
        answer = await gw.http.post("/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                                    json={"model": "fo-model", "messages": [{"role": "user", "content": "Hi"}]})
        assert answer.status_code == 200
        await flushed(telemetry)
    finally:
        await gw.aclose()
    received = receiver.received
    server = only(received.named("POST "))
    attempts = sorted(received.named("chat "), key=lambda s: s["attributes"]["gatewayd.attempt"])
    assert [s["attributes"]["gatewayd.provider"] for s in attempts] == ["down", "openai"]
    assert all(s["parent_span_id"] == server["span_id"] for s in attempts)
    failed, served = attempts
    assert failed["attributes"]["error.type"] == "upstream_unreachable" and failed["status"] == ERROR
    assert "error.type" not in served["attributes"] and served["attributes"]["gen_ai.usage.output_tokens"] > 0
    events = server["events"]
    failover = [e for name, e in events if name == "gatewayd.failover"]
    assert only(failover)["gatewayd.attempt"] == 2
    assert "unreachable" in failover[0]["gatewayd.failover.reason"]
    assert [name for name, _ in events] == ["gatewayd.hold", "gatewayd.failover", "gatewayd.settlement"]


async def test_a_refused_request_has_its_error_and_no_attempt(tmp_path, sim, receiver):
    telemetry = telemetry_to(receiver.url)
    gw, secret = await gateway(tmp_path, sim, telemetry)
    try:
        answer = await gw.http.post("/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                                    json={"model": "gpt-4.1-mini", "messages": "not a list"})
        assert answer.status_code == 400
        bad_key = await gw.http.post("/v1/chat/completions", headers={"authorization": "Bearer sk-wrong"},
                                     json={"model": "gpt-4.1-mini", "messages": []})
        assert bad_key.status_code == 401
        await flushed(telemetry)
    finally:
        await gw.aclose()
    received = receiver.received
    servers = received.named("POST ")
    assert len(servers) == 2 and not received.named("chat ")
    by_status = {s["attributes"]["http.response.status_code"]: s for s in servers}
    for status, refusal in ((400, answer), (401, bad_key)):
        error = refusal.json()["error"]
        assert by_status[status]["attributes"]["error.type"] == (error["code"] or error["type"])
    assert "gatewayd.key_id" in by_status[400]["attributes"]
    assert "gatewayd.key_id" not in by_status[401]["attributes"]
    assert "sk-wrong" not in str(servers)
    assert all(s["status"] != ERROR for s in servers)  # a 4xx is the client's error, not the server's


async def test_embeddings_over_grpc_and_content_captured_when_asked(tmp_path, sim):
    grpc_receiver = GrpcReceiver()
    telemetry = telemetry_to(grpc_receiver.url, protocol="grpc", capture_content=True)
    gw, secret = await gateway(tmp_path, sim, telemetry)
    try:
        answer = await gw.http.post("/v1/embeddings", headers={"authorization": f"Bearer {secret}"},
                                    json={"model": "text-embedding-3-small", "input": "words to embed"})
        assert answer.status_code == 200
        await flushed(telemetry)
    finally:
        await gw.aclose()
        grpc_receiver.stop()
    received = grpc_receiver.received
    server = only(received.named("POST /v1/embeddings"))
    client = only(received.named("embeddings "))
    assert client["parent_span_id"] == server["span_id"]
    c = client["attributes"]
    assert c["gen_ai.operation.name"] == "embeddings" and c["gen_ai.request.model"] == "text-embedding-3-small"
    assert c["gen_ai.usage.input_tokens"] == answer.json()["usage"]["prompt_tokens"]
    assert "words to embed" in c["gen_ai.input.messages"]


async def test_the_provider_call_carries_traceparent_onwards(tmp_path, receiver):
    seen: list[httpx.Headers] = []

    def provider(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, json={
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4.1-mini-2025",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})

    telemetry = telemetry_to(receiver.url)
    gw = Gateway(tmp_path, provider, telemetry=telemetry)
    _, secret = await gw.funded_key()
    try:
        answer = await gw.http.post("/v1/chat/completions", headers={
            "authorization": f"Bearer {secret}", "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
            "tracestate": "vendor=1"}, json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "x"}]})
        assert answer.status_code == 200
        await flushed(telemetry)
    finally:
        await gw.aclose()
        await trio.to_thread.run_sync(telemetry.shutdown)
    client = only(receiver.received.named("chat "))
    assert only(seen)["traceparent"] == f"00-{CLIENT_TRACE}-{client['span_id']}-01"
    assert seen[0]["tracestate"] == "vendor=1"
    assert client["attributes"]["gen_ai.response.model"] == "gpt-4.1-mini-2025"


@pytest.mark.parametrize("collector", ["down", "slow"])
async def test_a_collector_down_or_slow_changes_nothing_for_clients(tmp_path, sim, receiver, collector):
    """Spans beyond the queue are dropped and counted; every request is answered as without telemetry."""
    if collector == "down":
        receiver.stop()
    else:
        receiver.received.delay_s = 5  # longer than the export timeout: the exporter gives up
    telemetry = Telemetry(TelemetrySettings(endpoint=receiver.url, max_queue=4, batch_size=2, export_delay_s=0.01,
                                            export_timeout_s=0.2, metrics_interval_s=3600))
    gw, secret = await gateway(tmp_path, sim, telemetry)
    try:
        for _ in range(6):
            answer = await gw.http.post("/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                                        json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "Hi"}]})
            assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]
        processor = telemetry.processor
        assert processor is not None
        assert processor.exported == 0 and len(processor._queue) <= 4
        # the last export: a flush sends all that is queued; a shutdown stops at export_timeout_s
        await trio.to_thread.run_sync(telemetry.flush if collector == "down" else telemetry.shutdown)
        assert processor.failed > 0 and processor.exported == 0 and not processor._queue
        assert processor.dropped + processor.failed == 12  # two spans a request, none lost uncounted
    finally:
        await gw.aclose()
        receiver.received.delay_s = 0


def test_the_settings(tmp_path):
    def config(text: str, env: dict | None = None):
        path = tmp_path / "g.toml"
        path.write_text(f'[server]\ndata_dir = "{tmp_path}"\n' + text)
        return load_config(path, environ=env or {})

    assert config("").telemetry is None  # off by default
    assert config('[telemetry]\nsample_ratio = 0.5\n').telemetry is None  # no endpoint, not enabled
    on = config('[telemetry]\notlp_endpoint = "http://collector:4318"\nsample_ratio = 0.25\n').telemetry
    assert on is not None and on.sample_ratio == 0.25 and on.protocol == "http/protobuf"
    assert on.signal_endpoint("traces") == "http://collector:4318/v1/traces"
    grpc = config('[telemetry]\nenabled = true\n', {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}).telemetry
    assert grpc is not None and grpc.endpoint is None and grpc.protocol == "grpc"
    assert config('[telemetry]\notlp_endpoint = "http://c:4318"\n', {"OTEL_SDK_DISABLED": "true"}).telemetry is None
    for bad, message in (('sample_ratio = 2', "telemetry.sample_ratio"), ('protocol = "thrift"', "telemetry.protocol"),
                         ('otlp_endpoint = "collector:4318"', "telemetry.otlp_endpoint"),
                         ('colour = 1', "telemetry.colour: unknown key")):
        with pytest.raises(ConfigError, match=message):
            config(f'[telemetry]\notlp_endpoint = "http://c:4318"\n{bad}\n' if "otlp" not in bad
                   else f'[telemetry]\n{bad}\n')


def test_telemetry_off_imports_no_sdk():
    """With telemetry off the request path never loads OpenTelemetry: only the telemetry
    package's SDK modules import it, and only the server imports them, inside the function
    that runs when ``[telemetry]`` is on (read from the source, as tests/test_import_graph.py does)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "gatewayd"
    sdk_modules = {"gatewayd.telemetry.otel", "gatewayd.telemetry.processor",
                   "gatewayd.telemetry.aggregate"}
    for path in root.rglob("*.py"):
        name = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        text = path.read_text()
        if "opentelemetry" not in text and "telemetry" not in text:
            continue  # imports neither (parsing all of gatewayd takes seconds)
        tree = ast.parse(text)
        top_level = {id(node) for node in tree.body}
        typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                       for inner in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom):
                targets = [node.module or ""]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if target.startswith("opentelemetry"):
                    assert name in sdk_modules, f"{name} imports {target}"
                if target in sdk_modules and name not in sdk_modules:
                    assert name == "gatewayd.server" and id(node) not in top_level, f"{name} imports {target}"


async def test_metrics_without_traces(tmp_path, sim, receiver):
    telemetry = telemetry_to(receiver.url, traces=False)
    gw, secret = await gateway(tmp_path, sim, telemetry)
    try:
        for _ in range(2):
            answer = await gw.http.post("/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                                        json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "Hi"}]})
            assert answer.status_code == 200
        await flushed(telemetry)
    finally:
        await gw.aclose()
    received = receiver.received
    assert not received.spans
    by_name = latest(received.metrics)
    duration = only(by_name["gen_ai.client.operation.duration"])
    assert duration["count"] == 2 and duration["attributes"]["gen_ai.response.model"]
    assert {p["attributes"]["gen_ai.token.type"] for p in by_name["gen_ai.client.token.usage"]} == {"input", "output"}
    assert only(by_name["gatewayd.requests"])["value"] == 2


def test_histogram_buckets_are_otlps():
    """A value on a boundary counts in the bucket that boundary closes: (bound[i-1], bound[i]]."""
    import threading

    from gatewayd.telemetry.aggregate import HistogramInstrument

    h = HistogramInstrument("h", "s", "", (1.0, 2.0), threading.Lock())
    for value in (0.5, 1.0, 1.5, 2.0, 3.0):
        h.record(value, (("k", "v"),))
    point = h.data(0, 1).data.data_points[0]
    assert list(point.bucket_counts) == [2, 2, 1]
    assert (point.count, point.sum, point.min, point.max) == (5, 8.0, 0.5, 3.0)


def test_a_reload_keeps_the_telemetry_settings_and_says_a_restart_is_needed(tmp_path):
    from types import SimpleNamespace

    from gatewayd.reload import Reloader

    path = tmp_path / "g.toml"
    path.write_text(f'[server]\ndata_dir = "{tmp_path}"\n')
    holder = SimpleNamespace(config=load_config(path, environ={}))
    path.write_text(f'[server]\ndata_dir = "{tmp_path}"\n[telemetry]\notlp_endpoint = "http://c:4318"\n')
    answer = Reloader(lambda: load_config(path, environ={}), lambda c: c, [holder]).reload("test")
    assert answer["restart_needed"] == ["telemetry"] and holder.config.telemetry is None


def test_live_a_daemon_exports_to_the_collector_and_flushes_at_shutdown(tmp_path, sim, receiver):
    """``gatewayd serve`` with ``[telemetry]``: spans and metrics reach the receiver; the queue's
    counts are on /metrics; the last spans are sent when the daemon stops."""
    from tests.faults import wait_until
    from tests.live import Daemon

    daemon = Daemon(tmp_path / "d", sim.url, extra=f'[telemetry]\notlp_endpoint = "{receiver.url}"\n'
                                                   'export_delay_s = 30\nmetrics_interval_s = 3600\n')
    try:
        account = daemon.admin.account("otel@example.com")
        secret = daemon.admin.key(account["id"])["secret"]
        answer = httpx.post(daemon.url + "/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                            json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "Hi"}]}, timeout=10)
        assert answer.status_code == 200
        # the request's span ends once its last byte is sent, which the client may see first
        def two_queued() -> str | None:
            text = httpx.get(daemon.url + "/metrics", timeout=10).text
            return text if "gateway_otel_spans_queued 2.0" in text else None

        scrape = wait_until(two_queued, what="two spans queued")
        assert "gateway_otel_spans_dropped 0.0" in scrape
        assert not receiver.received.spans  # a partial batch waits export_delay_s ...
    finally:
        daemon.stop()
    # ... or the shutdown
    wait_until(lambda: len(receiver.received.named("POST /v1/chat/completions")) == 1, what="the request's span")
    assert receiver.received.named("chat gpt-4.1-mini")
    assert {m["name"] for m in receiver.received.metrics} >= {"gen_ai.client.operation.duration", "gatewayd.requests"}


def test_traceparent_is_read_as_w3c_trace_context_says():
    from gatewayd.telemetry.spans import parse_traceparent, sampled_by_ratio

    assert parse_traceparent(f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01") == (int(CLIENT_TRACE, 16), int(CLIENT_SPAN, 16), 1)
    assert parse_traceparent(f"01-{CLIENT_TRACE}-{CLIENT_SPAN}-00-later-fields")[2] == 0  # a later version may add
    for bad in (f"ff-{CLIENT_TRACE}-{CLIENT_SPAN}-01", f"00-{'0' * 32}-{CLIENT_SPAN}-01",
                f"00-{CLIENT_TRACE}-{'0' * 16}-01", f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01-extra", "00-xyz", ""):
        assert parse_traceparent(bad) is None, bad
    assert sampled_by_ratio(1, 0.5) and not sampled_by_ratio((1 << 64) - 1, 0.5)
    assert not sampled_by_ratio(1, 0.0) and sampled_by_ratio((1 << 64) - 1, 1.0)


async def test_an_unsampled_request_sends_no_spans_but_its_traceparent_and_metrics(tmp_path, receiver):
    seen: list[httpx.Headers] = []

    def provider(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, json={
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4.1-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})

    telemetry = telemetry_to(receiver.url, sample_ratio=0.0)
    gw = Gateway(tmp_path, provider, telemetry=telemetry)
    _, secret = await gw.funded_key()
    try:
        for traceparent in (None, "garbage", f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-00"):
            headers = {"authorization": f"Bearer {secret}"} | ({"traceparent": traceparent} if traceparent else {})
            answer = await gw.http.post("/v1/chat/completions", headers=headers,
                                        json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "x"}]})
            assert answer.status_code == 200
        await flushed(telemetry)
    finally:
        await gw.aclose()
        await trio.to_thread.run_sync(telemetry.shutdown)
    assert not receiver.received.spans
    assert [h["traceparent"][-2:] for h in seen] == ["00", "00", "00"]  # not sampled, said onwards
    assert seen[2]["traceparent"].startswith(f"00-{CLIENT_TRACE}-")  # the client's trace goes on
    assert only(latest(receiver.received.metrics)["gatewayd.requests"])["value"] == 3


async def test_the_exporters_send_the_headers_of_otel_exporter_otlp_headers(tmp_path, sim, receiver, monkeypatch):
    """A collector's token comes from the standard variable, read by the SDK's exporters."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20collector-token,x-tenant=acme")
    telemetry = telemetry_to(receiver.url)
    gw, secret = await gateway(tmp_path, sim, telemetry)
    try:
        answer = await gw.http.post("/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                                    json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "Hi"}]})
        assert answer.status_code == 200
        await flushed(telemetry)
    finally:
        await gw.aclose()
    sent = receiver.received.headers
    assert sent and all(h["authorization"] == "Bearer collector-token" and h["x-tenant"] == "acme" for h in sent)
    assert all(h["content-type"] == "application/x-protobuf" for h in sent)


async def test_a_response_over_the_websocket_has_its_spans(tmp_path, receiver):
    from tests.test_responses_ws import DATA, Socket, Upstream, sse

    def provider(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Upstream(sse(DATA)), headers={"content-type": "text/event-stream"})

    telemetry = telemetry_to(receiver.url)
    gw = Gateway(tmp_path, provider, telemetry=telemetry)
    try:
        _, secret = await gw.funded_key()
        socket = Socket(gw, secret)
        async with trio.open_nursery() as nursery:
            await nursery.start(socket.run)
            assert (await socket.next())["type"] == "websocket.accept"
            await socket.create(model="gpt-4.1-mini", input="hi", store=False)
            assert [raw for raw, _ in [await socket.event() for _ in DATA]] == DATA
            await socket.to_app.send({"type": "websocket.disconnect", "code": 1000})
        await flushed(telemetry)
    finally:
        await gw.aclose()
        await trio.to_thread.run_sync(telemetry.shutdown)
    server = only(receiver.received.named("GET /v1/responses"))
    client = only(receiver.received.named("chat gpt-4.1-mini"))
    assert client["parent_span_id"] == server["span_id"]
    assert client["attributes"]["gen_ai.response.id"] == "resp_up_1"
    assert client["attributes"]["gen_ai.response.finish_reasons"] == ["completed"]
    assert dict(server["events"])["gatewayd.settlement"]["gatewayd.usage_status"] == "ok"
