"""What the console reads from the store: payments, the usage log, daily spend.

Every query is scoped by ``account_id`` first (the store's ``UsageQuery`` always is), so
one account can never read another's rows whatever the filters say. Filters are in
the account's terms (local calendar days) and become UTC instants here.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import AsyncIterator

import attrs

from gatewayd.console.formatting import day_start_utc, local_today, parse_utc, zone
from gatewayd.store.base import Payment, UsagePage, UsageQuery, UsageRow

PAGE_SIZE = 50
CSV_BATCH = 2000
CHART_DAYS = 30


@attrs.frozen
class UsageFilter:
    """Filters in the account's terms: dates are local calendar days, both ends included."""

    key_id: str | None = None
    model: str | None = None
    date_from: dt.date | None = None
    date_to: dt.date | None = None

    def query(self, account_id: str, timezone: str) -> UsageQuery:
        return UsageQuery(
            account_id=account_id,
            key_id=self.key_id or None,
            model=self.model or None,
            since=day_start_utc(self.date_from, timezone) if self.date_from else None,
            until=day_start_utc(self.date_to + dt.timedelta(days=1), timezone) if self.date_to else None,
        )

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


async def payments(store, account_id: str) -> list[Payment]:
    return await store.payments(account_id)


async def usage_page(store, account_id: str, timezone: str, flt: UsageFilter, page: int) -> UsagePage:
    return await store.usage_page(flt.query(account_id, timezone), page, PAGE_SIZE)


async def usage_batches(store, account_id: str, timezone: str, flt: UsageFilter) -> AsyncIterator[list[UsageRow]]:
    """Every matching row, newest first, in batches (keyset paging: constant memory for any size)."""
    query = flt.query(account_id, timezone)
    before: int | None = None
    while True:
        rows = await store.usage_batch(query, before, CSV_BATCH)
        if not rows:
            return
        yield rows
        if len(rows) < CSV_BATCH:
            return
        before = rows[-1].id


async def models_used(store, account_id: str) -> list[str]:
    return await store.models_used(account_id)


async def daily_spend(
    store, account_id: str, timezone: str, days: int = CHART_DAYS, now: dt.datetime | None = None
) -> tuple[list[dt.date], dict[str, dict[dt.date, int]]]:
    """Spend per model per local day for the last ``days`` days (today included).

    The store sums per model and UTC quarter hour (every zone's offset is a whole number
    of quarter hours), and each quarter hour goes on its local day here: one small result
    however many requests the account made.
    """
    today = local_today(timezone, now)
    first = today - dt.timedelta(days=days - 1)
    since = day_start_utc(first, timezone)
    rows = await store.spend_by_quarter_hour(account_id, since)
    tz = zone(timezone)
    spend: dict[str, dict[dt.date, int]] = defaultdict(lambda: defaultdict(int))
    for model, quarter, cost in rows:
        day = parse_utc(quarter + ":00Z").astimezone(tz).date()
        if first <= day <= today and cost:
            spend[model][day] += cost
    return [first + dt.timedelta(days=i) for i in range(days)], {m: dict(d) for m, d in spend.items()}
