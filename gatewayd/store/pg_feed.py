"""The PostgreSQL store's change feed: every instance hears which accounts and keys changed.

Every instance authenticates from its own memory (``gatewayd.changes`` applies the feed to
the key cache), so a key disabled or an account changed through one instance must reach the
others. The database says so: triggers (``migrations/postgres/0002_changes_and_rate_limits.sql``
and later) NOTIFY on channel ``pg_changes`` (``account:<id>`` / ``key:<id>``) when an account's
or key's rules change, delivered at commit. Money moved by requests (credit, holds, key spend,
last-used time) does not notify: every instance reads it from the database.

The feed LISTENs on a connection of its own, a ``Link`` (``gatewayd.store.pg_link``), never
one of the request pool's: it must neither queue behind requests nor hang with them. A
LISTEN connection that died silently looks exactly like a quiet feed, so it is pinged every
``FEED_PING_S``; after a lost or silent connection the feed reconnects and sends
``Change("all")``, because the notifications sent while it was away are gone.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

import psycopg
import trio

from gatewayd.store.base import Change, StoreUnavailable
from gatewayd.store.pg_link import Link, LinkDown

log = logging.getLogger("gatewayd.store")

FEED_WAIT_S = 0.5  # the change feed waits this long for a notification, then looks again
FEED_PING_S = 5.0  # the change feed's connection is pinged this often ...
FEED_PING_TIMEOUT_S = 3.0  # ... and replaced (everything reloaded) when it does not answer within this


class ChangeFeed:
    """Mixed into ``PostgresStore``: ``follow_changes`` on its own LISTEN connection to ``url``."""

    url: str

    async def follow_changes(self, apply: Callable[[Change], Awaitable[None]], *,
                             task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """``await apply(Change)`` for every account or key whose rules another instance (or this
        one) changed: LISTEN on ``pg_changes``, which triggers NOTIFY at commit.

        The LISTEN connection is a ``Link`` (TCP keepalives; every call bounded) and is pinged
        every ``FEED_PING_S``: a connection that died silently (a NAT or load balancer that
        dropped it, sending nothing) would otherwise look like a quiet feed forever. After a
        lost or silent connection it reconnects (backoff up to 5 s) and sends
        ``Change("all")``: notifications sent while it was away are gone, so the caller
        reloads everything."""
        link = Link(self.url, autocommit=True, setup=_listen)
        started = False
        delay = 0.25
        pinged = trio.current_time()
        try:
            while True:
                try:
                    if link.conn is None:
                        await link.call(_connected, timeout=FEED_PING_TIMEOUT_S)
                        delay, pinged = 0.25, trio.current_time()
                        if started:
                            await apply(Change("all"))
                        else:
                            started = True
                            task_status.started()
                    if trio.current_time() - pinged >= FEED_PING_S:
                        await link.call(_ping, timeout=FEED_PING_TIMEOUT_S)
                        pinged = trio.current_time()
                    payloads = await link.call(_wait_notifies, timeout=FEED_WAIT_S + FEED_PING_TIMEOUT_S)
                    for payload in payloads:
                        change = Change.parse(payload)
                        if change is not None:
                            await apply(change)
                except (LinkDown, StoreUnavailable) as e:
                    log.warning("change feed lost its connection (%s); reconnecting", e)
                    await link.aclose()  # a reload that failed is tried again after the reconnection
                    await trio.sleep(delay)
                    delay = min(delay * 2, 5.0)
        finally:
            with trio.CancelScope(shield=True):
                await link.aclose()


def _listen(conn: psycopg.Connection) -> None:
    conn.execute("LISTEN pg_changes")


def _connected(conn: psycopg.Connection) -> None:
    """Nothing: ``Link.call`` connects (and LISTENs) before running it."""


def _ping(conn: psycopg.Connection) -> None:
    conn.execute("SELECT 1")  # a notification arriving meanwhile waits for the next notifies() (psycopg >= 3.2.4)


def _wait_notifies(conn: psycopg.Connection) -> list[str]:
    """The next payload as soon as it arrives, or none within ``FEED_WAIT_S`` (in a worker thread)."""
    return [n.payload for n in conn.notifies(timeout=FEED_WAIT_S, stop_after=1)]
