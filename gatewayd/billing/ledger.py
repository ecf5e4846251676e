"""Holds and settlement: the only code that moves an account's money for a request.

Trio runs one task at a time, so a check-and-hold with no ``await`` in between is
atomic: concurrent requests can never together hold more than the balance (or a key's
remaining limit). Memory changes first, synchronously; the rows follow through the
store's batched writer. Settlement waits for its commit, so the usage row is durable
before the client gets the last byte.

Hold rows exist only so that a restart after a crash can release and record the
requests that were in flight. They are written lazily: ``persist_holds`` flushes the
holds that have lived longer than ``HOLD_FLUSH_INTERVAL_S`` in one batch, and a request
that settles before that (most non-streaming requests) never writes or deletes a hold
row at all. Losing an unflushed hold in a crash loses nothing: balances are stored net
of charges only, so an unrecorded hold is simply released.
"""

from __future__ import annotations

import sqlite3
import time

import trio

import attrs

from gatewayd.errors import GatewayError
from gatewayd.formats.usage import Usage
from gatewayd.money import format_usd
from gatewayd.records import Account, Key, utc_now_iso
from gatewayd.store.sqlite import SQLiteStore


@attrs.define(eq=False)
class Hold:
    request_id: str
    account: Account
    key: Key
    amount_nano: int
    model: str
    endpoint: str
    stream: bool
    started: float
    settled: bool = False


def key_quota_refusal(key: Key, amount_nano: int) -> GatewayError | None:
    if key.spend_limit_nano is None:
        return None
    remaining = key.spend_limit_nano - key.spent_nano - key.held_nano
    if remaining >= amount_nano:
        return None
    return GatewayError(
        403,
        f"token quota is not enough, token remain quota: {format_usd(max(remaining, 0))}, "
        f"need quota: {format_usd(amount_nano)}",
        "pre_consume_token_quota_failed",
    )


def account_refusal(account: Account, amount_nano: int) -> GatewayError | None:
    if account.balance_nano >= amount_nano:
        return None
    return GatewayError(
        403,
        f"user quota is not enough: this request needs {format_usd(amount_nano)} held up front, "
        f"the balance available is {format_usd(account.balance_nano)}",
        "insufficient_user_quota",
    )


HOLD_FLUSH_INTERVAL_S = 0.2


class Ledger:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self._unflushed: dict[str, tuple] = {}  # request_id -> hold row not yet queued for the database
        self.open_holds = 0  # holds in flight and what they hold (for the metrics)
        self.held_nano = 0

    async def persist_holds(self, interval_s: float = HOLD_FLUSH_INTERVAL_S) -> None:
        """Forever: queue the rows of holds still open after ``interval_s`` (one job a round)."""
        while True:
            await trio.sleep(interval_s)
            self.flush_holds()

    def flush_holds(self) -> None:
        if not self._unflushed:
            return
        rows = list(self._unflushed.values())
        self._unflushed.clear()
        self.store.write_nowait(
            lambda conn: conn.executemany(
                "INSERT INTO holds (request_id, account_id, key_id, model, endpoint, amount_nano, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
        )

    def reserve(
        self, account: Account, key: Key, amount_nano: int, *, request_id: str, model: str, endpoint: str,
        stream: bool,
    ) -> Hold:
        """Hold ``amount_nano`` on the key and the account, or raise the spec's 403."""
        refusal = key_quota_refusal(key, amount_nano) or account_refusal(account, amount_nano)
        if refusal is not None:
            raise refusal
        account.held_nano += amount_nano
        key.held_nano += amount_nano
        self.open_holds += 1
        self.held_nano += amount_nano
        hold = Hold(request_id, account, key, amount_nano, model, endpoint, stream, time.monotonic())
        self._unflushed[request_id] = (request_id, account.id, key.id, model, endpoint, amount_nano, utc_now_iso())
        return hold

    async def settle(self, hold: Hold, usage: Usage, cost_nano: int, *, status: str, http_status: int) -> None:
        """Charge ``cost_nano``, release the hold and write the usage row, exactly once.

        Callers run this shielded from cancellation: a client that went away still pays
        for what was produced.
        """
        if hold.settled:
            return
        hold.settled = True
        self.open_holds -= 1
        self.held_nano -= hold.amount_nano
        hold_row_queued = self._unflushed.pop(hold.request_id, None) is None
        account, key = hold.account, hold.key
        now = utc_now_iso()
        account.held_nano -= hold.amount_nano
        account.credit_nano -= cost_nano
        key.held_nano -= hold.amount_nano
        key.spent_nano += cost_nano
        key.last_used_at = now
        duration_ms = int((time.monotonic() - hold.started) * 1000)
        row = (
            hold.request_id, now, account.id, key.id, hold.model, hold.endpoint, int(hold.stream), status,
            http_status, usage.input_tokens, usage.output_tokens, usage.cached_tokens, usage.cache_write_tokens,
            cost_nano, duration_ms,
        )

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO usage (request_id, created_at, account_id, key_id, model, endpoint, stream, status,"
                " http_status, input_tokens, output_tokens, cached_tokens, cache_write_tokens, cost_nano,"
                " duration_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            if cost_nano:
                conn.execute("UPDATE accounts SET credit_nano = credit_nano - ? WHERE id = ?", (cost_nano, account.id))
            conn.execute(
                "UPDATE keys SET spent_nano = spent_nano + ?, last_used_at = ? WHERE id = ?",
                (cost_nano, now, key.id),
            )
            if hold_row_queued:  # queued earlier, so the writer (FIFO) inserted it before this job
                conn.execute("DELETE FROM holds WHERE request_id = ?", (hold.request_id,))

        await self.store.write(write)
