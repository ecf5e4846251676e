"""The SQLite store's I/O: batched commits in the event loop, readers in worker threads.

See ``gatewayd.store.sqlite`` for why writes are batched in the event loop.
"""

from __future__ import annotations

import sqlite3
import threading
import zoneinfo
from typing import Any, Callable

import trio

from gatewayd.budgets import period_start

Job = Callable[[sqlite3.Connection], Any]


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=30000")
    conn.row_factory = sqlite3.Row
    # the usage triggers' period arithmetic (migrations/0008_key_budgets.sql): zones need zoneinfo
    conn.create_function("gatewayd_period_start", 3, sql_period_start, deterministic=True)
    return conn


def sql_period_start(at: str, period: str | None, zone: str | None) -> str | None:
    """``gatewayd.budgets.period_start`` for SQL (NULL without a period; an unknown zone is UTC:
    a trigger must not fail the settlement that fires it)."""
    if period is None or at is None:
        return None
    try:
        return period_start(at, period, zone or "UTC")
    except (ValueError, KeyError, zoneinfo.ZoneInfoNotFoundError):
        return period_start(at, period, "UTC")


class _Pending:
    __slots__ = ("job", "event", "result", "error")

    def __init__(self, job: Job, event: trio.Event | None) -> None:
        self.job = job
        self.event = event
        self.result: Any = None
        self.error: BaseException | None = None


CHECKPOINT_INTERVAL_S = 1.0


class BatchWriter:
    """The writing connection (batched, in the event loop) and a read connection per worker thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn = connect(path)
        self._conn.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run in _checkpoint_loop
        self._lock = threading.Lock()  # the writing connection is used by one batch at a time
        self._pending: list[_Pending] = []
        self._committing = False
        self._local = threading.local()
        self._read_limiter = trio.CapacityLimiter(4)
        self._closed = False
        self._stop = threading.Event()
        self._checkpointer = threading.Thread(target=self._checkpoint_loop, name="gatewayd-sqlite-checkpoint",
                                              daemon=True)
        self._checkpointer.start()

    # -- writing -----------------------------------------------------------------

    async def write(self, job: Job) -> Any:
        """Run ``job(conn)`` in this tick's batch and wait for its commit."""
        committed = trio.Event()
        pending = _Pending(job, committed)
        self._pending.append(pending)
        if not self._committing:
            self._committing = True
            try:
                # shielded: a cancelled first writer must still commit what the others queued
                with trio.CancelScope(shield=True):
                    await trio.sleep(0)
                    while self._pending:
                        batch, self._pending = self._pending, []
                        self._run_batch(batch)
            finally:
                self._committing = False
        else:
            await committed.wait()
        if pending.error is not None:
            raise pending.error
        return pending.result

    def write_nowait(self, job: Job) -> None:
        """Commit ``job`` now, in its own transaction, without yielding (hold rows)."""
        self._run_batch([_Pending(job, None)])

    def write_blocking(self, job: Job) -> Any:
        """Outside the event loop (start-up recovery, tests): run, commit, return."""
        pending = _Pending(job, None)
        self._run_batch([pending])
        if pending.error is not None:
            raise pending.error
        return pending.result

    def _run_batch(self, batch: list[_Pending]) -> None:
        with self._lock:
            conn = self._conn
            single = len(batch) == 1
            try:
                conn.execute("BEGIN IMMEDIATE")
                for item in batch:
                    if single:  # no batch-mates to protect: the transaction is the job's scope
                        try:
                            item.result = item.job(conn)
                        except Exception as e:  # noqa: BLE001 - reported to the waiting task
                            item.error = e
                            conn.execute("ROLLBACK")
                            break
                        continue
                    conn.execute("SAVEPOINT job")
                    try:
                        item.result = item.job(conn)
                        conn.execute("RELEASE job")
                    except Exception as e:  # noqa: BLE001 - reported to the waiting task
                        item.error = e
                        conn.execute("ROLLBACK TO job")
                        conn.execute("RELEASE job")
                if conn.in_transaction:
                    conn.execute("COMMIT")
            except Exception as e:  # noqa: BLE001 - the commit itself failed: fail everyone
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                for item in batch:
                    item.error = item.error or e
        for item in batch:
            if item.event is not None:
                item.event.set()

    def _checkpoint_loop(self) -> None:
        conn = connect(self.path)
        try:
            while not self._stop.wait(CHECKPOINT_INTERVAL_S):
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error:
                    pass  # busy or locked: the next round tries again
        finally:
            conn.close()

    # -- reading -----------------------------------------------------------------

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            conn.execute("PRAGMA query_only=ON")
            self._local.conn = conn
        return conn

    async def read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn(conn)`` on a read connection in a worker thread (WAL: never blocks the writer)."""
        return await trio.to_thread.run_sync(lambda: fn(self._reader()), limiter=self._read_limiter)

    def read_blocking(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        return fn(self._reader())

    async def flush(self) -> None:
        """Wait until everything queued so far is committed."""
        await self.write(lambda conn: None)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._stop.set()
            self._checkpointer.join(timeout=10)
            with self._lock:
                try:
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.Error:
                    pass
                self._conn.close()
