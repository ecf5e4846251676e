"""Prometheus metrics (``GET /metrics``, text format), one registry per daemon.

Label sets stay bounded: endpoint (a fixed list), model (catalogue ids only: a request
for an unknown model is counted with ``model=""``), provider (configured names), HTTP
status. Key ids, account ids and request ids are never labels: they are in the log line.
Money is counted in nano-dollars, like everywhere else in gatewayd.

Everything per request is recorded once, from the request's ``Trace``, when its last byte
has been sent (``observe``); the gauges read live state when scraped.
"""

from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gatewayd.version import version
from gatewayd.trace import Trace

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)
CONTENT_TYPE = CONTENT_TYPE_LATEST

disable_created_metrics()  # the *_created series double the output and no dashboard uses them
MODEL_ENDPOINTS = frozenset({"chat", "messages", "responses", "embeddings", "gemini"})


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("gateway_requests", "HTTP requests answered, by endpoint, model, provider and status.",
                                ["endpoint", "model", "provider", "status"], registry=r)
        self.tokens = Counter("gateway_tokens", "Tokens billed, by model and kind (input, output, cached, cache_write).",
                              ["model", "kind"], registry=r)
        self.cost = Counter("gateway_cost_nano", "Nano-dollars charged, by model.", ["model"], registry=r)
        self.duration = Histogram("gateway_request_duration_seconds",
                                  "Request arrival to last byte sent, model endpoints.",
                                  ["endpoint", "stream"], buckets=LATENCY_BUCKETS, registry=r)
        self.upstream = Histogram("gateway_upstream_latency_seconds",
                                  "Request sent to the provider -> its status line.",
                                  ["provider"], buckets=LATENCY_BUCKETS, registry=r)
        self.first_byte = Histogram("gateway_stream_first_byte_seconds",
                                    "Streams: request arrival -> first byte sent to the client.",
                                    ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.open_streams = Gauge("gateway_open_streams", "Streams being sent to clients now.", registry=r)
        self.store_latency = Histogram("gateway_store_write_seconds",
                                       "Settlement: wait for the usage row and money to be committed.",
                                       buckets=STORE_BUCKETS, registry=r)
        self.store_up = Gauge("gateway_store_up", "1 when the store answered the last readiness check.", registry=r)
        self.provider_up = Gauge("gateway_provider_up",
                                 "0 after a provider could not be reached, 1 once it answers again.",
                                 ["provider"], registry=r)
        self.route_up = Gauge("gateway_route_up", "Route health: 1 healthy, 0 cooling down after failures.",
                              ["route"], registry=r)  # route = provider/upstream_id, as in the log line
        self.route_misconfigured = Gauge(
            "gateway_route_misconfigured",
            "1 while the route's provider refuses the gateway's credentials (401/403), 0 once it answers.",
            ["route"], registry=r)
        self.reloads = Counter("gateway_config_reloads", "Config reloads, by result (ok, refused).", ["result"],
                               registry=r)
        self.build_info = Gauge("gateway_build_info", "Always 1; the labels say which gatewayd this is.",
                                ["version"], registry=r)
        self.build_info.labels(version()).set(1)
        self.ready = Gauge("gateway_ready", "1 when /readyz answers 200.", registry=r)
        self.holds_open = Gauge("gateway_holds_open", "Holds in flight (requests admitted, not yet settled).",
                                registry=r)
        self.held_nano = Gauge("gateway_held_nano", "Nano-dollars held by requests in flight.", registry=r)
        # labelled children per label tuple: ``labels()`` costs more than the increment itself,
        # and the tuples are as bounded as the labels
        self._bound: dict[tuple, _Bound] = {}

    def watch_holds(self, count: Callable[[], float], amount: Callable[[], float]) -> None:
        self.holds_open.set_function(count)
        self.held_nano.set_function(amount)

    def observe(self, t: Trace) -> None:
        """One finished request."""
        model = t.model or ""
        key = (t.endpoint, model, t.provider or "", t.status, t.stream)
        bound = self._bound.get(key)
        if bound is None:
            bound = self._bound[key] = _Bound(self, *key)
        bound.requests.inc()
        if bound.duration is None or bound.upstream is None:  # not a model endpoint (both set together)
            return
        bound.duration.observe(t.duration_s)
        if t.upstream_ttfb_s is not None:
            bound.upstream.observe(t.upstream_ttfb_s)
        if bound.first_byte is not None and t.first_byte_s is not None:
            bound.first_byte.observe(t.first_byte_s)
        if t.usage_status is not None and model:
            for counter, n in zip(bound.tokens, (t.input_tokens, t.output_tokens, t.cached_tokens,
                                                 t.cache_write_tokens)):
                if n:
                    counter.inc(n)
            if t.cost_nano and bound.cost is not None:
                bound.cost.inc(t.cost_nano)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Bound:
    """The children of every per-request metric for one label tuple."""

    __slots__ = ("requests", "duration", "upstream", "first_byte", "tokens", "cost")

    def __init__(self, m: Metrics, endpoint: str, model: str, provider: str, status: int, stream: bool) -> None:
        self.requests = m.requests.labels(endpoint, model, provider, str(status))
        self.duration = self.upstream = self.first_byte = self.cost = None
        self.tokens: tuple = ()
        if endpoint not in MODEL_ENDPOINTS:
            return
        self.duration = m.duration.labels(endpoint, "true" if stream else "false")
        self.upstream = m.upstream.labels(provider)
        if stream and status == 200:
            self.first_byte = m.first_byte.labels(endpoint)
        if model:
            self.tokens = tuple(m.tokens.labels(model, kind) for kind in ("input", "output", "cached", "cache_write"))
            self.cost = m.cost.labels(model)
