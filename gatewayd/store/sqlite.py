"""The embedded SQLite store: one process, batched commits in the event loop, readers in threads.

One process only: opening takes an exclusive lock beside the database file, so a second
gatewayd on the same file stops at start-up with one clear line (several instances need
PostgreSQL). That is what makes the in-process holds exact: trio runs one task at a
time, so a check-and-hold with no ``await`` in between is atomic, and no other process
can move the money. ``reserve`` therefore never waits; the hold rows follow lazily.

Why batching: every settled request writes a usage row and moves money, and awaits the
commit (the usage row is durable before the response's last byte is sent). The first
writer in a loop tick yields once, so every task with something to write that tick
joins it, then commits them all in one transaction; each job runs under its own
SAVEPOINT so one bad job cannot undo its batch-mates.

Why in the event loop and not in a writer thread: with WAL and synchronous=NORMAL a
commit is a write() to the log, tens of microseconds of CPU, while handing each job to
a thread and waking the loop back up cost more than the commit itself (measured: the
thread was ~15% of the hot path's CPU). What could block the loop for milliseconds is a
WAL checkpoint, so automatic checkpoints are off for the writing connection and a small
background thread runs PASSIVE checkpoints (which never block writers) once a second.

Hold rows exist only so that a restart after a crash can release and record the
requests that were in flight. ``maintain`` writes the holds that have lived longer than
``HOLD_FLUSH_INTERVAL_S`` in one batch, and a request that settles before that (most
non-streaming requests) never writes or deletes a hold row. Losing an unflushed hold in
a crash loses nothing: balances are stored net of charges only.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import time
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable

import trio

from gatewayd.local_files import check_database_files, open_nofollow
from gatewayd.records import Account, Key, utc_now_iso
from gatewayd.budgets import period_start
from gatewayd.store.audit import BUDGET_COLUMNS, AuditAccount, AuditKey, audit_budget, build_audit
from gatewayd.store.base import (
    Change,
    Hold,
    Refusal,
    Settlement,
    StoreError,
    StoreUnavailable,
    check_schema_known,
    log_migration,
)
from gatewayd.store.sql import (
    ACCOUNT_COLUMNS,
    KEY_COLUMNS,
    SQLStore,
    R,
    Tx,
    account_from_row,
    key_from_row,
    new_instance_id,
    process_identity,
)
from gatewayd.store.sqlite_batch import BatchWriter, connect

HOLD_FLUSH_INTERVAL_S = 0.2
HEARTBEAT_INTERVAL_S = 5.0


def migrate(conn: sqlite3.Connection, folder: Traversable | None = None) -> int:
    """Apply every ``migrations/NNNN_*.sql`` not yet recorded, in order; returns the highest version.

    Each applied version has its own row, and a file is applied when *its* number is
    missing, not when it is above the highest: branches developed side by side add
    migrations whose numbers interleave (a 0004 merged after a 0005 was applied), and
    each still runs once."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    applied = {row[0] for row in conn.execute("SELECT version FROM schema_version")}
    folder = folder if folder is not None else resources.files("gatewayd.store").joinpath("migrations")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    check_schema_known("SQLite", applied, {int(f.name.split("_", 1)[0]) for f in files})
    current = max(applied, default=0)
    for f in files:
        version = int(f.name.split("_", 1)[0])
        if version in applied:
            continue
        began = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in statements(f.read_text()):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        log_migration("sqlite", current, version, time.perf_counter() - began)
        applied.add(version)
        current = max(current, version)
    return current


def statements(script: str) -> list[str]:
    """Split a migration into statements (executescript would commit behind our back); a
    trigger's body (``BEGIN ... END;``) stays whole: sqlite3 says when a statement is complete."""
    out, buf = [], []
    for line in script.splitlines():
        stripped = line.split("--", 1)[0]
        buf.append(stripped)
        if stripped.rstrip().endswith(";") and sqlite3.complete_statement("\n".join(buf)):
            statement = "\n".join(buf).strip()
            if statement.strip(";").strip():
                out.append(statement)
            buf = []
    tail = "\n".join(buf).strip()
    if tail:
        out.append(tail)
    return out


class SQLiteTx:
    """The shared jobs' cursor surface over one sqlite3 connection."""

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def rows(self, sql: str, args: Any = ()) -> list[Any]:
        return self.conn.execute(sql, args).fetchall()

    def one(self, sql: str, args: Any = ()) -> Any:
        return self.conn.execute(sql, args).fetchone()

    def run(self, sql: str, args: Any = ()) -> int:
        return self.conn.execute(sql, args).rowcount


def _roll_budget(key: Key, now: str, zone: str) -> None:
    """Bring the cached key's budget count to the period holding ``now``: a new period starts at 0
    (every usage row is written by this process, dated by its clock, so none is dated in it yet)."""
    start = period_start(now, key.budget_period or "day", zone)
    if key.budget_period_start is None or key.budget_period_start < start:
        key.budget_period_start, key.budget_spent_nano = start, 0


class DatabaseInUse(StoreError):
    """Another process has this SQLite database open."""


def _lock_exclusively(path: str) -> int:
    lock_path = path + ".instance-lock"
    fd = open_nofollow(lock_path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DatabaseInUse(
            f"{path} is in use by another gatewayd process; an SQLite database serves one instance "
            "(run several instances on PostgreSQL: [database] url = \"postgresql://...\")"
        ) from None
    return fd


class SQLiteStore(SQLStore):
    """Owns the database file: the batched writer, and a read connection per worker thread."""

    kind = "sqlite"

    def __init__(self, path: str) -> None:
        self.path = path
        Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # SQLite opens by name: no link where its files go, readable by this user only (gatewayd.local_files)
        for note in check_database_files(path):
            logging.getLogger("gatewayd").warning("gatewayd: %s", note)
        self._lock_fd = _lock_exclusively(path)
        setup = connect(path)
        try:
            migrate(setup)
        finally:
            setup.close()
        self.writer = BatchWriter(path)
        self.instance_id = new_instance_id()
        self._unflushed: dict[str, tuple[Any, ...]] = {}  # request_id -> hold row not yet queued for the database
        self._closed = False
        host, pid = process_identity()
        now = time.time()
        self.writer.write_blocking(lambda conn: conn.execute(
            "INSERT INTO instances (id, host, pid, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?)",
            (self.instance_id, host, pid, utc_now_iso(), now)))

    # -- primitives ---------------------------------------------------------------------

    async def write(self, job: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``job(conn)`` (a raw sqlite3 job) in this tick's batch and wait for its commit."""
        return await self.writer.write(job)

    async def _write(self, job: Callable[[Tx], R]) -> R:
        result: R = await self.writer.write(lambda conn: job(SQLiteTx(conn)))
        return result

    async def _read(self, job: Callable[[Tx], R]) -> R:
        result: R = await self.writer.read(lambda conn: job(SQLiteTx(conn)))
        return result

    def read_blocking(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        return self.writer.read_blocking(fn)

    def _is_unique_violation(self, error: Exception) -> bool:
        return isinstance(error, sqlite3.IntegrityError) and "UNIQUE" in str(error)

    async def flush(self) -> None:
        """Wait until every hold and write queued so far is committed."""
        self.flush_holds()
        await self.writer.write(lambda conn: None)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.flush_holds()
        try:
            self.writer.write_blocking(lambda conn: conn.execute("DELETE FROM instances WHERE id = ?",
                                                                 (self.instance_id,)))
        finally:
            self.writer.close()
            os.close(self._lock_fd)

    # -- directory ----------------------------------------------------------------------

    async def load_directory(self) -> tuple[list[Account], list[Key]]:
        def read(tx: Tx) -> tuple[list[Any], list[Any]]:
            accounts = [account_from_row(r) for r in tx.rows(f"SELECT {ACCOUNT_COLUMNS} FROM accounts")]
            keys = [key_from_row(r) for r in tx.rows(
                f"SELECT {KEY_COLUMNS} FROM keys k JOIN accounts a ON a.id = k.account_id")]
            return accounts, keys

        return await self._read(read)

    async def load_account(self, account_id: str) -> Account | None:
        row = await self._read(lambda tx: tx.one(f"SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE id = ?",
                                                 (account_id,)))
        return None if row is None else account_from_row(row)

    async def load_key(self, key_id: str) -> Key | None:
        row = await self._read(lambda tx: tx.one(
            f"SELECT {KEY_COLUMNS} FROM keys k JOIN accounts a ON a.id = k.account_id WHERE k.id = ?", (key_id,)))
        return None if row is None else key_from_row(row)

    async def refresh_balance(self, account: Account) -> Account:
        """This process is the only one moving money: the cached object is the truth."""
        return account

    def _credit_payment(self, account: Account, amount_nano: int, stored: dict[str, Any]) -> None:
        # the cached object is the truth (charges reach the file later, in the writer's queue)
        account.credit_nano += amount_nano
        account.total_paid_nano += amount_nano

    async def refresh_key(self, key: Key) -> Key:
        return key

    async def refresh_keys(self, keys: list[Key]) -> list[Key]:
        return keys

    # -- holds and settlement -----------------------------------------------------------

    async def reserve(
        self, account: Account, key: Key, amount_nano: int, *, request_id: str, model: str, endpoint: str,
        stream: bool,
    ) -> Hold | Refusal:
        """Check and hold with no ``await`` in between: atomic in this (the only) process."""
        now = self.now_iso()
        if key.spend_limit_nano is not None:
            remaining = key.spend_limit_nano - key.spent_nano - key.held_nano
            if remaining < amount_nano:
                return Refusal("key", remaining)
        if key.budget_nano is not None and key.budget_period is not None:
            _roll_budget(key, now, account.timezone)
            remaining = key.budget_nano - key.budget_spent_nano - key.held_nano
            if key.spend_limit_nano is not None:
                remaining = min(remaining, key.spend_limit_nano - key.spent_nano - key.held_nano)
            if remaining < amount_nano:
                return Refusal("key", remaining)
        if account.balance_nano < amount_nano:
            return Refusal("account", account.balance_nano)
        account.held_nano += amount_nano
        key.held_nano += amount_nano
        self._unflushed[request_id] = (request_id, account.id, key.id, model, endpoint, amount_nano, now,
                                       self.instance_id)
        return Hold(request_id, account, key, amount_nano, model, endpoint, stream, time.monotonic())

    def flush_holds(self) -> None:
        """Queue the rows of the holds still open (one job); they commit with the next batch."""
        if not self._unflushed:
            return
        rows = list(self._unflushed.values())
        self._unflushed.clear()
        self.writer.write_nowait(lambda conn: conn.executemany(
            "INSERT INTO holds (request_id, account_id, key_id, model, endpoint, amount_nano, created_at,"
            " instance_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows))

    async def settle(self, hold: Hold, result: Settlement) -> None:
        """Charge, release the hold and write the usage row, exactly once, in one transaction.

        Callers run this shielded from cancellation: a client that went away still pays
        for what was produced.
        """
        if hold.settled:
            return
        hold.settled = True
        hold_row_queued = self._unflushed.pop(hold.request_id, None) is None
        account, key, cost = hold.account, hold.key, result.cost_nano
        now = self.now_iso()
        account.held_nano -= hold.amount_nano
        account.credit_nano -= cost
        key.held_nano -= hold.amount_nano
        key.spent_nano += cost
        if key.budget_period is not None:  # the usage row's trigger counts it in the file, this in memory
            _roll_budget(key, now, account.timezone)
            key.budget_spent_nano += cost
        key.last_used_at = now
        row = (
            hold.request_id, now, account.id, key.id, hold.model, hold.endpoint, int(hold.stream), result.status,
            result.http_status, result.input_tokens, result.output_tokens, result.cached_tokens,
            result.cache_write_tokens, cost, int((time.monotonic() - hold.started) * 1000), hold.provider,
            hold.attempts, hold.amount_nano, result.breakdown_json(), hold.requested_model,
        )

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO usage (request_id, created_at, account_id, key_id, model, endpoint, stream, status,"
                " http_status, input_tokens, output_tokens, cached_tokens, cache_write_tokens, cost_nano,"
                " duration_ms, provider, attempts, hold_nano, breakdown, requested_model)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            if cost:
                conn.execute("UPDATE accounts SET credit_nano = credit_nano - ? WHERE id = ?", (cost, account.id))
            conn.execute("UPDATE keys SET spent_nano = spent_nano + ?, last_used_at = ? WHERE id = ?",
                         (cost, now, key.id))
            if hold_row_queued:  # queued earlier, so the writer (FIFO) inserted it before this job
                conn.execute("DELETE FROM holds WHERE request_id = ?", (hold.request_id,))

        try:
            await self.writer.write(write)
        except sqlite3.OperationalError as e:  # disk full, an I/O error: the database cannot take it
            raise StoreUnavailable(f"SQLite: {e}") from None

    # -- instances ----------------------------------------------------------------------

    async def heartbeat(self) -> None:
        await self.writer.write(lambda conn: conn.execute(
            "UPDATE instances SET heartbeat_at = ? WHERE id = ?", (time.time(), self.instance_id)))

    async def release_dead_holds(self) -> int:
        """Every other instance is dead: this process holds the database's exclusive lock."""

        def job(conn: sqlite3.Connection) -> int:
            rows = conn.execute("SELECT * FROM holds WHERE instance_id IS NULL OR instance_id != ?",
                                (self.instance_id,)).fetchall()
            now = utc_now_iso()
            for row in rows:
                conn.execute(
                    "INSERT INTO usage (request_id, created_at, account_id, key_id, model, endpoint, stream, status,"
                    " http_status, cost_nano, hold_nano) VALUES (?, ?, ?, ?, ?, ?, 0, 'interrupted', 0, 0, ?)",
                    (row["request_id"], now, row["account_id"], row["key_id"], row["model"], row["endpoint"],
                     row["amount_nano"]),
                )
                conn.execute("DELETE FROM holds WHERE request_id = ?", (row["request_id"],))
            conn.execute("DELETE FROM instances WHERE id != ?", (self.instance_id,))
            return len(rows)

        released: int = await self.writer.write(job)
        return released

    async def maintain(self) -> None:
        """Forever: write the rows of holds open longer than ``HOLD_FLUSH_INTERVAL_S``; heartbeat."""
        last_beat = time.monotonic()
        while True:
            await trio.sleep(HOLD_FLUSH_INTERVAL_S)
            self.flush_holds()
            if time.monotonic() - last_beat >= HEARTBEAT_INTERVAL_S:
                last_beat = time.monotonic()
                await self.heartbeat()

    async def follow_changes(self, apply: Callable[[Change], Awaitable[None]], *,
                             task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Changes made by other instances: none, since one process serves the file and every
        change is made (and applied to its cache) in it. Returns only when cancelled."""
        task_status.started()
        await trio.sleep_forever()

    # -- audit --------------------------------------------------------------------------

    async def audit(self, accounts: Iterable[Account], keys: Iterable[Key]) -> dict[str, Any]:
        """Stored ledger vs payments/usage rows, and this process's memory (the holds) vs the rows."""
        await self.flush()
        cached_accounts = {a.id: a for a in accounts}
        cached_keys = {k.id: k for k in keys}

        def read(tx: Tx) -> dict[str, Any]:
            sums = self._audit_sums(tx)
            stored = []
            for r in tx.rows("SELECT id, email, credit_nano, total_paid_nano FROM accounts ORDER BY created_at"):
                cached = cached_accounts.get(r["id"])
                stored.append(AuditAccount(r["id"], r["email"], r["credit_nano"], r["total_paid_nano"],
                                           cached.held_nano if cached else 0,
                                           cached.credit_nano if cached else None))
            stored_keys = []
            for r in tx.rows(f"SELECT id, spent_nano, spend_limit_nano, {BUDGET_COLUMNS} FROM keys"
                             " ORDER BY created_at"):
                cached_key = cached_keys.get(r["id"])
                stored_keys.append(AuditKey(r["id"], r["spent_nano"], r["spend_limit_nano"],
                                            cached_key.held_nano if cached_key else 0,
                                            cached_key.spent_nano if cached_key else None, budget=audit_budget(r)))
            return build_audit(sums, stored, stored_keys)

        return await self._read(read)


if TYPE_CHECKING:  # mypy holds this store to the whole contract (gatewayd.store.contract)
    from gatewayd.store.contract import Store

    _keeps_the_contract: type[Store] = SQLiteStore
