"""Telemetry when on: the exporters, the instruments, and one request's spans (:class:`RequestSpans`).

Imported only when ``[telemetry]`` is on (:mod:`gatewayd.telemetry` says why). Spans follow
the OpenTelemetry GenAI semantic conventions (``gen_ai.*``, span kind CLIENT, named
``{operation} {model}``) for each provider attempt, under one SERVER span per request
(``http.*``, ``gatewayd.*``). docs/operations.md lists every span, event, attribute and metric.

What runs where. On the event loop: :class:`RequestSpans` records spans as plain objects
(:mod:`gatewayd.telemetry.spans`) and metrics into dicts (:mod:`gatewayd.telemetry.aggregate`),
about 50 us of CPU a request at sampling ratio 1.0, measured in process here. The SDK's own
spans and instruments cost about five times that (30 us to start and end a span before any
attribute, 10-20 us a metric record), so they are not used on the hot path. In worker
threads: the SDK's OTLP exporters, which honour every ``OTEL_EXPORTER_OTLP_*`` setting
(headers, certificates, compression, per-signal endpoints), speak both OTLP transports,
retry as the specification says, and encode (about 80 us a span in that thread, with the
conversion to the SDK's ``ReadableSpan``: the larger part of tracing's CPU at ratio 1.0).
``make bench`` prints a whole request's CPU with tracing on beside off.
"""

from __future__ import annotations

import sys
import time
import uuid
from typing import TYPE_CHECKING, Any, AsyncIterator

import orjson
import trio
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from gatewayd.errors import GatewayError
from gatewayd.telemetry.aggregate import Attributes, MetricsExport
from gatewayd.telemetry.facts import AnswerFacts, from_body
from gatewayd.telemetry.processor import BoundedSpanProcessor
from gatewayd.telemetry.settings import TelemetrySettings
from gatewayd.telemetry.spans import (
    CLIENT, SERVER, SpanRecord, new_span_id, new_trace_id, parse_traceparent, sampled_by_ratio, traceparent,
)

if TYPE_CHECKING:
    from gatewayd.catalogue import ModelRoute
    from gatewayd.formats.usage import Usage
    from gatewayd.metrics import Metrics
    from gatewayd.providers.base import Call, Route
    from gatewayd.trace import Trace

SCOPE = "gatewayd"
# the conventions' bucket boundaries (gen-ai-metrics.md)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
SECONDS_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
# gen_ai.provider.name: the conventions' value for each upstream protocol
GENAI_PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "azure-openai": "azure.ai.openai",
                   "gemini": "gcp.gemini", "vertex": "gcp.vertex_ai", "bedrock": "aws.bedrock"}
# Bedrock's requests are signed (SigV4) and AWS traces with its own header: no traceparent there
NO_TRACEPARENT = frozenset({"bedrock"})
# the request fields that carry prompt text, per client format (gen_ai.input.messages, when captured)
PROMPT_FIELDS = ("system", "instructions", "messages", "input", "systemInstruction", "contents")
MAX_CONTENT_CHARS = 65536
MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("gatewayd")
    except Exception:  # noqa: BLE001 - a source tree without metadata: the resource says so
        return "unknown"


class Telemetry:
    """The daemon's tracer and metrics, from ``[telemetry]``. ``span_exporter`` and
    ``metric_exporter`` replace the OTLP ones (the tests use the OTLP ones, against a receiver)."""

    def __init__(self, settings: TelemetrySettings, *, span_exporter: SpanExporter | None = None,
                 metric_exporter: MetricExporter | None = None) -> None:
        self.settings = settings
        version = _version()
        # service.instance.id: one per process, so that the cumulative metrics of several instances
        # (or of serve --workers N) are distinct series rather than one series that jumps
        resource = Resource.create({"service.name": settings.service_name, "service.version": version,
                                    "service.instance.id": str(uuid.uuid4())})
        scope = InstrumentationScope(SCOPE, version)
        self.stopped = False
        self.processor: BoundedSpanProcessor | None = None
        if settings.traces:
            self.processor = BoundedSpanProcessor(
                span_exporter or _span_exporter(settings), resource, scope, max_queue=settings.max_queue,
                batch_size=settings.batch_size, delay_s=settings.export_delay_s)
            # The exporter's thread encodes spans in pure Python; while it runs, the event loop's
            # thread would wait up to the interpreter's switch interval (5 ms by default) for the
            # GIL at each hand-over. 1 ms keeps every such wait under the loop's 2 ms budget.
            sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
        self.metrics: MetricsExport | None = None
        if settings.metrics:
            metrics = self.metrics = MetricsExport(
                metric_exporter or _metric_exporter(settings), resource, scope,
                interval_s=settings.metrics_interval_s, timeout_s=settings.export_timeout_s)
            self.token_usage = metrics.histogram(
                "gen_ai.client.token.usage", "{token}", "Number of input and output tokens used.", TOKEN_BUCKETS)
            self.operation_duration = metrics.histogram(
                "gen_ai.client.operation.duration", "s", "GenAI operation duration.", SECONDS_BUCKETS)
            self.time_to_first_chunk = metrics.histogram(
                "gen_ai.client.operation.time_to_first_chunk", "s",
                "Time from the request sent to a provider to the stream's first chunk.", SECONDS_BUCKETS)
            self.requests = metrics.counter("gatewayd.requests", "{request}",
                                            "Requests answered, by status and error code.")
            self.request_duration = metrics.histogram("http.server.request.duration", "s",
                                                      "Request arrival to last byte sent.", SECONDS_BUCKETS)
            self.cost = metrics.counter("gatewayd.cost", "{nano_usd}", "Nano-dollars charged, by model and provider.")

    @property
    def metrics_on(self) -> bool:
        return self.metrics is not None

    def watch(self, metrics: "Metrics") -> None:
        """The span queue's losses on ``/metrics`` (the Prometheus registry)."""
        from prometheus_client import Gauge

        processor = self.processor
        if processor is None:
            return
        for name, doc, read in (
            ("gateway_otel_spans_dropped", "Spans dropped since start: the export queue was full.",
             lambda: processor.dropped),
            ("gateway_otel_spans_failed", "Spans the OTLP exporter gave up on since start (collector down or slow).",
             lambda: processor.failed),
            ("gateway_otel_spans_exported", "Spans the collector accepted since start.", lambda: processor.exported),
            ("gateway_otel_spans_queued", "Spans waiting for export now.", lambda: len(processor._queue)),
        ):
            Gauge(name, doc, registry=metrics.registry).set_function(read)

    def begin(self, scope: dict, t: "Trace") -> "RequestSpans":
        """One request's spans: its SERVER span, continuing the client's trace when it sent
        ``traceparent``."""
        return RequestSpans(self, scope, t)

    def finish(self, t: "Trace") -> None:
        """The request's last byte is sent (``Listener._finished``)."""
        spans = t.spans
        if spans is not None:
            spans.finish()
        elif self.metrics_on and t.endpoint != "ops":
            RequestSpans.record_request(self, t)

    def flush(self) -> None:
        """Export what is waiting (blocking: a worker thread's call)."""
        if self.processor is not None:
            self.processor.force_flush()
        if self.metrics is not None:
            self.metrics.export()

    def shutdown(self) -> None:
        """The last exports and the exporters closed: none starts later than ``export_timeout_s``
        from now, and each ends within it (blocking: a worker thread's call)."""
        if self.stopped:
            return
        self.stopped = True
        deadline = time.monotonic() + self.settings.export_timeout_s
        if self.processor is not None:
            self.processor.shutdown(deadline, self.settings.export_timeout_s)
        if self.metrics is not None:
            self.metrics.shutdown(deadline)


def _span_exporter(settings: TelemetrySettings) -> SpanExporter:
    endpoint = settings.signal_endpoint("traces")
    if settings.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        insecure = endpoint.startswith("http://") if endpoint else None
        return GrpcSpanExporter(endpoint=endpoint, insecure=insecure, timeout=settings.export_timeout_s)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

    return HttpSpanExporter(endpoint=endpoint, timeout=settings.export_timeout_s)


def _metric_exporter(settings: TelemetrySettings) -> Any:
    endpoint = settings.signal_endpoint("metrics")
    if settings.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter

        insecure = endpoint.startswith("http://") if endpoint else None
        return GrpcMetricExporter(endpoint=endpoint, insecure=insecure, timeout=settings.export_timeout_s)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter

    return HttpMetricExporter(endpoint=endpoint, timeout=settings.export_timeout_s)


def _route_of(path: str) -> str | None:
    """``http.route``: the path as served, with the model in it replaced (bounded)."""
    if path.startswith("/v1beta/models/"):
        action = path.rpartition(":")[2] if ":" in path else ""
        return "/v1beta/models/{model}" + (f":{action}" if action else "")
    if path.startswith("/v1/models/"):
        return "/v1/models/{model}"
    if path.startswith("/v1/") or path in ("/metrics", "/healthz", "/readyz", "/webhooks/stripe"):
        return path
    if path.startswith("/console"):
        return "/console"
    return None


class RequestSpans:
    """One request's SERVER span, its current attempt's CLIENT span, and what the metrics
    need from them. Methods are the hooks of :mod:`gatewayd.telemetry`."""

    __slots__ = ("telemetry", "t", "server", "trace_id", "span_id", "recording", "attempt", "began", "attempt_attrs",
                 "attempt_key", "attempting", "facts", "last_reason", "tracestate", "client_format", "provider",
                 "watching", "settled_as")

    def __init__(self, telemetry: Telemetry, scope: dict, t: "Trace") -> None:
        self.telemetry = telemetry
        self.t = t
        self.attempt: SpanRecord | None = None  # the attempt's span, when sampled (None between attempts)
        self.began = 0.0
        self.attempt_attrs: dict[str, Any] | None = None  # the attempt's GenAI attributes, for its span ...
        self.attempt_key: Attributes = ()  # ... and for its metrics
        self.attempting = False  # an attempt started and has not ended (its span, when traced, is ``attempt``)
        self.watching = False  # a traced stream is being sent: its attempt ends when it closes (its last bytes read)
        self.settled_as: str | None = None  # the usage status it was settled with meanwhile
        self.facts = AnswerFacts()
        self.last_reason: str | None = None
        self.tracestate: str | None = None
        self.client_format = ""
        self.provider = ""
        self.server: SpanRecord | None = None
        self.recording = False  # the request is sampled: its spans are recorded and exported
        processor = telemetry.processor
        if processor is None:
            self.trace_id, self.span_id = 0, 0
            return
        parent = None
        user_agent = None
        for name, value in scope.get("headers", ()):
            if name == b"traceparent":
                parent = parse_traceparent(value.decode("latin-1"))
            elif name == b"tracestate":
                self.tracestate = value.decode("latin-1")
            elif name == b"user-agent":
                user_agent = value.decode("latin-1")
        self.span_id = new_span_id()
        if parent is not None:  # ParentBased: the client's decision
            self.trace_id, parent_id, flags = parent
            self.recording = bool(flags & 1)
        else:
            self.trace_id, parent_id = new_trace_id(), None
            self.recording = sampled_by_ratio(self.trace_id, telemetry.settings.sample_ratio)
            self.tracestate = None
        if not self.recording:
            return
        route = _route_of(t.path)
        attributes: dict[str, Any] = {"http.request.method": t.method, "url.path": t.path,
                                      "url.scheme": scope.get("scheme", "http"), "gatewayd.request_id": t.request_id}
        if route is not None:
            attributes["http.route"] = route
        if user_agent:
            attributes["user_agent.original"] = user_agent
        self.server = SpanRecord(f"{t.method} {route}" if route else t.method, SERVER, self.trace_id, self.span_id,
                                 parent_id, attributes, processor.on_end, remote_parent=parent is not None,
                                 tracestate=self.tracestate)

    # -- attempts ------------------------------------------------------------------

    def attempt_started(self, n: int, target: "ModelRoute", route: "Route", call: "Call") -> None:
        if self.attempting:
            self._end_attempt("abandoned", None)
        telemetry = self.telemetry
        protocol = target.provider.protocol
        operation = "embeddings" if call.client_format == "embeddings" else "chat"
        url = route.request.url
        self.client_format = call.client_format
        self.provider = target.provider.name
        self.attempt_attrs = {
            "gen_ai.operation.name": operation, "gen_ai.provider.name": GENAI_PROVIDERS.get(protocol, protocol),
            "gen_ai.request.model": target.upstream_id, "server.address": url.host,
            "server.port": url.port or (443 if url.scheme == "https" else 80)}
        self.attempt_key = tuple(self.attempt_attrs.items())
        self.facts = AnswerFacts()
        self.began = time.perf_counter()
        self.attempting = True
        processor = telemetry.processor
        if processor is None:
            return
        span_id = new_span_id()
        if self.recording:
            server, attributes = self.server, {**self.attempt_attrs, **self._request_attributes(n, target, route, call)}
            assert server is not None
            if n:
                server.add_event("gatewayd.failover", {"gatewayd.attempt": n + 1, "gatewayd.route": target.name,
                                                       "gatewayd.failover.reason": self.last_reason or ""})
            self.attempt = SpanRecord(f"{operation} {target.upstream_id}", CLIENT, self.trace_id, span_id,
                                      self.span_id, attributes, processor.on_end, tracestate=self.tracestate)
        if telemetry.settings.propagate and protocol not in NO_TRACEPARENT:
            headers = route.request.headers
            headers["traceparent"] = traceparent(self.trace_id, span_id, self.recording)
            if self.tracestate:
                headers["tracestate"] = self.tracestate

    def _request_attributes(self, n: int, target: "ModelRoute", route: "Route", call: "Call") -> dict[str, Any]:
        """What a traced attempt's span says about the request besides the metrics' attributes."""
        body = call.body
        extra: dict[str, Any] = {"gatewayd.attempt": n + 1, "gatewayd.route": target.name,
                                 "gatewayd.provider": target.provider.name, "gatewayd.stream": route.stream}
        for field in MAX_TOKENS_FIELDS:
            value = body.get(field)
            if isinstance(value, int) and not isinstance(value, bool):
                extra["gen_ai.request.max_tokens"] = value
                break
        else:
            config = body.get("generationConfig")
            if isinstance(config, dict) and isinstance(config.get("maxOutputTokens"), int):
                extra["gen_ai.request.max_tokens"] = config["maxOutputTokens"]
        for field, attribute in (("temperature", "gen_ai.request.temperature"), ("top_p", "gen_ai.request.top_p")):
            value = body.get(field)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                extra[attribute] = value
        if self.telemetry.settings.capture_content:
            prompt = {field: body[field] for field in PROMPT_FIELDS if field in body}
            extra["gen_ai.input.messages"] = orjson.dumps(prompt).decode()[:MAX_CONTENT_CHARS]
        return extra

    def attempt_failed(self, status: int | None, outcome: str, reason: str) -> None:
        self.last_reason = reason
        self._end_attempt(str(status) if status is not None else outcome, reason)

    def attempt_error(self, error: BaseException) -> None:
        if isinstance(error, trio.Cancelled):
            kind = "cancelled"
        elif isinstance(error, GatewayError):
            kind = error.code or str(error.status)
        else:
            kind = type(error).__qualname__
        self._end_attempt(kind, None)

    def first_chunk(self, first: bytes) -> None:
        elapsed = time.perf_counter() - self.began
        if self.telemetry.metrics_on and self.attempt_attrs is not None:
            self.telemetry.time_to_first_chunk.record(elapsed, self.attempt_key)
        self.facts.feed(first)  # the response model, for the metrics too
        if self.attempt is not None:
            self.attempt.add_event("gatewayd.first_chunk", {"gatewayd.time_to_first_chunk_s": elapsed})

    def watch_stream(self, pump: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        if self.attempt is None:
            return pump
        self.watching = True
        return _Watched(pump, self)

    def stream_closed(self) -> None:
        """The stream was sent (or left): the terminal event, sent after settling, is read too."""
        if self.watching:
            self.watching = False
            if self.settled_as is not None:
                self._end_attempt(None if self.settled_as == "ok" else self.settled_as, None)

    def answered(self, body: bytes) -> None:
        traced = self.attempt is not None
        if not (traced or self.telemetry.metrics_on):
            return
        self.facts = from_body(body)  # the response model, for the metrics too
        if self.attempt is not None and self.telemetry.settings.capture_content:
            self.attempt.attributes["gen_ai.output.messages"] = body[:MAX_CONTENT_CHARS].decode("utf-8", "replace")

    def _end_attempt(self, error_type: str | None, description: str | None) -> None:
        if not self.attempting:
            return
        self.attempting = False
        telemetry = self.telemetry
        if telemetry.metrics_on:
            key = self.attempt_key
            if self.facts.model:
                key += (("gen_ai.response.model", self.facts.model),)
            if error_type is not None:
                key += (("error.type", error_type),)
            telemetry.operation_duration.record(time.perf_counter() - self.began, key)
        span, self.attempt = self.attempt, None
        if span is None:
            return
        facts, attributes = self.facts, span.attributes
        if facts.model:
            attributes["gen_ai.response.model"] = facts.model
        if facts.response_id:
            attributes["gen_ai.response.id"] = facts.response_id
        if facts.finish_reasons:
            attributes["gen_ai.response.finish_reasons"] = facts.finish_reasons
        if error_type is not None:
            attributes["error.type"] = error_type
            span.set_error(description)
        span.end()

    # -- money ---------------------------------------------------------------------

    def held(self, amount_nano: int) -> None:
        if self.server is not None:
            self.server.add_event("gatewayd.hold", {"gatewayd.hold_nano": amount_nano})

    def settled(self, usage: "Usage", outcome: str, cost_nano: int) -> None:
        if self.server is not None:
            self.server.add_event("gatewayd.settlement", {
                "gatewayd.cost_nano": cost_nano, "gatewayd.usage_status": outcome,
                "gen_ai.usage.input_tokens": usage.input_tokens, "gen_ai.usage.output_tokens": usage.output_tokens})
        telemetry = self.telemetry
        if self.attempt_attrs is not None and telemetry.metrics_on:
            key = self.attempt_key
            if self.facts.model:
                key += (("gen_ai.response.model", self.facts.model),)
            if usage.input_tokens or usage.output_tokens:
                telemetry.token_usage.record(usage.input_tokens, key + (("gen_ai.token.type", "input"),))
                telemetry.token_usage.record(usage.output_tokens, key + (("gen_ai.token.type", "output"),))
            if cost_nano:
                telemetry.cost.add(cost_nano, (("gatewayd.model", self.t.model or ""), ("gatewayd.provider", self.provider),
                                               ("gen_ai.provider.name", self.attempt_attrs["gen_ai.provider.name"])))
        if not self.attempting:
            return
        span = self.attempt
        if span is not None:
            span.attributes.update({"gen_ai.usage.input_tokens": usage.input_tokens,
                                 "gen_ai.usage.output_tokens": usage.output_tokens,
                                 "gen_ai.usage.cache_read.input_tokens": usage.cached_tokens,
                                 "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens})
        if self.watching:  # the terminal event is sent after the settlement: the stream's close ends the attempt
            self.settled_as = outcome
            return
        self._end_attempt(None if outcome == "ok" else outcome, None)

    # -- the end -------------------------------------------------------------------

    def finish(self) -> None:
        t = self.t
        if self.attempting:
            self._end_attempt(t.usage_status if t.usage_status not in (None, "ok") else "abandoned", None)
        if self.telemetry.metrics_on:
            self.record_request(self.telemetry, t)
        server = self.server
        if server is None:
            return
        attributes = server.attributes
        attributes["http.response.status_code"] = t.status
        attributes["gatewayd.endpoint"] = t.endpoint
        attributes["gatewayd.stream"] = t.stream
        if t.client:
            attributes["client.address"] = t.client
        for key, value in (("gatewayd.account_id", t.account_id), ("gatewayd.key_id", t.key_id),
                           ("gen_ai.request.model", t.model), ("gatewayd.provider", t.provider),
                           ("gatewayd.route", t.route), ("gatewayd.usage_status", t.usage_status)):
            if value is not None:
                attributes[key] = value
        if t.status >= 400:
            attributes["error.type"] = t.error_code or str(t.status)
        if t.first_byte_s is not None and t.stream:
            attributes["gatewayd.time_to_first_byte_s"] = t.first_byte_s
        if t.status >= 500:
            server.set_error(t.error_code)
        server.end()

    @staticmethod
    def record_request(telemetry: Telemetry, t: "Trace") -> None:
        key: Attributes = (("http.request.method", t.method), ("http.response.status_code", t.status),
                           ("gatewayd.endpoint", t.endpoint))
        if t.status >= 400:
            key += (("error.type", t.error_code or str(t.status)),)
        if t.model:
            key += (("gatewayd.model", t.model),)
        telemetry.requests.add(1, key)
        telemetry.request_duration.record(t.duration_s, key)


class _Watched:
    """A traced stream read on its way to the client for its facts; closing it closes the pump
    and ends the attempt's span."""

    __slots__ = ("pump", "spans")

    def __init__(self, pump: AsyncIterator[bytes], spans: RequestSpans) -> None:
        self.pump = pump
        self.spans = spans

    def __aiter__(self) -> "_Watched":
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self.pump.__anext__()
        except StopAsyncIteration:
            self.spans.stream_closed()
            raise
        self.spans.facts.feed(chunk)
        return chunk

    async def aclose(self) -> None:
        try:
            await self.pump.aclose()  # type: ignore[attr-defined]
        finally:
            self.spans.stream_closed()
