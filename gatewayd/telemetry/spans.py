"""Spans as the request path records them: plain slotted objects, no SDK on the event loop.

The OpenTelemetry SDK's spans cost about 30 us each to start and end before any attribute
(a lock, the sampler, the context API) and 1-2 us more for each attribute it checks; a
request makes two spans, three or four events and about forty attributes, so the SDK's
spans were most of tracing's cost on the event loop. A :class:`SpanRecord` is a few
assignments; the export thread (:mod:`gatewayd.telemetry.processor`) turns finished ones
into the SDK's ``ReadableSpan`` for its OTLP exporter, which encodes and sends them.
Attribute values here are always of OpenTelemetry's types (str, bool, int, float, or a
list of str): the recording code sets nothing else, and never None.

W3C trace context (``traceparent`` / ``tracestate``) is read and written here too: the
sampling decision is the SDK's ``ParentBased(TraceIdRatioBased(ratio))``, made by hand.
"""

from __future__ import annotations

import random
import re
import time
from typing import Any, Callable

SERVER, CLIENT = "server", "client"
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-.*)?$")
_random = random.Random()  # its own generator, seeded from the OS: ids are not the app's business


def new_trace_id() -> int:
    return _random.getrandbits(128) or 1


def new_span_id() -> int:
    return _random.getrandbits(64) or 1


def parse_traceparent(value: str) -> tuple[int, int, int] | None:
    """(trace id, parent span id, flags) from a ``traceparent`` header, or None when it is not
    one (W3C Trace Context: version ff and all-zero ids are invalid; a later version may
    append fields, which are ignored)."""
    value = value.strip().lower()
    found = _TRACEPARENT.match(value)
    if found is None or found.group(1) == "ff" or (found.group(1) == "00" and len(value) != 55):
        return None
    trace_id, parent_id = int(found.group(2), 16), int(found.group(3), 16)
    if not trace_id or not parent_id:
        return None
    return trace_id, parent_id, int(found.group(4), 16)


def sampled_by_ratio(trace_id: int, ratio: float) -> bool:
    """TraceIdRatioBased: the trace id's low 64 bits under ratio * 2**64 (the SDK's rule, so a
    trace is sampled alike by every service that uses it)."""
    return (trace_id & 0xFFFFFFFFFFFFFFFF) < round(ratio * (1 << 64))


def traceparent(trace_id: int, span_id: int, sampled: bool) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


class SpanRecord:
    """One sampled span. ``end`` hands it to the export queue (``on_end``)."""

    __slots__ = ("name", "kind", "trace_id", "span_id", "parent_id", "remote_parent", "tracestate", "start_ns",
                 "end_ns", "attributes", "events", "error", "on_end")

    def __init__(self, name: str, kind: str, trace_id: int, span_id: int, parent_id: int | None,
                 attributes: dict[str, Any], on_end: Callable[["SpanRecord"], None], *, remote_parent: bool = False,
                 tracestate: str | None = None) -> None:
        self.name = name
        self.kind = kind
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.remote_parent = remote_parent
        self.tracestate = tracestate
        self.start_ns = time.time_ns()
        self.end_ns = 0
        self.attributes = attributes
        self.events: list[tuple[str, int, dict[str, Any]]] = []
        self.error: str | None = None  # set: the span's status is ERROR with this description ("" for none)
        self.on_end = on_end

    def add_event(self, name: str, attributes: dict[str, Any]) -> None:
        self.events.append((name, time.time_ns(), attributes))

    def set_error(self, description: str | None) -> None:
        self.error = description or ""

    def end(self) -> None:
        if not self.end_ns:
            self.end_ns = time.time_ns()
            self.on_end(self)
