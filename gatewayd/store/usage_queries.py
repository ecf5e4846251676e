"""Reading the usage log: filtered pages for export, and sums for reports.

Pages are keyset-paginated on the row id (newest first): each page is one indexed range
scan from the cursor down, so an export of any range streams in constant memory on both
sides, however many rows it has. Timestamps are compared as the stored UTC ISO text
(``2026-11-21T20:48:00.123Z``), which sorts like the instant it names. The functions take
a store's ``Tx`` (``gatewayd.store.sql``), so both stores run the same SQL; callers outside
the store use ``store.usage_export`` and ``store.usage_report``.
"""

from __future__ import annotations

from typing import Any

import attrs

from gatewayd.store.base import parse_breakdown

USAGE_COLUMNS = (
    "request_id", "created_at", "key_id", "model", "endpoint", "stream", "status", "http_status", "input_tokens",
    "output_tokens", "cached_tokens", "cache_write_tokens", "cost_nano", "duration_ms", "provider", "attempts",
    "hold_nano", "breakdown", "requested_model",
)


@attrs.frozen
class UsageFilter:
    account_id: str | None  # None: every account (reports only)
    key_id: str | None = None
    model: str | None = None
    status: str | None = None
    since: str | None = None  # UTC ISO, inclusive
    until: str | None = None  # UTC ISO, exclusive

    def where(self) -> tuple[str, list[Any]]:
        clauses, args = [], []
        for column, value in (("account_id", self.account_id), ("key_id", self.key_id), ("model", self.model),
                              ("status", self.status)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        if self.since is not None:
            clauses.append("created_at >= ?")
            args.append(self.since)
        if self.until is not None:
            clauses.append("created_at < ?")
            args.append(self.until)
        return (" AND ".join(clauses) or "TRUE"), args


def usage_row(row: Any) -> dict[str, Any]:
    doc = {name: row[name] for name in USAGE_COLUMNS}
    doc["stream"] = bool(doc["stream"])
    doc["breakdown"] = parse_breakdown(doc["breakdown"])  # the document, not its text (None on older rows)
    return doc


def usage_page(tx: Any, where: UsageFilter, *, before_id: int | None, limit: int
               ) -> tuple[list[dict[str, Any]], int | None]:
    """Up to ``limit`` rows older than ``before_id`` (newest first), and the cursor of the next page."""
    sql, args = where.where()
    if before_id is not None:
        sql += " AND id < ?"
        args.append(before_id)
    rows = tx.rows(
        f"SELECT id, {', '.join(USAGE_COLUMNS)} FROM usage WHERE {sql} ORDER BY id DESC LIMIT ?", (*args, limit + 1)
    )
    following = rows[limit - 1]["id"] if len(rows) > limit else None
    return [usage_row(r) for r in rows[:limit]], following


_SUMS = ("count(*) AS requests, coalesce(sum(input_tokens), 0) AS input_tokens,"
         " coalesce(sum(output_tokens), 0) AS output_tokens, coalesce(sum(cached_tokens), 0) AS cached_tokens,"
         " coalesce(sum(cache_write_tokens), 0) AS cache_write_tokens, coalesce(sum(cost_nano), 0) AS cost_nano")


def usage_report(tx: Any, where: UsageFilter) -> dict[str, Any]:
    """Requests, tokens and cost summed per model, per key, and in total."""
    sql, args = where.where()
    by_model = tx.rows(
        f"SELECT model, {_SUMS} FROM usage WHERE {sql} GROUP BY model ORDER BY cost_nano DESC, model", args)
    by_key = tx.rows(
        f"SELECT account_id, key_id, {_SUMS} FROM usage WHERE {sql} GROUP BY account_id, key_id"
        " ORDER BY cost_nano DESC, key_id", args)
    total = tx.one(f"SELECT {_SUMS} FROM usage WHERE {sql}", args)
    # over time: each UTC day's sums per model, and per account (the operator console's revenue
    # chart and CSV)
    by_day = tx.rows(
        f"SELECT substr(created_at, 1, 10) AS day, model, {_SUMS} FROM usage WHERE {sql}"
        " GROUP BY substr(created_at, 1, 10), model ORDER BY day, model", args)
    by_day_account = tx.rows(
        f"SELECT substr(created_at, 1, 10) AS day, account_id, {_SUMS} FROM usage WHERE {sql}"
        " GROUP BY substr(created_at, 1, 10), account_id ORDER BY day, account_id", args)
    return {"by_model": [_ints(r) for r in by_model], "by_key": [_ints(r) for r in by_key],
            "by_day": [_ints(r) for r in by_day], "by_day_account": [_ints(r) for r in by_day_account],
            "total": _ints(total)}


def _ints(row: Any) -> dict[str, Any]:
    """Sums as plain ints (PostgreSQL's sum() of bigint is numeric)."""
    return {name: int(row[name]) if name not in ("model", "account_id", "key_id", "day") else row[name]
            for name in row.keys()}
