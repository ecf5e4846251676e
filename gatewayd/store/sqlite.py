"""The embedded SQLite store: one writer thread committing in batches, readers in threads.

Why a writer thread: every settled request writes a usage row and moves money. A
``to_thread`` call per write tops out near 11k writes/s here; one thread that drains a
queue and commits whatever has piled up in a single transaction reaches ~100k/s, and a
request still awaits the commit of *its* rows (the usage row is durable before the
response's last byte is sent). Each job runs under its own SAVEPOINT so one bad job
cannot undo its batch-mates.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import trio

Job = Callable[[sqlite3.Connection], Any]

_MAX_BATCH = 512


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=30000")
    conn.row_factory = sqlite3.Row
    return conn


def migrate(conn: sqlite3.Connection) -> int:
    """Apply ``migrations/NNNN_*.sql`` newer than the recorded version; returns the version."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    current = row[0] or 0
    files = sorted(
        (f for f in resources.files("gatewayd.store").joinpath("migrations").iterdir() if f.name.endswith(".sql")),
        key=lambda f: f.name,
    )
    for f in files:
        version = int(f.name.split("_", 1)[0])
        if version <= current:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(f.read_text()):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        current = version
    return current


def _statements(script: str) -> list[str]:
    """Split a migration into statements (executescript would commit behind our back)."""
    out, buf = [], []
    for line in script.splitlines():
        stripped = line.split("--", 1)[0]
        buf.append(stripped)
        if stripped.rstrip().endswith(";"):
            statement = "\n".join(buf).strip()
            if statement.strip(";").strip():
                out.append(statement)
            buf = []
    tail = "\n".join(buf).strip()
    if tail:
        out.append(tail)
    return out


class _Pending:
    __slots__ = ("job", "token", "event", "result", "error")

    def __init__(self, job: Job, token: trio.lowlevel.TrioToken | None, event: trio.Event | None) -> None:
        self.job = job
        self.token = token
        self.event = event
        self.result: Any = None
        self.error: BaseException | None = None


class SQLiteStore:
    """Owns the database file: the writer thread, and a read connection per worker thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        setup = _connect(path)
        try:
            migrate(setup)
        finally:
            setup.close()
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._local = threading.local()
        self._read_limiter = trio.CapacityLimiter(4)
        self._writer = threading.Thread(target=self._write_loop, name="gatewayd-sqlite-writer", daemon=True)
        self._writer.start()
        self._closed = False

    # -- writing -----------------------------------------------------------------

    async def write(self, job: Job) -> Any:
        """Run ``job(conn)`` in the next batch and wait for its commit."""
        pending = _Pending(job, trio.lowlevel.current_trio_token(), trio.Event())
        self._queue.put(pending)
        await pending.event.wait()
        if pending.error is not None:
            raise pending.error
        return pending.result

    def write_nowait(self, job: Job) -> None:
        """Queue ``job`` for the next batch without waiting (holds: losing one on a crash is safe)."""
        self._queue.put(_Pending(job, None, None))

    def write_blocking(self, job: Job) -> Any:
        """From a plain thread (start-up recovery, tests): run and wait."""
        done = threading.Event()
        box: dict[str, Any] = {}

        def wrapped(conn: sqlite3.Connection) -> Any:
            try:
                box["result"] = job(conn)
            finally:
                done.set()
            return box.get("result")

        self._queue.put(_Pending(wrapped, None, None))
        done.wait()
        return box.get("result")

    def _write_loop(self) -> None:
        conn = _connect(self.path)
        while True:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            stop = False
            while len(batch) < _MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            self._run_batch(conn, batch)
            if stop:
                break
        conn.close()

    @staticmethod
    def _run_batch(conn: sqlite3.Connection, batch: list[_Pending]) -> None:
        try:
            conn.execute("BEGIN IMMEDIATE")
            for item in batch:
                conn.execute("SAVEPOINT job")
                try:
                    item.result = item.job(conn)
                    conn.execute("RELEASE job")
                except Exception as e:  # noqa: BLE001 - reported to the waiting task
                    item.error = e
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
            conn.execute("COMMIT")
        except Exception as e:  # noqa: BLE001 - the commit itself failed: fail everyone
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            for item in batch:
                item.error = item.error or e
        for item in batch:
            if item.event is not None and item.token is not None:
                try:
                    item.token.run_sync_soon(item.event.set)
                except trio.RunFinishedError:
                    pass

    # -- reading -----------------------------------------------------------------

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = _connect(self.path)
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
            self._queue.put(None)
            self._writer.join(timeout=10)
