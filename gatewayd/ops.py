"""The operator's HTTP endpoints: ``/healthz``, ``/readyz`` and ``/metrics``.

``/healthz`` says the process answers. ``/readyz`` says a load balancer may send it
traffic: the store answers a read within ``READY_TIMEOUT_S`` and the daemon is not
draining (from the shutdown signal on it is 503, so the balancer stops sending while open
streams finish). ``/metrics`` is the Prometheus text format. They are served on the public
listener, or on their own listener when ``[server] metrics_listen`` is set.
"""

from __future__ import annotations

import logging

import orjson
import trio
from quart import Quart, Response

from gatewayd import logs
from gatewayd.drain import Drain
from gatewayd.metrics import CONTENT_TYPE, Metrics
from gatewayd.version import version

READY_TIMEOUT_S = 2.0
STORE_CHECK_S = 5.0  # the daemon checks the store this often whether or not /readyz is polled
JSON = "application/json"


class Readiness:
    """The store check, with its health changes logged once each.

    One per daemon, built by the server from the store, the metrics and the drain it also
    gives the relay: ``/readyz`` on either listener and the daemon's own periodic check
    (:meth:`watch`) share what was last seen, so ``gateway_store_up`` and ``gateway_ready``
    are right from start-up and stay current, and a store going away is logged even when
    nothing polls ``/readyz``."""

    def __init__(self, store, metrics: Metrics, drain: Drain) -> None:
        self.store = store
        self.metrics = metrics
        self.drain = drain
        self.store_up: bool | None = None

    async def store_answers(self) -> tuple[bool, str]:
        store = self.store
        reason = ""
        with trio.move_on_after(READY_TIMEOUT_S) as scope:
            try:
                await store.ping()
            except Exception as e:  # noqa: BLE001 - any failure of the store means not ready; logged below
                reason = f"{type(e).__name__}: {e}"
        if scope.cancelled_caught:
            reason = f"no answer within {READY_TIMEOUT_S:g} s"
        up = not reason
        if up != self.store_up:
            if up and self.store_up is not None:
                logs.event("store answers again", logging.INFO, store_up=True)
            elif not up:
                logs.event("store does not answer", logging.ERROR, store_up=False, reason=reason)
            self.store_up = up
            self.metrics.store_up.set(1 if up else 0)
        return up, reason

    async def check(self) -> tuple[bool, dict]:
        if self.drain.draining:
            self.metrics.ready.set(0)
            return False, {"ready": False, "reason": "draining: the gateway is shutting down"}
        up, reason = await self.store_answers()
        self.metrics.ready.set(1 if up else 0)
        if not up:
            return False, {"ready": False, "reason": f"the store does not answer ({reason})"}
        return True, {"ready": True}

    async def watch(self, every_s: float = STORE_CHECK_S) -> None:
        """Check now and then every ``every_s``, until cancelled (the daemon's nursery)."""
        while True:
            await self.check()
            await trio.sleep(every_s)


HEALTHY = orjson.dumps({"ok": True, "version": version()})


def add_ops_routes(app: Quart, readiness: Readiness) -> None:
    @app.get("/healthz")
    async def healthz():
        return Response(HEALTHY, content_type=JSON)

    @app.get("/readyz")
    async def readyz():
        ready, doc = await readiness.check()
        return Response(orjson.dumps(doc), status=200 if ready else 503, content_type=JSON)

    @app.get("/metrics")
    async def metrics():
        return Response(readiness.metrics.render(), content_type=CONTENT_TYPE)
