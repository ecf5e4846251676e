"""Spans to the exporter: a bounded queue, a worker thread, and counts of what was lost.

The SDK's own ``BatchSpanProcessor`` logs a warning for every span it drops when its queue
is full, which with a collector down is a line per span, in the gateway's log, on the
event loop. This one drops silently, counts (``dropped``, shown on ``/metrics`` as
``gateway_otel_spans_dropped``) and says so in one log line a minute at most. The event
loop's part is an append to a ``deque`` (thread-safe); the worker thread encodes and sends
(the SDK exporter: OTLP protobuf over HTTP or gRPC, with its own retries and timeout), so a
slow or absent collector fills the queue and then costs the requests nothing more.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from gatewayd import logs

REPORT_EVERY_S = 60.0


class BoundedSpanProcessor(SpanProcessor):
    def __init__(self, exporter: SpanExporter, *, max_queue: int, batch_size: int, delay_s: float) -> None:
        self.exporter = exporter
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.delay_s = delay_s
        self.dropped = 0  # queue full (written by the event loop's thread only)
        self.exported = 0  # accepted by the collector (the worker's)
        self.failed = 0  # the exporter gave up on them: the collector down, slow or refusing
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._wake = threading.Event()
        self._export_lock = threading.Lock()
        self._stopping = False
        self._reported = (0, 0, time.monotonic())
        self._thread = threading.Thread(target=self._work, name="gatewayd-otlp-spans", daemon=True)
        self._thread.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._stopping or not span.context.trace_flags.sampled:
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

    def _export_queued(self) -> None:
        with self._export_lock:
            while self._queue:
                batch: list[ReadableSpan] = []
                while self._queue and len(batch) < self.batch_size:
                    batch.append(self._queue.popleft())
                try:
                    result = self.exporter.export(batch)
                except Exception:  # noqa: BLE001 - an exporter bug must not end the worker; counted, logged below
                    logging.getLogger("gatewayd.telemetry").exception("the OTLP span exporter failed")
                    result = SpanExportResult.FAILURE
                if result is SpanExportResult.SUCCESS:
                    self.exported += len(batch)
                else:
                    self.failed += len(batch)

    def _report(self) -> None:
        dropped, failed, since = self._reported
        now = time.monotonic()
        if now - since < REPORT_EVERY_S or (self.dropped == dropped and self.failed == failed):
            return
        logs.event("telemetry: spans lost", logging.WARNING, dropped=self.dropped - dropped,
                   not_exported=self.failed - failed, queued=len(self._queue), max_queue=self.max_queue)
        self._reported = (self.dropped, self.failed, now)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export what is queued now, in the caller's thread (tests; shutdown)."""
        self._export_queued()
        return True

    def shutdown(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=self.exporter_timeout_s + 1)
        self.exporter.shutdown()

    @property
    def exporter_timeout_s(self) -> float:
        return float(getattr(self.exporter, "_timeout", 10.0))
