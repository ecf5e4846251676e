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

from gatewayd.trace import Trace

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)
CONTENT_TYPE = CONTENT_TYPE_LATEST

disable_created_metrics()  # the *_created series double the output and no dashboard uses them
MODEL_ENDPOINTS = frozenset({"chat", "messages", "responses", "embeddings"})


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
        self.route_up = Gauge("gateway_route_up", "Route health (1 healthy, 0 not), by model and provider.",
                              ["model", "provider"], registry=r)
        self.reloads = Counter("gateway_config_reloads", "Config reloads, by result (ok, refused).", ["result"],
                               registry=r)
        self.ready = Gauge("gateway_ready", "1 when /readyz answers 200.", registry=r)
        self.holds_open = Gauge("gateway_holds_open", "Holds in flight (requests admitted, not yet settled).",
                                registry=r)
        self.held_nano = Gauge("gateway_held_nano", "Nano-dollars held by requests in flight.", registry=r)

    def watch_holds(self, count: Callable[[], float], amount: Callable[[], float]) -> None:
        self.holds_open.set_function(count)
        self.held_nano.set_function(amount)

    def observe(self, t: Trace) -> None:
        """One finished request."""
        model = t.model or ""
        self.requests.labels(t.endpoint, model, t.provider or "", str(t.status)).inc()
        if t.endpoint not in MODEL_ENDPOINTS:
            return
        self.duration.labels(t.endpoint, "true" if t.stream else "false").observe(t.duration_s)
        if t.upstream_ttfb_s is not None:
            self.upstream.labels(t.provider or "").observe(t.upstream_ttfb_s)
        if t.stream and t.first_byte_s is not None and t.status == 200:
            self.first_byte.labels(t.endpoint).observe(t.first_byte_s)
        if t.usage_status is not None and model:
            for kind, n in (("input", t.input_tokens), ("output", t.output_tokens), ("cached", t.cached_tokens),
                            ("cache_write", t.cache_write_tokens)):
                if n:
                    self.tokens.labels(model, kind).inc(n)
            if t.cost_nano:
                self.cost.labels(model).inc(t.cost_nano)

    def render(self) -> bytes:
        return generate_latest(self.registry)
