"""The PostgreSQL store: any number of gatewayd instances on one database, money exact across them.

psycopg's async API does not run under trio, so the sync ``psycopg_pool.ConnectionPool``
runs in worker threads (``trio.to_thread.run_sync``). Two queues lead to the pool, each a
``CapacityLimiter`` of the pool's size: one for request work (holds, reads, admin writes)
and one for settlements, so a settlement never waits behind a backlog of new requests,
only for a connection. A request's whole call, queue, pool, the connection's check and
the statement together, is bounded by ``POOL_WAIT_S``: then it gets ``StoreUnavailable``
(a 503), however many wait with it, even if the database went silent (a black hole): the
watchdog (``pg_link.WATCHDOG``) shuts the socket of a connection whose call outlived its
deadline, so the thread wakes and the connection is discarded, never lent again; a thread
that still does not come back is abandoned, never waited for. Every other call has its own
deadline (settlement attempts, admin writes, reads), and the server bounds each statement
(``statement_timeout``) and each silent client's transaction.

Money: a hold is taken by the database. ``reserve`` is one transaction of two
conditional UPDATEs (the key: limit - spent - held >= amount; the account: credit -
held >= amount) and the hold row, so no two requests on any instances can together hold
more than is there. ``settle`` is one transaction: the hold row deleted, the usage row
inserted, the account charged and released, the key's spend, hold and last-used time.
Each is one statement, a function of the schema (``gatewayd_hold``, ``gatewayd_settle``)
called in autocommit mode: one round trip instead of five to seven (BEGIN, each
statement, COMMIT). ``settle`` is idempotent (a retry after an unknown commit finds its
own usage row), so it can be retried while the database is away: for ``SETTLE_WAIT_S``
with the request waiting, then in the background (bounded: ``pg_instances``). A
``reserve`` whose commit may have happened although its answer was lost raises
``StoreUnavailable`` like any other (the client is told nothing was charged) and its
hold, if it exists, is released in the background as soon as the database answers.

Instances: each registers a row and heartbeats with the database's clock; hold rows carry
their instance; the holds of an instance that stopped beating are released by the live
ones, and a live instance's never (``pg_instances`` says how "dead" is judged, how an
instance that cannot renew its lease fences itself, why the holds of a silent instance
become provisional charges, and what an instance's slot file in its data dir has to do
with it: ``instance_slot``). A database that cannot be reached, or a fenced instance, makes
``reserve`` raise ``StoreUnavailable`` (a 503, nothing held).

Changes: what one instance changes in an account's or key's rules reaches every instance's
key cache by LISTEN/NOTIFY, on a connection of its own (``pg_feed``).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import psycopg
import psycopg_pool
import trio
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from gatewayd.records import Account, Key
from gatewayd.store.audit import BUDGET_COLUMNS, AuditAccount, AuditKey, audit_budget, build_audit
from gatewayd.store.base import Hold, Refusal, Settlement, StoreUnavailable, check_schema_known, log_migration
from gatewayd.store.instance_slot import Slot, SlotsExhausted, claim_slot
from gatewayd.store.pg_feed import ChangeFeed
from gatewayd.store.pg_instances import Fenced, InstanceMaintenance
from gatewayd.store.pg_link import WATCHDOG, PgTx, keepalives
from gatewayd.store.sql import (
    ACCOUNT_COLUMNS,
    KEY_COLUMNS,
    Job,
    R,
    SQLStore,
    Tx,
    account_from_row,
    instance_host,
    key_from_row,
    new_instance_id,
)

log = logging.getLogger("gatewayd.store")

MIGRATION_LOCK = 0x6761_7465  # pg_advisory_lock key: one migrating instance at a time
# Deadlines (client side: past one the connection's socket is shut and the call gives up)
POOL_WAIT_S = 2.0  # a request's store call in all (queue, pool, connection check, statement), then a 503
SETTLE_CALL_S = 5.0  # one attempt of a settlement (retried, it is idempotent)
WRITE_DEADLINE_S = 10.0  # an admin or console write
READ_DEADLINE_S = 60.0  # a read (usage exports and the audit can be long)
ROLLBACK_S = 1.0  # the rollback of a job that failed
ABANDON_GRACE_S = 0.25  # past its deadline (plus this) a call's thread is abandoned, never waited for
CHECK_S = 1.0  # the pool's connection check (an empty query) at most, whatever the caller's deadline
# Server side: every pool connection's statements stop after STATEMENT_TIMEOUT_S (a job with a
# longer deadline raises its own with SET LOCAL), and a transaction whose client went silent is
# ended after IDLE_IN_TRANSACTION_S, so it cannot keep an account's row locked
STATEMENT_TIMEOUT_S = 3.0
IDLE_IN_TRANSACTION_S = 15.0
SETTLE_WAIT_S = 30.0  # a settling request retries this long (backoff 0.25 s .. 4 s) before going on
# How long psycopg_pool keeps retrying one lost connection (delays 1, 2, 4, 8 s) before it
# gives the slot up; the next request that needs a connection starts a new attempt at 1 s.
# Its backoff doubles without a cap within the window: with the window at "forever" (as it
# was), the pool came back 47 s after a 70 s outage ended (the delay had grown to 64 s).
RECONNECT_WINDOW_S = 15.0

UNAVAILABLE = (psycopg.OperationalError, psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed)

# the money statements (migrations/postgres/0004_money_statements.sql); the casts pick the
# functions whatever types psycopg gives the parameters
HOLD = ("SELECT * FROM gatewayd_hold(?::text, ?::text, ?::text, ?::text, ?::text, ?::bigint, ?::text, ?::text,"
        " ?::text, ?::integer, ?::text)")
SETTLE = ("SELECT * FROM gatewayd_settle(?::text, ?::text, ?::text, ?::text, ?::text, ?::text, ?::integer, ?::text,"
          " ?::integer, ?::bigint, ?::bigint, ?::bigint, ?::bigint, ?::bigint, ?::bigint, ?::text, ?::integer,"
          " ?::bigint, ?::text, ?::text)")  # migrations/postgres/0015_usage_requested_model.sql


class _SentThenLost(Exception):
    """The connection broke after the job was sent: whether it committed is unknown."""


class OutcomeUnknown(StoreUnavailable):
    """The database stopped answering after the work was sent: it may or may not have committed."""


def migrate(url: str, folder: Traversable | None = None) -> int:
    """Apply every ``migrations/postgres/NNNN_*.sql`` not yet recorded, under an advisory lock:
    instances starting together on an empty database take turns, and the second finds the
    work done. A file runs when its own number is missing (not when it is above the
    highest), as in the SQLite store: migrations merged out of number order run once each."""
    if folder is None:
        folder = resources.files("gatewayd.store").joinpath("migrations").joinpath("postgres")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            applied = {row[0] for row in conn.execute("SELECT version FROM schema_version")}
            check_schema_known("PostgreSQL", applied, {int(f.name.split("_", 1)[0]) for f in files})
            for f in files:
                version = int(f.name.split("_", 1)[0])
                if version in applied:
                    continue
                began = time.perf_counter()
                with conn.transaction():
                    conn.execute(f.read_text())  # one script (function bodies hold ';'), no parameters
                    conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
                log_migration("postgresql", max(applied, default=0), version, time.perf_counter() - began)
                applied.add(version)
            return max(applied, default=0)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


class PostgresStore(InstanceMaintenance, ChangeFeed, SQLStore):
    kind = "postgres"

    def __init__(self, url: str, pool: psycopg_pool.ConnectionPool, pool_size: int, slot: Slot | None) -> None:
        self.url = url
        self.slot = slot
        self.slot_name = f"{instance_host()}|{slot.name}" if slot is not None else f"{instance_host()}|unslotted"
        self.pool = pool
        self.instance_id = new_instance_id()
        self._requests = trio.CapacityLimiter(pool_size)  # request work queues here ...
        self._settlements = trio.CapacityLimiter(pool_size)  # ... settlements here, never behind requests
        self._threads = trio.CapacityLimiter(2 * pool_size)  # both at once: no thread waits for a thread
        self._closed = False
        self._init_maintenance(url)

    @classmethod
    async def open(cls, url: str, *, pool_size: int = 10, data_dir: str | Path | None = None,
                   worker_index: int = 0) -> PostgresStore:
        """Migrate, open the pool and register this instance; ``StoreUnavailable`` if the
        database cannot be reached.

        ``data_dir``: where this instance claims its slot file (``instance_slot``): the
        previous life recorded there is certainly dead, so its holds are released at once
        rather than after ``DEAD_AFTER_S``. ``worker_index`` is the slot number tried first.
        Without a data dir (tests, tools) there is no previous life to release.
        """
        try:
            await trio.to_thread.run_sync(migrate, url)
        except psycopg.OperationalError as e:
            raise StoreUnavailable(f"PostgreSQL at {_where(url)} cannot be reached: {_first_line(e)}") from None
        slot = None
        if data_dir is not None:
            try:
                slot = claim_slot(data_dir, worker_index)
            except SlotsExhausted as e:
                raise StoreUnavailable(str(e)) from None
        pool = psycopg_pool.ConnectionPool(
            url, min_size=min(2, pool_size), max_size=pool_size, open=False, timeout=POOL_WAIT_S,
            kwargs={"row_factory": dict_row, "connect_timeout": 3, **keepalives(url)},
            configure=_configure,  # (and each connection lent is checked: _check_connection)
            reconnect_timeout=RECONNECT_WINDOW_S, name="gatewayd",
        )
        store = cls(url, pool, pool_size, slot)
        try:
            await trio.to_thread.run_sync(pool.open)
            await store._write(store._register)
            if slot is not None:
                if slot.previous is not None and slot.previous != store.instance_id:
                    await store._write(functools.partial(store._release_instance, slot.previous, 0.0, certain=True))
                slot.record(store.instance_id)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(pool.close)
            if slot is not None:
                slot.release()
            raise
        return store

    # -- primitives ---------------------------------------------------------------------

    def _run(self, job: Callable[[Tx], R], deadline: float, one_statement: bool,
             statement_timeout_ms: int | None) -> R:
        """``job`` on a pool connection, in a worker thread; everything by ``deadline`` (``time.monotonic``).

        The pool's connection check and the job (its commit included) run under the
        watchdog: past the deadline the socket is shut, which wakes this thread with an
        error, and the connection is closed, so the pool discards it instead of lending
        it again. ``statement_timeout_ms``: the job's own server-side bound, when longer
        than the connection's ``STATEMENT_TIMEOUT_S``."""
        while True:  # (psycopg_pool's own check loop can sleep past the caller's timeout: not used)
            conn = self.pool.getconn(timeout=max(deadline - time.monotonic(), 0.01))
            if _check_connection(conn, deadline):
                break
            self.pool.putconn(conn)  # closed: the pool replaces it
            if time.monotonic() >= deadline:
                raise psycopg_pool.PoolTimeout("no working connection before the deadline")
        armed = WATCHDOG.arm(conn, deadline)
        done = False
        try:
            if one_statement:
                # a job of one statement is its own transaction: no BEGIN and COMMIT round trips
                conn.autocommit = True
                result = job(PgTx(conn))
                conn.autocommit = False
            else:
                if statement_timeout_ms is not None:
                    conn.execute(f"SET LOCAL statement_timeout = {int(statement_timeout_ms)}")
                result = job(PgTx(conn))
                conn.commit()
            done = True
            return result
        except psycopg.OperationalError as e:
            raise _SentThenLost("no answer in time" if armed.fired.is_set() else _first_line(e)) from None
        finally:
            fired = WATCHDOG.disarm(armed)
            if not done and not fired and not conn.closed:
                if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
                    armed = WATCHDOG.arm(conn, time.monotonic() + ROLLBACK_S)
                    try:
                        conn.rollback()
                    except psycopg.Error:
                        pass
                    fired = WATCHDOG.disarm(armed)
            if fired or conn.info.transaction_status != TransactionStatus.IDLE:
                conn.close()  # shut, broken or stuck: the pool replaces it
            elif conn.autocommit:
                conn.autocommit = False
            self.pool.putconn(conn)

    async def _call(self, job: Callable[[Tx], R], queue: trio.CapacityLimiter, *, one_statement: bool = False,
                    deadline_s: float | None = None, cancellable: bool = True) -> R:
        """Run ``job`` on a pool connection, all of it (queue, pool, connection check, the
        statements) within ``deadline_s`` (``POOL_WAIT_S`` by default), or ``StoreUnavailable``.

        ``one_statement``: the job runs exactly one statement, in autocommit mode.
        ``cancellable``: the caller's cancellation abandons the call (its thread finishes by
        the deadline on its own; whether a write landed is then unknown), else only the
        deadline ends it. Past the deadline the call raises ``OutcomeUnknown``."""
        deadline_s = POOL_WAIT_S if deadline_s is None else deadline_s
        deadline = time.monotonic() + deadline_s
        trio_deadline = trio.current_time() + deadline_s
        statement_ms = None if one_statement or deadline_s <= STATEMENT_TIMEOUT_S else int(deadline_s * 1000)
        with trio.CancelScope(shield=not cancellable):
            queued = False
            with trio.move_on_at(trio_deadline):
                await queue.acquire()
                queued = True
            if not queued:
                raise StoreUnavailable(f"PostgreSQL: no connection free within {deadline_s:g} s")
            try:
                # the watchdog ends the thread's work at the deadline; this is the backstop
                # should the thread still not come back (it is then abandoned, never waited for)
                with trio.move_on_at(trio_deadline + ABANDON_GRACE_S):
                    return await trio.to_thread.run_sync(self._run, job, deadline, one_statement, statement_ms,
                                                         limiter=self._threads, abandon_on_cancel=True)
                raise OutcomeUnknown(f"PostgreSQL: no answer within {deadline_s:g} s")
            except _SentThenLost as e:
                raise OutcomeUnknown(f"PostgreSQL: {e}") from None
            except UNAVAILABLE as e:
                raise StoreUnavailable(f"PostgreSQL: {_first_line(e)}") from None
            finally:
                queue.release()
        raise AssertionError("unreachable: nothing cancels the shielding scope, so its block returned or raised")

    async def _write(self, job: Callable[[Tx], R], *, deadline_s: float = WRITE_DEADLINE_S) -> R:
        return await self._call(job, self._requests, deadline_s=deadline_s, cancellable=False)

    async def _read(self, job: Callable[[Tx], R], *, deadline_s: float = READ_DEADLINE_S) -> R:
        return await self._call(job, self._requests, deadline_s=deadline_s)

    async def _bounded_read(self, job: Callable[[Tx], R]) -> R:
        """(AdminSQL: an admin token's check) bounded like a request's store call."""
        return await self._read(job, deadline_s=POOL_WAIT_S)

    async def _bounded_write(self, job: Callable[[Tx], R]) -> R:
        """(AdminSQL: an admin call's audit row) bounded like a request's store call."""
        return await self._write(job, deadline_s=POOL_WAIT_S)

    async def ping(self) -> None:
        """One round trip (readiness), bounded like a request's."""
        await self._read(lambda tx: tx.one("SELECT 1 AS one"), deadline_s=POOL_WAIT_S)

    def _is_unique_violation(self, error: Exception) -> bool:
        return isinstance(error, psycopg.errors.UniqueViolation)

    def _lock_account_for_keys(self, tx: Tx, account_id: str) -> None:
        tx.one("SELECT id FROM accounts WHERE id = ? FOR UPDATE", (account_id,))

    async def flush(self) -> None:
        """Every write is committed before its call returns; settlements still waiting are tried now."""
        await self._retry_pending()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._retry_pending()
            await self._release_unknown_holds()
            await self._maint(lambda tx: tx.run("DELETE FROM instances WHERE id = ? AND NOT EXISTS"
                                                " (SELECT 1 FROM holds WHERE instance_id = ?)",
                                                (self.instance_id, self.instance_id)))
        except StoreUnavailable:
            pass  # the database is away: our row ages out and another instance cleans up after us
        finally:
            await trio.to_thread.run_sync(self.pool.close)
            await self._maintenance.aclose()
            if self.slot is not None:
                self.slot.release()  # after the last write: the next owner finds this life finished

    # -- directory ----------------------------------------------------------------------

    async def load_directory(self) -> tuple[list[Account], list[Key]]:
        def read(tx: Tx) -> tuple[list[Any], list[Any]]:
            accounts = [account_from_row(r, r["held_nano"])
                        for r in tx.rows(f"SELECT {ACCOUNT_COLUMNS}, held_nano FROM accounts")]
            keys = [key_from_row(r, r["held_nano"]) for r in tx.rows(
                f"SELECT {KEY_COLUMNS}, k.held_nano FROM keys k JOIN accounts a ON a.id = k.account_id")]
            return accounts, keys

        return await self._read(read)

    async def load_account(self, account_id: str) -> Account | None:
        row = await self._read(lambda tx: tx.one(
            f"SELECT {ACCOUNT_COLUMNS}, held_nano FROM accounts WHERE id = ?", (account_id,)))
        return None if row is None else account_from_row(row, row["held_nano"])

    async def load_key(self, key_id: str) -> Key | None:
        row = await self._read(lambda tx: tx.one(
            f"SELECT {KEY_COLUMNS}, k.held_nano FROM keys k JOIN accounts a ON a.id = k.account_id WHERE k.id = ?",
            (key_id,)))
        return None if row is None else key_from_row(row, row["held_nano"])

    async def refresh_balance(self, account: Account) -> Account:
        """Other instances move this account's money: read it from the database."""
        row = await self._read(lambda tx: tx.one(
            "SELECT credit_nano, held_nano, total_paid_nano FROM accounts WHERE id = ?", (account.id,)))
        if row is not None:
            account.credit_nano, account.held_nano = row["credit_nano"], row["held_nano"]
            account.total_paid_nano = row["total_paid_nano"]
        return account

    def _credit_payment(self, account: Account, amount_nano: int, stored: dict[str, Any]) -> None:
        # the database is the truth; set, not add: the change feed may have reloaded the
        # account (payment included) before this runs
        account.credit_nano, account.total_paid_nano = stored["credit_nano"], stored["total_paid_nano"]

    async def refresh_key(self, key: Key) -> Key:
        row = await self._read(lambda tx: tx.one(
            "SELECT spent_nano, held_nano, last_used_at, budget_period_start, budget_spent_nano FROM keys"
            " WHERE id = ?", (key.id,)))
        if row is not None:
            _refresh_key_money(key, row)
        return key

    async def refresh_keys(self, keys: list[Key]) -> list[Key]:
        """``refresh_key`` for many keys in one query (the console's key list)."""
        if not keys:
            return keys
        by_id = {key.id: key for key in keys}
        rows = await self._read(lambda tx: tx.rows(
            "SELECT id, spent_nano, held_nano, last_used_at, budget_period_start, budget_spent_nano FROM keys"
            " WHERE id = ANY(?)", (list(by_id),)))
        for row in rows:
            _refresh_key_money(by_id[row["id"]], row)
        return keys

    # -- holds and settlement -----------------------------------------------------------

    async def reserve(
        self, account: Account, key: Key, amount_nano: int, *, request_id: str, model: str, endpoint: str,
        stream: bool,
    ) -> Hold | Refusal:
        if self.fenced:
            raise Fenced(self.fenced_message())
        args = (request_id, account.id, key.id, model, endpoint, amount_nano, self.now_iso(), self.instance_id,
                instance_host(), os.getpid(), self.slot_name)
        try:
            row = await self._call(lambda tx: tx.one(HOLD, args), self._requests, one_statement=True)
        except (OutcomeUnknown, trio.Cancelled):
            # the commit may have happened: the caller answers 503 "nothing was charged" (or
            # has gone), so the hold (if it exists) is released as soon as the database answers
            self._unknown.setdefault(request_id, None)
            raise
        if self.fenced and row["refused"] is None:
            # the lease ran out while the hold was being taken: no upstream work starts on it
            self._unknown.setdefault(request_id, None)
            raise Fenced(self.fenced_message())
        if row["refused"] == "key":
            if row["key_spent"] is not None:
                # charges made through other instances do not notify: this cache learns the
                # key's spend here, so a key whose limit is used up reads as used-up (a 401)
                key.spent_nano, key.held_nano = row["key_spent"], row["key_held"]
                key.budget_period_start, key.budget_spent_nano = row["budget_start"], row["budget_spent"]
            return Refusal("key", row["refused_left"] or 0)
        if row["refused"] == "account":
            return Refusal("account", row["refused_left"] or 0)
        key.spent_nano, key.held_nano = row["key_spent"], row["key_held"]
        key.budget_period_start, key.budget_spent_nano = row["budget_start"], row["budget_spent"]
        account.credit_nano, account.held_nano, account.total_paid_nano = (
            row["credit"], row["account_held"], row["total_paid"])
        return Hold(request_id, account, key, amount_nano, model, endpoint, stream, time.monotonic())

    def _settle_job(self, hold: Hold, result: Settlement, duration_ms: int) -> Job:
        args = (hold.request_id, hold.account.id, hold.key.id, hold.model, hold.endpoint, self.now_iso(),
                int(hold.stream), result.status, result.http_status, result.input_tokens, result.output_tokens,
                result.cached_tokens, result.cache_write_tokens, result.cost_nano, duration_ms, hold.provider,
                hold.attempts, hold.amount_nano, result.breakdown_json(), hold.requested_model)
        return lambda tx: tx.one(SETTLE, args)

    async def settle(self, hold: Hold, result: Settlement) -> None:
        """Charge, release and record in one transaction, exactly once; retried while the database is away.

        Callers run this shielded from cancellation. The request waits up to
        ``SETTLE_WAIT_S``; after that the settlement goes on in the background (the hold
        stays held, so the audit stays right; bounded, see ``pg_instances``) and the request
        finishes.
        """
        if hold.settled:
            return
        hold.settled = True
        job = self._settle_job(hold, result, int((time.monotonic() - hold.started) * 1000))
        deadline = time.monotonic() + SETTLE_WAIT_S
        delay = 0.25
        while True:
            try:
                self._apply_settled(hold, await self._call(job, self._settlements, one_statement=True,
                                                           deadline_s=SETTLE_CALL_S, cancellable=False))
                return
            except StoreUnavailable as e:
                if time.monotonic() + delay > deadline:
                    log.error("settlement of %s waits for the database (%s); retrying in the background",
                              hold.request_id, e)
                    self._pending.append((hold, job, result.cost_nano, time.monotonic()))
                    return
                await trio.sleep(delay)
                delay = min(delay * 2, 4.0)

    @staticmethod
    def _apply_settled(hold: Hold, row: dict[str, Any]) -> None:
        if not row["settled"]:
            return  # an earlier attempt had settled it
        hold.key.spent_nano, hold.key.held_nano, hold.key.last_used_at = (
            row["key_spent"], row["key_held"], row["key_last_used"])
        hold.account.credit_nano, hold.account.held_nano = row["credit"], row["account_held"]

    # -- rate limits (the change feed: gatewayd.store.pg_feed) ----------------------------

    async def take_rate_slot(self, account_id: str, model_id: str, requests: int, window_s: float) -> float | None:
        """Admit and record one request of ``account_id`` on ``model_id`` (None), or the seconds
        until a slot frees: a sliding log in one row, under its row lock, by the database's clock."""

        def take(tx: Tx) -> float | None:
            tx.run("INSERT INTO rate_windows (account_id, model_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                   (account_id, model_id))
            row = tx.one("SELECT times, extract(epoch FROM clock_timestamp())::float8 AS now FROM rate_windows"
                         " WHERE account_id = ? AND model_id = ? FOR UPDATE", (account_id, model_id))
            now: float = row["now"]
            times: list[float] = [t for t in row["times"] if t > now - window_s]
            if len(times) >= requests:
                if len(times) != len(row["times"]):
                    tx.run("UPDATE rate_windows SET times = ? WHERE account_id = ? AND model_id = ?",
                           (times, account_id, model_id))
                return max(times[0] + window_s - now, 0.001)
            tx.run("UPDATE rate_windows SET times = ? WHERE account_id = ? AND model_id = ?",
                   (times + [now], account_id, model_id))
            return None

        return await self._write(take, deadline_s=POOL_WAIT_S)  # on a request's path: bounded like a hold

    # -- audit --------------------------------------------------------------------------

    async def audit(self, accounts: Iterable[Account] = (), keys: Iterable[Key] = ()) -> dict[str, Any]:
        """The invariant from the database alone, in one snapshot (right while traffic flows)."""

        def read(tx: Tx) -> dict[str, Any]:
            tx.run("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            sums = self._audit_sums(tx)
            stored = [AuditAccount(r["id"], r["email"], r["credit_nano"], r["total_paid_nano"], r["held_nano"])
                      for r in tx.rows("SELECT id, email, credit_nano, total_paid_nano, held_nano FROM accounts"
                                       " ORDER BY created_at, id")]
            stored_keys = [AuditKey(r["id"], r["spent_nano"], r["spend_limit_nano"], r["held_nano"],
                                    budget=audit_budget(r))
                           for r in tx.rows(f"SELECT id, spent_nano, spend_limit_nano, held_nano, {BUDGET_COLUMNS}"
                                            " FROM keys ORDER BY created_at, id")]
            return build_audit(sums, stored, stored_keys)

        return await self._read(read)


def _refresh_key_money(key: Key, row: dict[str, Any]) -> None:
    """The key's money as stored (other instances move it without notifying)."""
    key.spent_nano, key.held_nano, key.last_used_at = row["spent_nano"], row["held_nano"], row["last_used_at"]
    key.budget_period_start, key.budget_spent_nano = row["budget_period_start"], row["budget_spent_nano"]


def _check_connection(conn: psycopg.Connection, deadline: float) -> bool:
    """Whether a pooled connection answers an empty query, within ``CHECK_S`` and the call's
    deadline; one that does not is closed (a silent peer would block the thread for good)."""
    armed = WATCHDOG.arm(conn, min(deadline, time.monotonic() + CHECK_S))
    try:
        psycopg_pool.ConnectionPool.check_connection(conn)
        ok = True
    except psycopg.Error:
        ok = False
    if WATCHDOG.disarm(armed) or not ok:
        conn.close()
        return False
    return True


def _configure(conn: psycopg.Connection) -> None:
    """A new pool connection's server-side bounds (SET, not startup options: PgBouncer refuses those)."""
    armed = WATCHDOG.arm(conn, time.monotonic() + CHECK_S * 3)
    try:
        conn.execute(f"SET statement_timeout = {int(STATEMENT_TIMEOUT_S * 1000)}")
        conn.execute(f"SET idle_in_transaction_session_timeout = {int(IDLE_IN_TRANSACTION_S * 1000)}")
        conn.commit()
    finally:
        if WATCHDOG.disarm(armed):
            conn.close()


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _where(url: str) -> str:
    """host:port/db of a URL, never its password."""
    return url.rsplit("@", 1)[-1].split("://", 1)[-1].split("?", 1)[0]


if TYPE_CHECKING:  # mypy holds this store to the whole contract (gatewayd.store.contract)
    from gatewayd.store.contract import Store

    _keeps_the_contract: type[Store] = PostgresStore
