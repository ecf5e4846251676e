"""One request as the operator sees it afterwards: filled in along the way, read once at the end.

The listener starts a ``Trace`` for every HTTP request and puts it in a context variable;
the relay fills in who asked (account and key ids, never the secret), what for (model,
provider, route), and how it ended (usage status, tokens, cost, the provider's time to
first byte). When the last byte is sent the listener hands it to the request log line and
the metrics. A context variable rather than an argument threaded through every step:
trio copies the context into the handler's and the stream's tasks, so each step finds
its request's trace without the relay's signatures growing, and code run outside a
request (tests of the relay alone) finds ``None`` and records nothing.
"""

from __future__ import annotations

import contextvars
import os
import time
from typing import Any, Callable

import attrs


def new_request_id() -> str:
    """The id a response carries in ``X-Request-Id`` and its log line (also for answers hypercorn
    sends before any app runs: ``gatewayd.hypercorn_patches``)."""
    return "req_" + os.urandom(12).hex()


current: contextvars.ContextVar["Trace | None"] = contextvars.ContextVar("gatewayd_trace", default=None)


@attrs.define(slots=True)
class Trace:
    request_id: str
    method: str
    path: str
    client: str | None
    started: float = attrs.field(factory=time.perf_counter)
    endpoint: str = "other"  # chat | messages | responses | embeddings | models | console | ops | webhooks | other
    account_id: str | None = None
    key_id: str | None = None
    model: str | None = None  # a catalogue id, set once the model is authorized (bounded label)
    requested_model: str | None = None  # the id the client sent, as sent (cut to 100 characters)
    # a refused or failed request: the code it was answered with (else its type), also the
    # ``error.type`` of its span and metrics (gatewayd.telemetry)
    error_code: str | None = None
    reason: str | None = None  # ... and why, in a few words (a 401's cause: for the operator only)
    provider: str | None = None
    route: str | None = None  # the route taken: "provider/upstream_id" (ModelRoute.name), the last one tried
    stream: bool = False
    status: int = 0  # the HTTP status the client got
    usage_status: str | None = None  # the usage row's status (ok, upstream_error, ...)
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cost_nano: int = 0
    upstream_ttfb_s: float | None = None  # request sent -> provider's status line
    first_byte_s: float | None = None  # request arrived -> first body byte to the client
    duration_s: float = 0.0
    # the request's OpenTelemetry spans (gatewayd.telemetry.otel.RequestSpans); None: telemetry off
    spans: Any = None
    # the client left before the request was settled: the line waits for the settlement
    # (gatewayd.hangups), so it says what was charged; ``finish`` writes it then
    settling: bool = False
    finish: "Callable[[Trace], None] | None" = None

    def fields(self) -> dict:
        """The request log line's fields (and nothing a prompt or completion could be in)."""
        return {
            "request_id": self.request_id,
            "account_id": self.account_id,
            "key_id": self.key_id,
            "client": self.client,
            "method": self.method,
            "path": self.path,
            "endpoint": self.endpoint,
            "model": self.model,
            "requested_model": self.requested_model,
            "error_code": self.error_code,
            "reason": self.reason,
            "provider": self.provider,
            "route": self.route,
            "stream": self.stream,
            "status": self.status,
            "usage_status": self.usage_status,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost_nano": self.cost_nano,
            "upstream_ttfb_ms": None if self.upstream_ttfb_s is None else round(self.upstream_ttfb_s * 1000, 1),
            "first_byte_ms": None if self.first_byte_s is None else round(self.first_byte_s * 1000, 1),
            "duration_ms": round(self.duration_s * 1000, 1),
        }


def get() -> Trace | None:
    return current.get()


def settled_later(t: Trace | None) -> None:
    """The request's settlement, done after its client left, is over: its line is written
    now if the listener already finished the request (``Trace.settling``)."""
    if t is None:
        return
    t.settling = False
    finish, t.finish = t.finish, None
    if finish is not None:
        finish(t)


def asked_for(model_id: object) -> None:
    """The request names ``model_id``: the log line says so, whether or not it is served."""
    t = current.get()
    if t is not None and isinstance(model_id, str):
        t.requested_model = model_id[:100]


def refused(code: str, reason: str) -> None:
    """The request is answered with an error: its code and why (gatewayd.telemetry.refused sets
    the code too, the error's type where the code is empty)."""
    t = current.get()
    if t is not None:
        t.error_code = code
        t.reason = reason
