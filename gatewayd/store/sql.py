"""The SQL both stores share: one statement per operation, written once with ``?`` markers.

``SQLStore`` implements every contract method whose SQL is the same in SQLite and
PostgreSQL on top of two primitives a store provides: ``_write(job)`` runs
``job(tx)`` in one committed transaction, ``_read(job)`` runs it on a read
connection. A ``Tx`` is the small cursor surface the jobs use (``rows``, ``one``,
``run``); the PostgreSQL ``Tx`` turns ``?`` into ``%s``. The money coming in (payments
and redemption codes) is a mixin of its own, ``PaymentsSQL`` (``gatewayd.store.payments_sql``),
on the same primitives. The money path (reserve, settle, hold recovery) and the audit's
view of open holds differ and live in each store.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
from typing import Any, Callable, Iterable, Protocol, TypeVar

import orjson

from gatewayd.records import Account, Key, expiry_instant, new_id, utc_now_iso
from gatewayd.store import alert_outbox
from gatewayd.store.alert_outbox import OutboxRow
from gatewayd.store.audit import NAMED_AT_MOST, over_hold_condition
from gatewayd.store.admin_sql import AdminSQL
from gatewayd.store.payments_sql import PaymentsSQL
from gatewayd.store.signin_attempts import Decide
from gatewayd.store.usage_queries import UsageFilter
from gatewayd.store.base import (
    USAGE_FIELDS,
    EmailTaken,
    KeyRevoked,
    TooManyKeys,
    UsagePage,
    UsageQuery,
    UsageRow,
)

USAGE_COLUMNS = ", ".join(USAGE_FIELDS)

ACCOUNT_COLUMNS = (
    "id, email, name, timezone, password_hash, credit_nano, total_paid_nano, groups, embedding_models, created_at,"
    " max_concurrent, alert_below_nano"
)
KEY_COLUMNS = (
    "k.id, k.account_id, k.name, k.secret_hash, k.secret_hint, k.status, k.spend_limit_nano, k.spent_nano,"
    " k.expires_on, k.models, k.allow_ips, k.group_name, k.created_at, k.last_used_at, a.timezone, k.max_concurrent,"
    " k.budget_nano, k.budget_period, k.budget_period_start, k.budget_spent_nano, k.mcp"
)

# A key's budget period counted afresh from its usage rows (``gatewayd_period_start`` is an SQL
# function in both stores: migrations 0008 / postgres 0010); NULLs when the key has no budget
RECOUNT_BUDGET = (
    "UPDATE keys SET"
    " budget_period_start = CASE WHEN budget_period IS NULL THEN NULL ELSE gatewayd_period_start(CAST(? AS TEXT),"
    " budget_period, (SELECT timezone FROM accounts WHERE id = keys.account_id)) END,"
    " budget_spent_nano = CASE WHEN budget_period IS NULL THEN 0 ELSE (SELECT coalesce(sum(cost_nano), 0)"
    " FROM usage WHERE key_id = keys.id AND created_at >= gatewayd_period_start(CAST(? AS TEXT), budget_period,"
    " (SELECT timezone FROM accounts WHERE id = keys.account_id))) END"
    " WHERE id = ? RETURNING budget_period_start, budget_spent_nano"
)


class Tx(Protocol):
    def rows(self, sql: str, args: Any = ()) -> list[Any]: ...
    def one(self, sql: str, args: Any = ()) -> Any: ...
    def run(self, sql: str, args: Any = ()) -> int: ...


Job = Callable[[Tx], Any]
R = TypeVar("R")  # what a job returns, and so its _read / _write


def account_from_row(row: Any, held_nano: int = 0) -> Account:
    return Account(
        id=row["id"],
        email=row["email"],
        name=row["name"],
        timezone=row["timezone"],
        password_hash=row["password_hash"],
        credit_nano=row["credit_nano"],
        total_paid_nano=row["total_paid_nano"],
        groups=tuple(orjson.loads(row["groups"])),
        embedding_models=frozenset(orjson.loads(row["embedding_models"])),
        created_at=row["created_at"],
        held_nano=held_nano,
        max_concurrent=row["max_concurrent"],
        alert_below_nano=row["alert_below_nano"],
    )


def key_from_row(row: Any, held_nano: int = 0) -> Key:
    """A ``KEY_COLUMNS`` row (joined with its account for the zone that fixes its expiry instant)."""
    key = Key(
        id=row["id"],
        account_id=row["account_id"],
        name=row["name"],
        secret_hash=row["secret_hash"],
        secret_hint=row["secret_hint"],
        status=row["status"],
        spend_limit_nano=row["spend_limit_nano"],
        spent_nano=row["spent_nano"],
        expires_on=dt.date.fromisoformat(row["expires_on"]) if row["expires_on"] else None,
        models=frozenset(orjson.loads(row["models"])) if row["models"] else None,
        allow_ips=tuple(ipaddress.ip_network(n) for n in orjson.loads(row["allow_ips"])) if row["allow_ips"] else None,
        group=row["group_name"],
        created_at=row["created_at"],
        last_used_at=row["last_used_at"],
        held_nano=held_nano,
        max_concurrent=row["max_concurrent"],
        budget_nano=row["budget_nano"],
        budget_period=row["budget_period"],
        budget_period_start=row["budget_period_start"],
        budget_spent_nano=row["budget_spent_nano"],
        mcp=tuple(orjson.loads(row["mcp"])) if row["mcp"] is not None else None,
    )
    key.expires_at = expiry_instant(key.expires_on, row["timezone"])
    return key


def key_params(key: Key) -> tuple[Any, ...]:
    """The editable fields of a key as stored: name, limit, expiry, models, IPs, group, concurrency
    cap, periodic budget (amount and period), MCP access list."""
    return (
        key.name,
        key.spend_limit_nano,
        key.expires_on.isoformat() if key.expires_on else None,
        orjson.dumps(sorted(key.models)).decode() if key.models is not None else None,
        orjson.dumps([str(n) for n in key.allow_ips]).decode() if key.allow_ips is not None else None,
        key.group,
        key.max_concurrent,
        key.budget_nano,
        key.budget_period,
        orjson.dumps(list(key.mcp)).decode() if key.mcp is not None else None,
    )


def usage_where(query: UsageQuery) -> tuple[str, list[Any]]:
    """Always scoped by account first: no filter can reach another account's rows."""
    clauses, args = ["account_id = ?"], [query.account_id]
    for column, op, value in (("key_id", "=", query.key_id), ("model", "=", query.model),
                              ("created_at", ">=", query.since), ("created_at", "<", query.until)):
        if value:
            clauses.append(f"{column} {op} ?")
            args.append(value)
    return " AND ".join(clauses), args


def new_instance_id() -> str:
    return new_id("inst_")


def instance_host() -> str:
    return socket.gethostname()[:200]


class SQLStore(PaymentsSQL, AdminSQL):
    """The contract methods with one SQL text for both stores (see the module docstring)."""

    kind = "sql"
    instance_id: str
    # the store's clock (UTC text): holds, charges and budget periods are dated by it; a test
    # sets a fixed instant on its store (``store.now_iso = lambda: "2026-03-29T22:59:59.999Z"``)
    now_iso: Callable[[], str] = staticmethod(utc_now_iso)

    @property
    def fenced(self) -> bool:
        """True while this instance must start no upstream work (PostgreSQL: its lease may have
        run out, see pg_instances); one process alone on its database is never fenced."""
        return False

    async def _write(self, job: Callable[[Tx], R]) -> R:  # pragma: no cover - provided by each store
        raise NotImplementedError

    async def _read(self, job: Callable[[Tx], R]) -> R:  # pragma: no cover - provided by each store
        raise NotImplementedError

    def _is_unique_violation(self, error: Exception) -> bool:  # pragma: no cover - provided by each store
        raise NotImplementedError

    async def ping(self) -> None:
        """One round trip to the database (readiness)."""
        await self._read(lambda tx: tx.one("SELECT 1 AS one"))

    # -- accounts ---------------------------------------------------------------------

    async def insert_account(self, account: Account) -> None:
        def insert(tx: Tx) -> None:
            if tx.one("SELECT id FROM accounts WHERE lower(email) = lower(?)", (account.email,)) is not None:
                raise EmailTaken(account.email)
            tx.run(
                "INSERT INTO accounts (id, email, name, timezone, password_hash, credit_nano, total_paid_nano,"
                " groups, embedding_models, created_at) VALUES (?, ?, ?, ?, ?, 0, 0, ?, ?, ?)",
                (account.id, account.email, account.name, account.timezone, account.password_hash,
                 orjson.dumps(list(account.groups)).decode(), orjson.dumps(sorted(account.embedding_models)).decode(),
                 account.created_at),
            )

        try:
            await self._write(insert)
        except Exception as e:
            if self._is_unique_violation(e):  # a concurrent creation on another instance won
                raise EmailTaken(account.email) from None
            raise

    async def update_account(self, account_id: str, *, name: str, timezone: str) -> None:
        await self._write(lambda tx: tx.run("UPDATE accounts SET name = ?, timezone = ? WHERE id = ?",
                                            (name, timezone, account_id)))

    async def set_account_max_concurrent(self, account_id: str, max_concurrent: int | None) -> None:
        await self._write(lambda tx: tx.run("UPDATE accounts SET max_concurrent = ? WHERE id = ?",
                                            (max_concurrent, account_id)))

    async def set_alert_below(self, account_id: str, alert_below_nano: int | None) -> None:
        """The balance below which the account is alerted (None: no balance alert; gatewayd.alerts)."""
        await self._write(lambda tx: tx.run("UPDATE accounts SET alert_below_nano = ? WHERE id = ?",
                                            (alert_below_nano, account_id)))

    async def set_password_hash(self, account_id: str, password_hash: str) -> None:
        await self._write(lambda tx: tx.run("UPDATE accounts SET password_hash = ? WHERE id = ?",
                                            (password_hash, account_id)))

    async def replace_password_hash(self, account_id: str, old_hash: str, new_hash: str) -> bool:
        """Compare and set: the hash becomes ``new_hash`` only if it is still ``old_hash``."""
        return await self._write(lambda tx: tx.run(
            "UPDATE accounts SET password_hash = ? WHERE id = ? AND password_hash = ?",
            (new_hash, account_id, old_hash))) == 1

    async def set_groups(self, account_id: str, groups: tuple[str, ...]) -> None:
        text = orjson.dumps(list(groups)).decode()
        await self._write(lambda tx: tx.run("UPDATE accounts SET groups = ? WHERE id = ?", (text, account_id)))

    async def set_embedding_models(self, account_id: str, models: frozenset[str]) -> None:
        text = orjson.dumps(sorted(models)).decode()
        await self._write(lambda tx: tx.run("UPDATE accounts SET embedding_models = ? WHERE id = ?",
                                            (text, account_id)))

    # -- keys -------------------------------------------------------------------------

    def _lock_account_for_keys(self, tx: Tx, account_id: str) -> None:
        """Serialise key creations of one account (SQLite's single writer does it already)."""

    async def insert_key(self, key: Key, max_keys: int) -> None:
        """Insert ``key`` unless its account has ``max_keys`` live keys; the count and the insert
        are one transaction, serialised per account, so concurrent creations cannot pass together."""

        def insert(tx: Tx) -> None:
            self._lock_account_for_keys(tx, key.account_id)
            live = tx.one("SELECT count(*) AS n FROM keys WHERE account_id = ? AND status != 'deleted'",
                          (key.account_id,))["n"]
            if live >= max_keys:
                raise TooManyKeys(key.account_id)
            tx.run(
                "INSERT INTO keys (id, account_id, secret_hash, secret_hint, status, spent_nano, created_at,"
                " name, spend_limit_nano, expires_on, models, allow_ips, group_name, max_concurrent, budget_nano,"
                " budget_period, mcp) VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key.id, key.account_id, key.secret_hash, key.secret_hint, key.status, key.created_at,
                 *key_params(key)),
            )

        await self._write(insert)

    async def update_key(self, key: Key) -> None:
        """Store the editable fields of ``key`` (built by the caller); refused once the key is revoked.

        A key with a budget has its period recounted from the usage rows in the same
        transaction (a new period or a new kind of period starts exact), and ``key`` shows
        the count on return (``gatewayd.budgets``)."""

        def update(tx: Tx) -> Any:
            changed = tx.run(
                "UPDATE keys SET name = ?, spend_limit_nano = ?, expires_on = ?, models = ?, allow_ips = ?,"
                " group_name = ?, max_concurrent = ?, budget_nano = ?, budget_period = ?, mcp = ?"
                " WHERE id = ? AND status != 'deleted'", (*key_params(key), key.id))
            if not changed:
                raise KeyRevoked(key.id)
            now = self.now_iso()
            return tx.one(RECOUNT_BUDGET, (now, now, key.id))

        row = await self._write(update)
        if key.budget_period is None:
            key.budget_period_start, key.budget_spent_nano = None, 0
        else:
            key.budget_period_start, key.budget_spent_nano = row["budget_period_start"], row["budget_spent_nano"]

    async def set_key_status(self, key_id: str, status: str) -> str:
        """enabled / disabled / deleted; returns the stored status after (a revoke always wins)."""

        def update(tx: Tx) -> str:
            tx.run("UPDATE keys SET status = ? WHERE id = ? AND status != 'deleted'", (status, key_id))
            stored: str = tx.one("SELECT status FROM keys WHERE id = ?", (key_id,))["status"]
            return stored

        return await self._write(update)

    # -- usage ------------------------------------------------------------------------

    async def usage_rows(self, query: UsageQuery, limit: int) -> list[UsageRow]:
        """Newest first."""
        where, args = usage_where(query)
        rows = await self._read(lambda tx: tx.rows(
            f"SELECT {USAGE_COLUMNS} FROM usage WHERE {where} ORDER BY id DESC LIMIT ?", (*args, limit)))
        return [UsageRow.from_row(r) for r in rows]

    async def usage_page(self, query: UsageQuery, page: int, page_size: int) -> UsagePage:
        where, args = usage_where(query)

        def read(tx: Tx) -> UsagePage:
            totals = tx.one(f"SELECT count(*) AS n, coalesce(sum(cost_nano), 0) AS cost FROM usage WHERE {where}",
                            args)
            total, cost = totals["n"], int(totals["cost"])
            pages = max(1, -(-total // page_size))
            current = min(max(1, page), pages)
            rows = tx.rows(f"SELECT {USAGE_COLUMNS} FROM usage WHERE {where} ORDER BY id DESC LIMIT ? OFFSET ?",
                           (*args, page_size, (current - 1) * page_size))
            return UsagePage([UsageRow.from_row(r) for r in rows], total, current, pages, cost)

        return await self._read(read)

    async def usage_batch(self, query: UsageQuery, before_id: int | None, limit: int) -> list[UsageRow]:
        """Keyset paging for exports: rows with ``id < before_id``, newest first."""
        where, args = usage_where(query)
        if before_id is not None:
            where, args = where + " AND id < ?", [*args, before_id]
        rows = await self._read(lambda tx: tx.rows(
            f"SELECT {USAGE_COLUMNS} FROM usage WHERE {where} ORDER BY id DESC LIMIT ?", (*args, limit)))
        return [UsageRow.from_row(r) for r in rows]

    async def usage_export(self, where: UsageFilter, *, before_id: int | None,
                           limit: int) -> tuple[list[dict[str, Any]], int | None]:
        """``usage_queries.usage_page``: a keyset page of any filter (the admin API's usage and export)."""
        from gatewayd.store.usage_queries import usage_page

        return await self._read(lambda tx: usage_page(tx, where, before_id=before_id, limit=limit))

    async def usage_report(self, where: UsageFilter) -> dict[str, Any]:
        """``usage_queries.usage_report``: requests, tokens and cost per model, per key and in total."""
        from gatewayd.store.usage_queries import usage_report

        return await self._read(lambda tx: usage_report(tx, where))

    async def models_used(self, account_id: str) -> list[str]:
        rows = await self._read(lambda tx: tx.rows("SELECT DISTINCT model FROM usage WHERE account_id = ?",
                                                   (account_id,)))
        return sorted(r["model"] for r in rows)

    async def spend_by_quarter_hour(self, account_id: str, since: str) -> list[tuple[str, str, int]]:
        """(model, UTC quarter hour ``YYYY-MM-DDTHH:MM``, cost) since ``since``: small whatever the traffic.

        Every zone's offset is a whole number of quarter hours, so the caller can put each
        quarter hour on its local day.
        """
        rows = await self._read(lambda tx: tx.rows(
            "SELECT model, substr(created_at, 1, 14) AS hour, CAST(substr(created_at, 15, 2) AS INTEGER) / 15"
            " AS quarter, sum(cost_nano) AS cost FROM usage WHERE account_id = ? AND created_at >= ?"
            " GROUP BY model, hour, quarter", (account_id, since)))
        return [(r["model"], f"{r['hour']}{int(r['quarter']) * 15:02d}", int(r["cost"])) for r in rows]

    # -- console state ----------------------------------------------------------------

    async def console_secret(self, candidate: str) -> str:
        """The secret that signs console sessions: the first one ever offered wins, for every instance."""

        def get(tx: Tx) -> str:
            tx.run("INSERT INTO settings (name, value) VALUES ('console_secret', ?) ON CONFLICT (name) DO NOTHING",
                   (candidate,))
            secret: str = tx.one("SELECT value FROM settings WHERE name = 'console_secret'")["value"]
            return secret

        return await self._write(get)

    async def end_session(self, session_id: str, until: float, now: float) -> None:
        """A signed-out session id is refused until ``until`` (epoch s, when its cookie would expire)."""

        def end(tx: Tx) -> None:
            tx.run("DELETE FROM ended_sessions WHERE until_epoch <= ?", (now,))
            tx.run("INSERT INTO ended_sessions (session_id, until_epoch) VALUES (?, ?)"
                   " ON CONFLICT (session_id) DO UPDATE SET until_epoch = excluded.until_epoch", (session_id, until))

        await self._write(end)

    async def session_ended(self, session_id: str, now: float) -> bool:
        row = await self._read(lambda tx: tx.one(
            "SELECT 1 AS ended FROM ended_sessions WHERE session_id = ? AND until_epoch > ?", (session_id, now)))
        return row is not None

    async def take_signin_attempt(self, buckets: Iterable[str], now: float, decide: Decide) -> Any:
        """``signin_attempts.take``: an attempt counted in every bucket before its password is
        checked, in one transaction (``decide`` is the throttle's policy)."""
        from gatewayd.store import signin_attempts

        return await self._write(lambda tx: signin_attempts.take(tx, buckets, now, decide))

    async def signin_succeeded(self, cleared: Iterable[str], refunded: Iterable[str]) -> None:
        from gatewayd.store import signin_attempts

        await self._write(lambda tx: signin_attempts.settle_success(tx, cleared, refunded))

    async def unlock_signin(self, email_buckets: str) -> int:
        """``signin_attempts.unlock``: every throttle bucket of one email deleted."""
        from gatewayd.store import signin_attempts

        deleted: int = await self._write(lambda tx: signin_attempts.unlock(tx, email_buckets))
        return deleted

    async def forget_signin_attempts(self, quiet_since: float, now: float) -> int:
        from gatewayd.store import signin_attempts

        skip_locked = self.kind == "postgres"
        return await self._write(lambda tx: signin_attempts.forget(tx, quiet_since, now, skip_locked=skip_locked))

    # -- received response ids (gatewayd.received_ids) ---------------------------------

    async def record_received_ids(self, account_id: str, ids: Iterable[str], expires_at: int) -> None:
        """The account received these response / conversation ids; kept until ``expires_at``
        (epoch s). Receiving one again moves its expiry."""
        rows = [(account_id, i, expires_at) for i in dict.fromkeys(ids)]
        if not rows:
            return

        def record(tx: Tx) -> None:
            for row in rows:
                tx.run("INSERT INTO received_ids (account_id, response_id, expires_at) VALUES (?, ?, ?)"
                       " ON CONFLICT (account_id, response_id) DO UPDATE SET expires_at = excluded.expires_at", row)

        await self._write(record)

    async def received_ids(self, account_id: str, ids: Iterable[str], now: int) -> set[str]:
        """Those of ``ids`` the account received and that have not expired at ``now`` (epoch s)."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return set()
        marks = ", ".join("?" for _ in wanted)
        rows = await self._read(lambda tx: tx.rows(
            f"SELECT response_id FROM received_ids WHERE account_id = ? AND response_id IN ({marks})"
            " AND expires_at > ?", (account_id, *wanted, now)))
        return {r["response_id"] for r in rows}

    async def forget_received_ids(self, now: int) -> int:
        """Delete the records expired at ``now`` (epoch s); returns how many."""
        return await self._write(lambda tx: tx.run("DELETE FROM received_ids WHERE expires_at <= ?", (now,)))

    # -- the alert outbox (gatewayd.store.alert_outbox; rows are written by triggers) -------

    async def claim_alerts(self, *, now: float, lease_s: float, token: str, limit: int) -> list[OutboxRow]:
        skip_locked = self.kind == "postgres"
        return await self._write(lambda tx: alert_outbox.claim(tx, now=now, lease_s=lease_s, token=token,
                                                               limit=limit, skip_locked=skip_locked))

    async def finish_alert(self, row_id: int, token: str, *, outcome: str, email_done: bool, webhook_done: bool,
                           error: str | None = None) -> bool:
        at = self.now_iso()
        return await self._write(lambda tx: alert_outbox.finish(
            tx, row_id, token, outcome=outcome, at=at, email_done=email_done, webhook_done=webhook_done, error=error))

    async def retry_alert(self, row_id: int, token: str, *, next_attempt_at: float, email_done: bool,
                          webhook_done: bool, error: str) -> bool:
        return await self._write(lambda tx: alert_outbox.retry_later(
            tx, row_id, token, next_attempt_at=next_attempt_at, email_done=email_done, webhook_done=webhook_done,
            error=error))

    async def recent_alerts(self, account_id: str, limit: int = 20) -> list[OutboxRow]:
        return await self._read(lambda tx: alert_outbox.recent(tx, account_id, limit))

    async def forget_finished_alerts(self, before: str) -> int:
        return await self._write(lambda tx: alert_outbox.forget_finished(tx, before))

    # -- audit ------------------------------------------------------------------------

    def _audit_sums(self, tx: Tx) -> dict[str, Any]:
        def sums(sql: str) -> dict[str, int]:
            return {r["id"]: int(r["total"]) for r in tx.rows(sql)}

        over = over_hold_condition()
        return {
            "paid": sums("SELECT account_id AS id, sum(amount_nano) AS total FROM payments GROUP BY account_id"),
            # what refunds and disputes gave back (the hold rule's bound moves down by it)
            "given_back": sums("SELECT account_id AS id, -sum(amount_nano) AS total FROM payments"
                               " WHERE amount_nano < 0 GROUP BY account_id"),
            "charged": sums("SELECT account_id AS id, sum(cost_nano) AS total FROM usage GROUP BY account_id"),
            "held": sums("SELECT account_id AS id, sum(amount_nano) AS total FROM holds GROUP BY account_id"),
            "key_charged": sums("SELECT key_id AS id, sum(cost_nano) AS total FROM usage GROUP BY key_id"),
            "key_held": sums("SELECT key_id AS id, sum(amount_nano) AS total FROM holds GROUP BY key_id"),
            # the usage rows of each key's counted budget period (gatewayd.budgets)
            "key_period_charged": sums("SELECT k.id AS id, coalesce(sum(u.cost_nano), 0) AS total FROM keys k"
                                       " JOIN usage u ON u.key_id = k.id AND u.created_at >= k.budget_period_start"
                                       " WHERE k.budget_period IS NOT NULL AND k.budget_period_start IS NOT NULL"
                                       " GROUP BY k.id"),
            # charges made after their hold had been released as interrupted: the hold rule's allowance
            "late_charged": sums("SELECT account_id AS id, sum(cost_nano) AS total FROM usage"
                                 " WHERE charged_after_release = 1 GROUP BY account_id"),
            "key_late_charged": sums("SELECT key_id AS id, sum(cost_nano) AS total FROM usage"
                                     " WHERE charged_after_release = 1 GROUP BY key_id"),
            # one usage row per request, always (at most 100 named)
            "repeated_requests": sums("SELECT request_id AS id, count(*) AS total FROM usage GROUP BY request_id"
                                      " HAVING count(*) > 1 ORDER BY request_id LIMIT 100"),
            # charge <= hold x (1 + HOLD_TOLERANCE) on every row that recorded its hold (some named)
            "over_hold": {r["request_id"]: (int(r["cost_nano"]), int(r["hold_nano"]),
                                            f'{r["model"]} {r["endpoint"]}{" stream" if r["stream"] else ""} {r["status"]}')
                          for r in tx.rows(f"SELECT request_id, cost_nano, hold_nano, model, endpoint, stream, status"
                                           f" FROM usage WHERE {over} ORDER BY id LIMIT {NAMED_AT_MOST}")},
            "over_hold_count": int(tx.one(f"SELECT count(*) AS n FROM usage WHERE {over}")["n"]),
        }


def process_identity() -> tuple[str, int]:
    return instance_host(), os.getpid()
