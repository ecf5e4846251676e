"""The PostgreSQL store's background work: heartbeat, judging dead instances, unfinished business.

All of it runs on the instance's maintenance ``Link`` (its own connection and thread, every
call bounded), never in the request pool's queue: a heartbeat that waited behind requests
could make a busy live instance look dead.

Judging others dead. Every instance writes ``heartbeat_at`` (the database's clock) every
``HEARTBEAT_S``. An instance silent for ``DEAD_AFTER_S`` is dead and any live instance
releases its holds (as provisional charges: see Fencing below). But silence is only evidence when
the judge could have heard: while the database is away every heartbeat stops, and the
first instance back must not declare the others dead before they had a chance to beat
again. So an instance judges only after it has itself heartbeated continuously (every
beat answered, no gap over ``MAX_BEAT_GAP_S``) for more than ``DEAD_AFTER_S``; by then
every live instance that can reach the database has beaten too.

Fencing. Silence is also no proof of death: an instance cut off alone (a partition, a
frozen link) may be alive, with streams running upstream. So

- its lease runs from the moment it *sent* its last answered heartbeat (its own monotonic
  clock); the database stamped that beat later, so others, judging by the database's clock,
  can find it dead at the earliest ``DEAD_AFTER_S`` after that moment. At
  ``FENCE_FRACTION`` of that (12 of 15 s) the instance is ``fenced``: ``reserve`` raises
  ``Fenced`` (a 503 ``store_unavailable``, nothing held) before and after taking a hold, so
  it starts no upstream work that others may already count as abandoned; the next answered
  heartbeat lifts the fence. The 3 s margin covers the step from a hold to the upstream
  send and any drift between the two clocks;
- the holds of an instance judged dead by its silence are not freed but *charged
  provisionally*: each becomes an ``unsettled`` usage row charged the held amount (and a row
  in ``unsettled``). The money stays out of everyone's reach exactly as the hold kept it.
  If the instance was alive, it registers again when it reaches the database and each of
  its settlements turns its row into the real outcome, charged the difference (one usage row
  per request, charged once: ``gatewayd_settle``). If it is known dead (its slot reclaimed
  by its next start, ``instance_slot``), the provisional charges are refunded and the rows
  become ``interrupted`` (nothing charged), as for any process that died holding.

So an account reaches below zero only by a settlement exceeding its own hold's estimate,
whichever instance settles it and whenever: the bound every other path keeps.

Unfinished business, retried each round while the database answers (bounded):

- settlements that could not be written while the request waited (``SETTLE_WAIT_S``):
  retried for ``SETTLE_GIVE_UP_S``, then given up (logged at error with what to charge).
  The hold then stays until this instance stops, when it is released as ``interrupted``
  (by its next start in the same slot, at once, or by another instance once it is silent);
- holds whose ``reserve`` committed but whose answer was lost (the client got a 503
  saying nothing was charged): released, with no usage row, as soon as the database
  answers; looked for during ``UNKNOWN_WATCH_S`` after the first answer, since a commit
  sent just before the connection broke can land late.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Callable

import psycopg
import trio
from psycopg.rows import dict_row

from gatewayd.records import utc_now_iso
from gatewayd.store.base import Hold, StoreUnavailable
from gatewayd.store.pg_link import Link, LinkDown, PgTx
from gatewayd.store.sql import R, Tx, instance_host

log = logging.getLogger("gatewayd.store")


class Fenced(StoreUnavailable):
    """This instance could not renew its lease in time: it starts no upstream work until it does."""

HEARTBEAT_S = 2.0
DEAD_AFTER_S = 15.0  # an instance silent this long is dead: its holds are released
FENCE_FRACTION = 0.8  # an instance whose lease is this far gone starts no upstream work (12 of 15 s)
MAX_BEAT_GAP_S = 3 * HEARTBEAT_S  # a longer gap between answered beats restarts this instance's own count
MAINTENANCE_TIMEOUT_S = 5.0  # one heartbeat (or background job) answered within this, or the link is dropped
SETTLE_GIVE_UP_S = 900.0  # background settlement retries stop after this (15 minutes)
UNKNOWN_WATCH_S = 60.0  # a hold whose reserve outcome was unknown is looked for this long once the database answers


class InstanceMaintenance:
    """Mixed into ``PostgresStore``: everything ``maintain()`` does, on the maintenance link."""

    instance_id: str
    slot_name: str
    _maintenance: Link

    if TYPE_CHECKING:  # provided by PostgresStore, the one class this is mixed into
        async def _read(self, job: Callable[[Tx], R]) -> R: ...

        @staticmethod
        def _apply_settled(hold: Hold, row: dict[str, Any]) -> None: ...

    def _init_maintenance(self, url: str) -> None:
        self._maintenance = Link(url, autocommit=True, row_factory=dict_row)
        self._beating_since: float | None = None  # when the current run of answered heartbeats began
        self._last_beat: float | None = None
        # the lease: when the last answered heartbeat was sent (registration counts as one)
        self._lease_from = time.monotonic()
        self._fence_reported = False
        # (hold, settle job, cost, when it went to the background)
        self._pending: list[tuple[Hold, Callable[[Tx], Any], int, float]] = []
        self._unknown: dict[str, float | None] = {}  # request id -> when the database first answered after

    async def _maint(self, job: Callable[[Tx], R]) -> R:
        """``job(tx)`` in one transaction on the maintenance link, bounded by ``MAINTENANCE_TIMEOUT_S``."""

        def run(conn: psycopg.Connection) -> R:
            with conn.transaction():
                return job(PgTx(conn))

        try:
            result: R = await self._maintenance.call(run, timeout=MAINTENANCE_TIMEOUT_S)
            return result
        except LinkDown as e:
            raise StoreUnavailable(f"PostgreSQL: {e}") from None

    def _register(self, tx: Tx) -> None:
        tx.run("INSERT INTO instances (id, host, pid, slot, started_at) VALUES (?, ?, ?, ?, ?)"
               " ON CONFLICT (id) DO NOTHING", (self.instance_id, instance_host(), os.getpid(), self.slot_name,
                                               utc_now_iso()))

    # -- heartbeat and judging --------------------------------------------------------------

    async def heartbeat(self) -> None:
        def beat(tx: Tx) -> None:
            if not tx.run("UPDATE instances SET heartbeat_at = clock_timestamp() WHERE id = ?", (self.instance_id,)):
                # declared dead while we could not reach the database (our holds were released): register again
                self._register(tx)

        sent = time.monotonic()  # before the database stamps the beat: the lease is reckoned from here
        try:
            await self._maint(beat)
        except StoreUnavailable:
            self._beating_since = None
            if self.fenced and not self._fence_reported:
                self._fence_reported = True
                log.error("%s; requests get 503 store_unavailable until a heartbeat is answered",
                          self.fenced_message())
            raise
        if self._fence_reported and self.fenced:
            log.warning("heartbeat answered again: this instance starts upstream work again")
        self._fence_reported = False
        self._lease_from = max(self._lease_from, sent)
        now = time.monotonic()
        if self._beating_since is None or self._last_beat is None or now - self._last_beat > MAX_BEAT_GAP_S:
            self._beating_since = now
        self._last_beat = now

    @property
    def fenced(self) -> bool:
        """True while this instance's lease may be running out: it must start no upstream work
        (cheap: a clock read, for the request path)."""
        return time.monotonic() - self._lease_from > DEAD_AFTER_S * FENCE_FRACTION

    def fenced_message(self) -> str:
        return (f"PostgreSQL: no heartbeat answered for {time.monotonic() - self._lease_from:.1f} s;"
                f" this instance is fenced (others may release its holds after {DEAD_AFTER_S:g} s)")

    def may_judge(self) -> bool:
        """True once this instance has heartbeated without a break for more than ``DEAD_AFTER_S``."""
        return (self._beating_since is not None and self._last_beat is not None
                and time.monotonic() - self._last_beat <= MAX_BEAT_GAP_S
                and self._last_beat - self._beating_since > DEAD_AFTER_S)

    async def instances(self) -> list[dict[str, Any]]:
        return await self._read(lambda tx: tx.rows(
            "SELECT id, host, pid, started_at, extract(epoch FROM clock_timestamp() - heartbeat_at)::float8"
            " AS heartbeat_age_s FROM instances ORDER BY started_at"))

    async def release_dead_holds(self) -> int:
        """Release the holds of every instance silent for ``DEAD_AFTER_S``; returns how many.
        Nothing until this instance may judge (see the module docstring)."""
        if not self.may_judge():
            return 0
        dead = await self._maint(lambda tx: tx.rows(
            "SELECT id FROM instances WHERE id != ? AND heartbeat_at < clock_timestamp() - make_interval(secs => ?)"
            " UNION SELECT DISTINCT h.instance_id FROM holds h LEFT JOIN instances i ON i.id = h.instance_id"
            " WHERE i.id IS NULL AND h.instance_id != ?", (self.instance_id, DEAD_AFTER_S, self.instance_id)))
        released = 0
        for row in dead:
            released += await self._maint(functools.partial(self._release_instance, row["id"], DEAD_AFTER_S))
        return released

    def _release_instance(self, instance_id: str, silent_for: float, tx: Tx, *, certain: bool = False) -> int:
        """Release the holds of an instance silent for ``silent_for`` s (the database's clock).

        ``certain``: it is known dead (its slot was reclaimed): its holds are released for
        nothing (``interrupted``) and its earlier provisional charges refunded. Otherwise it may
        be alive behind a partition: its holds become provisional charges (``unsettled``)."""
        # SKIP LOCKED: when two live instances clean up the same dead one, one does it; and an
        # instance taking a hold right now (FOR KEY SHARE on its row, see reserve) is alive
        claimed = tx.one("SELECT id FROM instances WHERE id = ? AND heartbeat_at < clock_timestamp()"
                         " - make_interval(secs => ?) FOR UPDATE SKIP LOCKED", (instance_id, silent_for))
        orphaned = tx.one("SELECT 1 AS gone FROM instances WHERE id = ?", (instance_id,)) is None
        if claimed is None and not orphaned:
            return 0  # alive again, or another instance is releasing it right now
        now = utc_now_iso()
        holds = tx.rows("DELETE FROM holds WHERE instance_id = ? RETURNING request_id, account_id, key_id, model,"
                        " endpoint, amount_nano", (instance_id,))
        for h in sorted(holds, key=lambda h: h["request_id"]):
            charge = 0 if certain else h["amount_nano"]
            tx.run("INSERT INTO usage (request_id, created_at, account_id, key_id, model, endpoint, stream, status,"
                   " http_status, cost_nano, hold_nano) VALUES (?, ?, ?, ?, ?, ?, 0, ?, 0, ?, ?)",
                   (h["request_id"], now, h["account_id"], h["key_id"], h["model"], h["endpoint"],
                    "interrupted" if certain else "unsettled", charge, h["amount_nano"]))
            if not certain:
                tx.run("INSERT INTO unsettled (request_id, instance_id, account_id, key_id, amount_nano, created_at)"
                       " VALUES (?, ?, ?, ?, ?, ?)",
                       (h["request_id"], instance_id, h["account_id"], h["key_id"], charge, now))
            # keys before accounts, as in the money statements: one lock order
            tx.run("UPDATE keys SET held_nano = held_nano - ?, spent_nano = spent_nano + ? WHERE id = ?",
                   (h["amount_nano"], charge, h["key_id"]))
            tx.run("UPDATE accounts SET held_nano = held_nano - ?, credit_nano = credit_nano - ? WHERE id = ?",
                   (h["amount_nano"], charge, h["account_id"]))
        refunded = []
        if certain:
            refunded = tx.rows("DELETE FROM unsettled WHERE instance_id = ? RETURNING request_id, account_id, key_id,"
                               " amount_nano", (instance_id,))
            for r in sorted(refunded, key=lambda r: r["request_id"]):
                tx.run("UPDATE usage SET status = 'interrupted', cost_nano = cost_nano - ? WHERE request_id = ?"
                       " AND status = 'unsettled'", (r["amount_nano"], r["request_id"]))
                tx.run("UPDATE keys SET spent_nano = spent_nano - ? WHERE id = ?", (r["amount_nano"], r["key_id"]))
                tx.run("UPDATE accounts SET credit_nano = credit_nano + ? WHERE id = ?",
                       (r["amount_nano"], r["account_id"]))
        tx.run("DELETE FROM instances WHERE id = ?", (instance_id,))
        if holds and certain:
            log.warning("released %d holds of stopped instance %s (recorded as interrupted)", len(holds), instance_id)
        elif holds:
            log.warning("instance %s silent for %g s: its %d holds are charged provisionally (unsettled) until it"
                        " reports their outcome", instance_id, silent_for, len(holds))
        if refunded:
            log.warning("refunded %d provisional charges of stopped instance %s (recorded as interrupted)",
                        len(refunded), instance_id)
        return len(holds)

    # -- unfinished business ------------------------------------------------------------------

    async def _retry_pending(self) -> None:
        """Background settlements, oldest first; the first that cannot be written ends the round."""
        while self._pending:
            hold, job, cost, since = self._pending[0]
            if time.monotonic() - since > SETTLE_GIVE_UP_S:
                self._pending.pop(0)
                log.error("settlement of %s given up after %d s without the database: %s not charged for %s"
                          " nano-USD; its hold stays until this instance stops (then released as interrupted)",
                          hold.request_id, SETTLE_GIVE_UP_S, hold.account.id, cost)
                continue
            self._apply_settled(hold, await self._maint(job))  # StoreUnavailable: try again next round
            self._pending.pop(0)
            log.warning("settlement of %s written after the database came back", hold.request_id)

    async def _release_unknown_holds(self) -> None:
        """Holds whose reserve may have committed although the caller was told it failed."""
        if not self._unknown:
            return
        wanted = sorted(self._unknown)

        def release(tx: Tx) -> list[str]:
            holds = tx.rows("DELETE FROM holds WHERE instance_id = ? AND request_id = ANY(?) RETURNING request_id,"
                            " account_id, key_id, amount_nano", (self.instance_id, wanted))
            for h in holds:
                tx.run("UPDATE keys SET held_nano = held_nano - ? WHERE id = ?", (h["amount_nano"], h["key_id"]))
                tx.run("UPDATE accounts SET held_nano = held_nano - ? WHERE id = ?",
                       (h["amount_nano"], h["account_id"]))
            return [h["request_id"] for h in holds]

        released = set(await self._maint(release))
        now = time.monotonic()
        for request_id in wanted:
            first = self._unknown.get(request_id)
            if request_id in released:
                log.warning("released the hold of %s: it was taken but its request was answered 503", request_id)
                del self._unknown[request_id]
            elif first is None:
                self._unknown[request_id] = now
            elif now - first > UNKNOWN_WATCH_S:
                del self._unknown[request_id]  # its reserve never committed

    async def maintain_once(self) -> None:
        """One round: heartbeat, then (while the database answers) the unfinished business and the dead."""
        try:
            await self.heartbeat()
            await self._retry_pending()
            await self._release_unknown_holds()
            await self.release_dead_holds()
        except StoreUnavailable as e:
            log.warning("database unavailable: %s", e)

    async def maintain(self) -> None:
        """Forever: one ``maintain_once`` every ``HEARTBEAT_S``."""
        while True:
            await trio.sleep(HEARTBEAT_S)
            await self.maintain_once()
