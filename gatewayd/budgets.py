"""Periodic key budgets (issue 22): a key may spend at most ``budget_nano`` per day, week or month.

A period starts at midnight in the account's IANA zone: every day, on Mondays for weeks, on
the 1st for months. The key row carries the start of the period it has counted
(``budget_period_start``, a UTC instant as the store writes timestamps) and what its usage
rows dated from that instant on were charged (``budget_spent_nano``). The counter is kept by
the store, in the transaction that writes each usage row (a trigger on ``usage`` in both
stores, so every path that charges, settles, provisionally charges or refunds moves it), and
is recounted from the usage rows when a new period begins: one indexed sum over
``usage(key_id, created_at)`` per key and period, never a scan of the whole period per
request. The invariant the audit checks is therefore exact:

    budget_spent_nano == sum(cost_nano of the key's usage rows with created_at >= budget_period_start)

A hold counts against the budget as it does against the spend limit: ``budget - spent in the
period - held >= estimate`` (every open hold of the key, whenever taken: it will be charged
in the period it settles in).
"""

from __future__ import annotations

import datetime as dt
from functools import lru_cache
from zoneinfo import ZoneInfo

PERIODS = ("day", "week", "month")


def _utc(iso: str) -> dt.datetime:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))


def _iso(moment: dt.datetime) -> str:
    moment = moment.astimezone(dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def period_start(now_iso: str, period: str, zone: str) -> str:
    """The UTC instant (store text) at which the ``period`` holding ``now_iso`` began in ``zone``.

    Cached per local day: the store asks on every hold and settlement of a key with a budget."""
    local = _utc(now_iso).astimezone(ZoneInfo(zone))
    return _period_start_of_day(local.date(), period, zone)


@lru_cache(maxsize=4096)
def _period_start_of_day(day: dt.date, period: str, zone: str) -> str:
    if period == "week":
        day = day - dt.timedelta(days=day.weekday())
    elif period == "month":
        day = day.replace(day=1)
    elif period != "day":
        raise ValueError(f"budget period must be one of {', '.join(PERIODS)} (got {period!r})")
    return _iso(dt.datetime.combine(day, dt.time(0), tzinfo=ZoneInfo(zone)))


def next_period_start(start_iso: str, period: str, zone: str) -> str:
    """The instant the period that began at ``start_iso`` ends (the next one's start)."""
    day = _utc(start_iso).astimezone(ZoneInfo(zone)).date()
    if period == "day":
        following = day + dt.timedelta(days=1)
    elif period == "week":
        following = day + dt.timedelta(days=7)
    else:
        following = (day.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    return _period_start_of_day(following, period, zone)


def spent_in_period(budget_period_start: str | None, budget_spent_nano: int, current_start: str) -> int:
    """What a key's counter says was spent in the period that began at ``current_start``: its
    count if it counts that period (or a later one: a clock or zone that moved back), else 0."""
    if budget_period_start is None or budget_period_start < current_start:
        return 0
    return budget_spent_nano


def budget_view(budget_nano: int | None, budget_period: str | None, budget_period_start: str | None,
                budget_spent_nano: int, held_nano: int, zone: str, now_iso: str) -> dict:
    """What the admin API, ``gatewayctl`` and the console show of a key's budget at ``now_iso``:
    the current period's start and end, what was spent in it and what is left (held money counts
    as spent until it settles, as it does for the next hold). Empty when the key has no budget."""
    if budget_nano is None or budget_period is None:
        return {}
    current = period_start(now_iso, budget_period, zone)
    spent = spent_in_period(budget_period_start, budget_spent_nano, current)
    return {
        "budget_period_starts_at": current,
        "budget_period_ends_at": next_period_start(current, budget_period, zone),
        "budget_period_spent_nano": spent,
        "budget_left_nano": max(budget_nano - spent - held_nano, 0),
    }
