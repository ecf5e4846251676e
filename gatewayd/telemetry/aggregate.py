"""The OTLP metrics, aggregated here and exported by the SDK's OTLP metric exporter.

The SDK's own instruments cost 10-20 us a record on the event loop (each record hashes and
validates its attributes, through several layers), and a request makes six; these cost about
1 us: a dict lookup by the attribute tuple, a bisect, a few additions under a lock. A worker
thread turns them into the SDK's ``MetricsData`` every ``metrics_interval_s`` (cumulative
temporality, as Prometheus reads them) and hands them to ``OTLPMetricExporter``, which encodes
and sends them (HTTP or gRPC, ``OTEL_EXPORTER_OTLP_*`` honoured, its retries and timeout).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality, Histogram, HistogramDataPoint, Metric, MetricExporter, MetricsData, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

Attributes = tuple[tuple[str, Any], ...]  # sorted by nothing: each call site builds its keys in one order


class HistogramInstrument:
    __slots__ = ("name", "unit", "description", "bounds", "series", "lock")

    def __init__(self, name: str, unit: str, description: str, bounds: tuple[float, ...], lock: threading.Lock) -> None:
        self.name, self.unit, self.description, self.bounds = name, unit, description, bounds
        self.series: dict[Attributes, list] = {}  # attributes -> [count, sum, min, max, bucket counts]
        self.lock = lock

    def record(self, value: float, attributes: Attributes) -> None:
        with self.lock:
            s = self.series.get(attributes)
            if s is None:
                s = self.series[attributes] = [0, 0, value, value, [0] * (len(self.bounds) + 1)]
            s[0] += 1
            s[1] += value
            if value < s[2]:
                s[2] = value
            if value > s[3]:
                s[3] = value
            s[4][bisect.bisect_left(self.bounds, value)] += 1  # OTLP buckets: (bound[i-1], bound[i]]

    def data(self, start_ns: int, now_ns: int) -> Metric | None:
        with self.lock:
            points = [HistogramDataPoint(attributes=dict(a), start_time_unix_nano=start_ns, time_unix_nano=now_ns,
                                         count=s[0], sum=s[1], bucket_counts=list(s[4]), explicit_bounds=self.bounds,
                                         min=s[2], max=s[3]) for a, s in self.series.items()]
        if not points:
            return None
        return Metric(name=self.name, description=self.description, unit=self.unit, data=Histogram(
            data_points=points, aggregation_temporality=AggregationTemporality.CUMULATIVE))


class CounterInstrument:
    __slots__ = ("name", "unit", "description", "series", "lock")

    def __init__(self, name: str, unit: str, description: str, lock: threading.Lock) -> None:
        self.name, self.unit, self.description = name, unit, description
        self.series: dict[Attributes, int] = {}
        self.lock = lock

    def add(self, value: int, attributes: Attributes) -> None:
        with self.lock:
            self.series[attributes] = self.series.get(attributes, 0) + value

    def data(self, start_ns: int, now_ns: int) -> Metric | None:
        with self.lock:
            points = [NumberDataPoint(attributes=dict(a), start_time_unix_nano=start_ns, time_unix_nano=now_ns,
                                      value=v) for a, v in self.series.items()]
        if not points:
            return None
        return Metric(name=self.name, description=self.description, unit=self.unit, data=Sum(
            data_points=points, aggregation_temporality=AggregationTemporality.CUMULATIVE, is_monotonic=True))


class MetricsExport:
    """The instruments, and the thread that exports them every ``interval_s``."""

    def __init__(self, exporter: MetricExporter, resource: Resource, scope: InstrumentationScope, *,
                 interval_s: float, timeout_s: float) -> None:
        self.exporter = exporter
        self.resource = resource
        self.scope = scope
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.lock = threading.Lock()  # one for all: records are short, and never contend but with an export
        self.instruments: list[HistogramInstrument | CounterInstrument] = []
        self.start_ns = time.time_ns()
        self.failed = 0  # exports the exporter gave up on
        self._stop = threading.Event()
        self._export_lock = threading.Lock()
        self._thread = threading.Thread(target=self._work, name="gatewayd-otlp-metrics", daemon=True)
        self._thread.start()

    def histogram(self, name: str, unit: str, description: str, bounds: tuple[float, ...]) -> HistogramInstrument:
        instrument = HistogramInstrument(name, unit, description, bounds, self.lock)
        self.instruments.append(instrument)
        return instrument

    def counter(self, name: str, unit: str, description: str) -> CounterInstrument:
        instrument = CounterInstrument(name, unit, description, self.lock)
        self.instruments.append(instrument)
        return instrument

    def _work(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.export()

    def export(self) -> None:
        """Export every series now (the worker's call; tests and shutdown call it too)."""
        with self._export_lock:
            now = time.time_ns()
            metrics = [m for m in (i.data(self.start_ns, now) for i in self.instruments) if m is not None]
            if not metrics:
                return
            data = MetricsData(resource_metrics=[ResourceMetrics(
                resource=self.resource, schema_url="",
                scope_metrics=[ScopeMetrics(scope=self.scope, metrics=metrics, schema_url="")])])
            try:
                result = self.exporter.export(data, timeout_millis=self.timeout_s * 1000)
            except Exception:  # noqa: BLE001 - an exporter bug must not end the worker: logged, counted
                logging.getLogger("gatewayd.telemetry").exception("the OTLP metric exporter failed")
                result = None
            if result is None or result.name != "SUCCESS":
                self.failed += 1

    def shutdown(self, deadline: float) -> None:
        """The last export, if there is time before ``deadline`` (``time.monotonic()``)."""
        self._stop.set()
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        left = deadline - time.monotonic()
        if left > 0:
            self.timeout_s = min(self.timeout_s, left)
            self.export()
        self.exporter.shutdown(timeout_millis=max(0.0, deadline - time.monotonic()) * 1000)
