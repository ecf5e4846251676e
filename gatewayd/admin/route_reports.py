"""Route health across instances: each instance publishes its ``Router.report`` to the store
every ``REPORT_EVERY_S``, and ``GET /admin/v1/routes?instances=all`` (the operator console's
routes page) shows every instance's rows, each with its ``instance``, ``host`` and
``reported_at``. An instance silent for ``STALE_AFTER_S`` is left out (stopped, or cut off
from the database); this instance's own rows are always its live ones.

Only PostgreSQL has several instances on one database; on SQLite nothing is published and
the answer is this instance's rows.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Callable

import trio

from gatewayd.records import utc_now_iso
from gatewayd.store.base import StoreError, utc_iso
from gatewayd.store.sql import instance_host

REPORT_EVERY_S = 5.0
STALE_AFTER_S = 30.0
log = logging.getLogger("gatewayd.admin")


async def publish_forever(store, report: Callable[[], list[dict[str, Any]]]) -> None:
    """Publish this instance's route health until cancelled; a store outage skips a beat."""
    host = instance_host()
    try:
        while True:
            try:
                await store.publish_route_report(store.instance_id, host, report(), utc_now_iso())
            except StoreError as e:
                log.debug("route report not published: %s", e)
            await trio.sleep(REPORT_EVERY_S)
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(2):
            try:
                await store.forget_route_report(store.instance_id)
            except StoreError:
                pass


async def every_instance(store, local: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """This instance's rows and every other live instance's, each marked with where it came from."""
    now = dt.datetime.now(dt.timezone.utc)
    me = getattr(store, "instance_id", "local")
    rows = [{**r, "instance": me, "host": instance_host(), "reported_at": utc_iso(now)} for r in local]
    if store.kind != "postgres":
        return rows
    since = utc_iso(now - dt.timedelta(seconds=STALE_AFTER_S))
    for instance, host, reported_at, report in await store.route_reports(since):
        if instance != me:
            rows += [{**r, "instance": instance, "host": host, "reported_at": reported_at} for r in report]
    return rows
