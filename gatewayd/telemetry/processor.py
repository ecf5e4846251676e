"""Spans to the exporter: a bounded queue, a worker thread, and counts of what was lost.

The event loop's part is an append to a ``deque`` (thread-safe). The worker thread turns
the :class:`~gatewayd.telemetry.spans.SpanRecord` objects into the SDK's ``ReadableSpan``
and hands them to the SDK's OTLP exporter, which encodes and sends them (protobuf over HTTP
or gRPC, with its own retries and timeout), so a slow or absent collector fills the queue
and then costs the requests nothing more. Spans that find the queue full are dropped and
counted (``dropped``, on ``/metrics`` as ``gateway_otel_spans_dropped``), and said so in one
log line a minute at most (the SDK's ``BatchSpanProcessor`` logs a warning per span dropped).
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from gatewayd import logs
from gatewayd.telemetry.spans import SERVER, SpanRecord

REPORT_EVERY_S = 60.0


SAMPLED = TraceFlags(TraceFlags.SAMPLED)
UNSET = Status(StatusCode.UNSET)


class BoundedSpanProcessor:
    def __init__(self, exporter: SpanExporter, resource: Resource, scope: InstrumentationScope, *, max_queue: int,
                 batch_size: int, delay_s: float) -> None:
        self.exporter = exporter
        self.resource = resource
        self.scope = scope
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.delay_s = delay_s
        self.dropped = 0  # queue full (written by the event loop's thread only)
        self.exported = 0  # accepted by the collector (the worker's)
        self.failed = 0  # the exporter gave up on them: the collector down, slow or refusing
        self._queue: collections.deque[SpanRecord] = collections.deque()
        self._wake = threading.Event()
        self._export_lock = threading.Lock()
        self._stopping = False
        self._deadline: float | None = None  # set by ``shutdown``: the last exports stop then
        self._reported = (0, 0, time.monotonic())
        self._thread = threading.Thread(target=self._work, name="gatewayd-otlp-spans", daemon=True)
        self._thread.start()

    def on_end(self, span: SpanRecord) -> None:
        if self._stopping:
            return
        if len(self._queue) >= self.max_queue:
            self.dropped += 1
            return
        self._queue.append(span)
        if len(self._queue) >= self.batch_size:
            self._wake.set()

    def _work(self) -> None:
        while not self._stopping:
            self._wake.wait(self.delay_s)
            self._wake.clear()
            self._export_queued()
            self._report()
        self._export_queued()
        left = len(self._queue)
        if left:  # the shutdown's time is up (a collector down or slow): counted, not sent
            self._queue.clear()
            self.dropped += left
        self._report(final=True)

    def _export_queued(self) -> None:
        with self._export_lock:
            while self._queue and (self._deadline is None or time.monotonic() < self._deadline):
                batch: list[SpanRecord] = []
                while self._queue and len(batch) < self.batch_size:
                    batch.append(self._queue.popleft())
                try:
                    result = self.exporter.export([self._readable(span) for span in batch])
                except Exception:  # noqa: BLE001 - an exporter bug must not end the worker; counted, logged below
                    logging.getLogger("gatewayd.telemetry").exception("the OTLP span exporter failed")
                    result = SpanExportResult.FAILURE
                if result is SpanExportResult.SUCCESS:
                    self.exported += len(batch)
                else:
                    self.failed += len(batch)

    def _readable(self, span: SpanRecord) -> ReadableSpan:
        """The SDK's form of a finished span, for its exporter."""
        state = TraceState.from_header([span.tracestate]) if span.tracestate else None
        parent = None
        if span.parent_id is not None:
            parent = SpanContext(span.trace_id, span.parent_id, is_remote=span.remote_parent, trace_flags=SAMPLED,
                                 trace_state=state)
        return ReadableSpan(
            name=span.name, kind=SpanKind.SERVER if span.kind == SERVER else SpanKind.CLIENT,
            context=SpanContext(span.trace_id, span.span_id, is_remote=False, trace_flags=SAMPLED, trace_state=state),
            parent=parent, resource=self.resource, attributes=span.attributes,
            events=[Event(name, attributes, timestamp) for name, timestamp, attributes in span.events],
            status=UNSET if span.error is None else Status(StatusCode.ERROR, span.error or None),
            start_time=span.start_ns, end_time=span.end_ns, instrumentation_scope=self.scope)

    def _report(self, final: bool = False) -> None:
        dropped, failed, since = self._reported
        now = time.monotonic()
        if (now - since < REPORT_EVERY_S and not final) or (self.dropped == dropped and self.failed == failed):
            return
        logs.event("telemetry: spans lost", logging.WARNING, dropped=self.dropped - dropped,
                   not_exported=self.failed - failed, queued=len(self._queue), max_queue=self.max_queue)
        self._reported = (self.dropped, self.failed, now)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export what is queued now, in the caller's thread (tests; shutdown)."""
        self._export_queued()
        return True

    def shutdown(self, deadline: float, export_timeout_s: float) -> None:
        """Send what is queued until ``deadline`` (``time.monotonic()``; no export starts after
        it, and one under way ends within ``export_timeout_s``), count the rest as dropped, then
        close the exporter: a daemon stopping while its collector is down waits no longer."""
        self._deadline = deadline
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()) + export_timeout_s + 1)
        self.exporter.shutdown()
