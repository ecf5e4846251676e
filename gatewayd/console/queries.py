"""What the console reads from the store: payments, the usage log, daily spend.

Every query is scoped by ``account_id`` first, so one account can never read another's
rows whatever the filters say. Reads run on the store's reader threads (WAL), never
blocking the request path's writer.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections import defaultdict
from typing import AsyncIterator

import attrs

from gatewayd.console.formatting import day_start_utc, local_today, parse_utc, zone
from gatewayd.store.sqlite import SQLiteStore

PAGE_SIZE = 50
CSV_BATCH = 2000
CHART_DAYS = 30

USAGE_COLUMNS = (
    "id, request_id, created_at, key_id, model, endpoint, stream, status, http_status, input_tokens,"
    " output_tokens, cached_tokens, cache_write_tokens, cost_nano, duration_ms"
)


@attrs.frozen
class UsageFilter:
    """Filters in the account's terms: dates are local calendar days, both ends included."""

    key_id: str | None = None
    model: str | None = None
    date_from: dt.date | None = None
    date_to: dt.date | None = None

    def where(self, account_id: str, timezone: str) -> tuple[str, list]:
        clauses, args = ["account_id = ?"], [account_id]
        if self.key_id:
            clauses.append("key_id = ?")
            args.append(self.key_id)
        if self.model:
            clauses.append("model = ?")
            args.append(self.model)
        if self.date_from:
            clauses.append("created_at >= ?")
            args.append(day_start_utc(self.date_from, timezone))
        if self.date_to:
            clauses.append("created_at < ?")
            args.append(day_start_utc(self.date_to + dt.timedelta(days=1), timezone))
        return " AND ".join(clauses), args

    def query_args(self) -> dict[str, str]:
        """The filter as URL query arguments (for pagination links and the CSV export)."""
        out = {}
        if self.key_id:
            out["key"] = self.key_id
        if self.model:
            out["model"] = self.model
        if self.date_from:
            out["from"] = self.date_from.isoformat()
        if self.date_to:
            out["to"] = self.date_to.isoformat()
        return out


@attrs.frozen
class UsagePage:
    rows: list[dict]
    total: int
    page: int
    pages: int
    total_cost_nano: int


async def payments(store: SQLiteStore, account_id: str) -> list[dict]:
    rows = await store.read(lambda conn: conn.execute(
        "SELECT id, amount_nano, note, created_at FROM payments WHERE account_id = ? ORDER BY id DESC",
        (account_id,),
    ).fetchall())
    return [dict(r) for r in rows]


async def usage_page(store: SQLiteStore, account_id: str, timezone: str, flt: UsageFilter, page: int) -> UsagePage:
    where, args = flt.where(account_id, timezone)

    def read(conn: sqlite3.Connection) -> UsagePage:
        total, cost = conn.execute(f"SELECT count(*), coalesce(sum(cost_nano), 0) FROM usage WHERE {where}",
                                   args).fetchone()
        pages = max(1, -(-total // PAGE_SIZE))
        current = min(max(1, page), pages)
        rows = conn.execute(
            f"SELECT {USAGE_COLUMNS} FROM usage WHERE {where} ORDER BY id DESC LIMIT ? OFFSET ?",
            [*args, PAGE_SIZE, (current - 1) * PAGE_SIZE],
        ).fetchall()
        return UsagePage([dict(r) for r in rows], total, current, pages, cost)

    return await store.read(read)


async def usage_batches(
    store: SQLiteStore, account_id: str, timezone: str, flt: UsageFilter
) -> AsyncIterator[list[dict]]:
    """Every matching row, newest first, in batches (keyset paging: constant memory for any size)."""
    where, args = flt.where(account_id, timezone)
    before: int | None = None
    while True:
        bound = " AND id < ?" if before is not None else ""
        batch_args = [*args, before] if before is not None else args
        rows = await store.read(lambda conn: conn.execute(
            f"SELECT {USAGE_COLUMNS} FROM usage WHERE {where}{bound} ORDER BY id DESC LIMIT ?",
            [*batch_args, CSV_BATCH],
        ).fetchall())
        if not rows:
            return
        yield [dict(r) for r in rows]
        if len(rows) < CSV_BATCH:
            return
        before = rows[-1]["id"]


async def models_used(store: SQLiteStore, account_id: str) -> list[str]:
    rows = await store.read(lambda conn: conn.execute(
        "SELECT DISTINCT model FROM usage WHERE account_id = ?", (account_id,)
    ).fetchall())
    return sorted(r[0] for r in rows)


async def daily_spend(
    store: SQLiteStore, account_id: str, timezone: str, days: int = CHART_DAYS, now: dt.datetime | None = None
) -> tuple[list[dt.date], dict[str, dict[dt.date, int]]]:
    """Spend per model per local day for the last ``days`` days (today included).

    SQL sums per model and UTC quarter hour (every zone's offset is a whole number of
    quarter hours), and Python puts each quarter hour on its local day: one small
    result however many requests the account made.
    """
    today = local_today(timezone, now)
    first = today - dt.timedelta(days=days - 1)
    since = day_start_utc(first, timezone)
    rows = await store.read(lambda conn: conn.execute(
        "SELECT model, substr(created_at, 1, 14) || printf('%02d', (CAST(substr(created_at, 15, 2) AS INTEGER)"
        " / 15) * 15) AS quarter, sum(cost_nano) FROM usage WHERE account_id = ? AND created_at >= ?"
        " GROUP BY model, quarter",
        (account_id, since),
    ).fetchall())
    tz = zone(timezone)
    spend: dict[str, dict[dt.date, int]] = defaultdict(lambda: defaultdict(int))
    for model, quarter, cost in rows:
        day = parse_utc(quarter + ":00Z").astimezone(tz).date()
        if first <= day <= today and cost:
            spend[model][day] += cost
    return [first + dt.timedelta(days=i) for i in range(days)], {m: dict(d) for m, d in spend.items()}
