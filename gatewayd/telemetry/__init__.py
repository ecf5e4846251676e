"""OpenTelemetry traces and metrics over OTLP: the hooks the request path calls.

Off by default (``[telemetry]``, :mod:`gatewayd.telemetry.settings`). When on, the server
(:mod:`gatewayd.server`) starts :class:`gatewayd.telemetry.otel.Telemetry`, the listener
opens one :class:`~gatewayd.telemetry.otel.RequestSpans` per request and keeps it on the
request's :class:`~gatewayd.trace.Trace` (``t.spans``), and the steps of the relay call the
functions below at the moments only they see: an attempt starts, fails, answers; a stream's
first chunk; the hold; the settlement. Each looks the request up in the trace's context
variable and returns at once when it has no spans: with telemetry off, a hook costs a
context-variable read, and the OpenTelemetry SDK is never imported (only ``otel`` and the
two modules it uses, ``processor`` and ``aggregate``, import it, and only the server imports
``otel``, only when telemetry is on: tests/test_telemetry.py checks it).

The hooks are calls into one module rather than code in the relay, failover and pump, so
that those keep their one job and a change to what is recorded stays here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, AsyncIterator

from gatewayd import trace

if TYPE_CHECKING:
    from gatewayd.attempt import AttemptFailed
    from gatewayd.billing.pricing import Bill
    from gatewayd.billing.tab import Outcome, Tab
    from gatewayd.catalogue import ModelRoute
    from gatewayd.errors import GatewayError
    from gatewayd.formats.usage import Usage
    from gatewayd.providers.base import Call, Route
    from gatewayd.telemetry.otel import RequestSpans


def _spans() -> "RequestSpans | None":
    t = trace.current.get()
    return None if t is None else t.spans


def attempt_started(n: int, target: "ModelRoute", route: "Route", call: "Call") -> None:
    """Attempt ``n`` (0 first) is about to call ``target``: its client span starts (a failover
    event on the request's span when ``n`` > 0), and ``route.request`` gets ``traceparent``."""
    spans = _spans()
    if spans is not None:
        spans.attempt_started(n, target, route, call)


def attempt_failed(failure: "AttemptFailed") -> None:
    """The attempt failed before any byte reached the client (another route may follow)."""
    spans = _spans()
    if spans is not None:
        spans.attempt_failed(failure.upstream.status if failure.upstream is not None else None,
                             failure.outcome.value, failure.reason)


def attempt_error(error: BaseException) -> None:
    """The attempt was left by an exception that is no provider's failure (the client left, a
    fault of ours, a refusal decided on the way)."""
    spans = _spans()
    if spans is not None:
        spans.attempt_error(error)


def first_chunk(first: bytes) -> None:
    """A stream's first bytes for the client are ready (time to first chunk)."""
    spans = _spans()
    if spans is not None:
        spans.first_chunk(first)


def watch_stream(pump: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The stream as the client will get it: unchanged, or, when the request is sampled, read
    on the way for the answer's facts (response id, model, finish reasons)."""
    spans = _spans()
    return pump if spans is None else spans.watch_stream(pump)


def answered(body: bytes) -> None:
    """A plain answer, in the client's format, is about to be settled and sent."""
    spans = _spans()
    if spans is not None:
        spans.answered(body)


def held(tab: "Tab") -> None:
    """The request's hold is taken."""
    spans = _spans()
    if spans is not None:
        spans.held(tab.hold.amount_nano)


def settled(usage: "Usage", outcome: "Outcome", bill: "Bill") -> None:
    """The request's tab is settled: what was charged, and how the request ended."""
    spans = _spans()
    if spans is not None:
        spans.settled(usage, outcome.value, bill.total_nano)


def refused(error: "GatewayError") -> None:
    """The request is answered with the gateway's ``error``: its code (else its type) is the
    request's ``error.type`` on its span and in the request metrics."""
    t = trace.current.get()
    if t is not None:
        t.error_code = error.code or error.type


__all__ = ["attempt_started", "attempt_failed", "attempt_error", "first_chunk", "watch_stream", "answered", "held",
           "settled", "refused"]
