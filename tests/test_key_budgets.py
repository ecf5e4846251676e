"""Periodic key budgets (issue 22, gatewayd/budgets.py) through the store contract, on both stores.

The store's clock is fixed (``store.now_iso``) so period boundaries are played at exact
instants in several zones, never by waiting for the wall clock."""

from __future__ import annotations

import pytest
import trio

from gatewayd.budgets import budget_view, next_period_start, period_start
from gatewayd.config import load_config
from gatewayd.directory import Directory, DirectoryError
from gatewayd.store.base import Hold, Refusal, Settlement
from tests import pg


class Clock:
    """The store's clock, set by the test."""

    def __init__(self, now: str) -> None:
        self.now = now

    def __call__(self) -> str:
        return self.now


async def _key_with_budget(store, *, budget=1_000, period="day", zone="UTC", paid=1_000_000, limit=None,
                           email="b@example.com"):
    directory = Directory(load_config(None, environ={}), store)
    account = await directory.create_account(email, "", zone)
    await directory.pay(account, paid)
    key, _ = await directory.create_key(account, name="k", spend_limit_nano=limit, budget_nano=budget,
                                        budget_period=period)
    return directory, account, key


async def _spend(store, account, key, hold, cost, rid):
    held = await store.reserve(account, key, hold, request_id=rid, model="m", endpoint="chat", stream=False)
    assert isinstance(held, Hold), held
    await store.settle(held, Settlement(status="ok", http_status=200, cost_nano=cost))
    return held


async def _reserve(store, account, key, amount, rid):
    return await store.reserve(account, key, amount, request_id=rid, model="m", endpoint="chat", stream=False)


@pytest.mark.parametrize(("now", "period", "zone", "start"), [
    ("2026-03-04T10:00:00.000Z", "day", "UTC", "2026-03-04T00:00:00.000Z"),
    # Wednesday 4 March: the week began on Monday 2 March
    ("2026-03-04T10:00:00.000Z", "week", "UTC", "2026-03-02T00:00:00.000Z"),
    ("2026-03-04T10:00:00.000Z", "month", "UTC", "2026-03-01T00:00:00.000Z"),
    # 23:30 UTC on the 4th is already the 5th in Tokyo (UTC+9): that day began at 15:00 UTC
    ("2026-03-04T23:30:00.000Z", "day", "Asia/Tokyo", "2026-03-04T15:00:00.000Z"),
    # 02:00 UTC on 1 April is still 31 March in New York (UTC-4 in summer): March's month
    ("2026-04-01T02:00:00.000Z", "month", "America/New_York", "2026-03-01T05:00:00.000Z"),
    # a Sunday night in Los Angeles is Monday in UTC: the week began the Monday before
    ("2026-03-09T03:00:00.000Z", "week", "America/Los_Angeles", "2026-03-02T08:00:00.000Z"),
    # Europe/Berlin's clocks go forward on 29 March 2026: the day is 23 hours long
    ("2026-03-29T12:00:00.000Z", "day", "Europe/Berlin", "2026-03-28T23:00:00.000Z"),
])
def test_period_starts_at_midnight_in_the_accounts_zone(now, period, zone, start):
    assert period_start(now, period, zone) == start


def test_the_next_period_starts_where_this_one_ends():
    assert next_period_start("2026-03-28T23:00:00.000Z", "day", "Europe/Berlin") == "2026-03-29T22:00:00.000Z"
    assert next_period_start("2026-12-01T00:00:00.000Z", "month", "UTC") == "2027-01-01T00:00:00.000Z"
    assert next_period_start("2026-03-02T00:00:00.000Z", "week", "UTC") == "2026-03-09T00:00:00.000Z"


async def test_a_key_that_spent_its_budget_is_refused_until_the_next_period(store):
    clock = store.now_iso = Clock("2026-03-04T10:00:00.000Z")
    _, account, key = await _key_with_budget(store, budget=1_000, period="day", zone="Asia/Tokyo")
    await _spend(store, account, key, 600, 600, "r1")
    await _spend(store, account, key, 400, 400, "r2")
    refused = await _reserve(store, account, key, 1, "r3")
    assert refused == Refusal("key", 0)
    # 14:59:59.999 UTC is still the 4th in Tokyo ...
    clock.now = "2026-03-04T14:59:59.999Z"
    assert await _reserve(store, account, key, 1, "r4") == Refusal("key", 0)
    # ... and 15:00 UTC is midnight there: a new day, the whole budget again
    clock.now = "2026-03-04T15:00:00.000Z"
    fresh_day = await _reserve(store, account, key, 1_000, "r5")
    assert isinstance(fresh_day, Hold)
    await store.settle(fresh_day, Settlement(status="ok", http_status=200, cost_nano=10))
    await store.flush()
    report = await store.audit([account], [key])
    assert report["ok"] is True, report
    assert (report["keys"][0]["budget"]["period_start"], report["keys"][0]["budget"]["spent_nano"]) == (
        "2026-03-04T15:00:00.000Z", 10)
    await store.refresh_key(key)
    assert (key.budget_period_start, key.budget_spent_nano) == ("2026-03-04T15:00:00.000Z", 10)


async def test_the_hold_counts_against_what_is_left_of_the_budget(store):
    store.now_iso = Clock("2026-03-04T10:00:00.000Z")
    _, account, key = await _key_with_budget(store, budget=1_000, period="week")
    await _spend(store, account, key, 300, 300, "r1")
    first = await _reserve(store, account, key, 500, "r2")  # open: 200 left
    assert isinstance(first, Hold)
    assert await _reserve(store, account, key, 201, "r3") == Refusal("key", 200)
    assert isinstance(await _reserve(store, account, key, 200, "r4"), Hold)
    # the lifetime spend limit still applies beside it, whichever is smaller refuses
    assert key.spend_limit_nano is None
    await store.settle(first, Settlement(status="ok", http_status=200, cost_nano=100))
    assert isinstance(await _reserve(store, account, key, 400, "r5"), Hold)
    assert await _reserve(store, account, key, 1, "r6") == Refusal("key", 0)
    await store.flush()
    assert (await store.audit([account], [key]))["ok"] is True


async def test_the_smaller_of_the_limit_and_the_budget_refuses(store):
    store.now_iso = Clock("2026-03-04T10:00:00.000Z")
    _, account, key = await _key_with_budget(store, budget=1_000, period="month", limit=700)
    assert await _reserve(store, account, key, 701, "r1") == Refusal("key", 700)
    await _spend(store, account, key, 700, 650, "r2")
    assert await _reserve(store, account, key, 51, "r3") == Refusal("key", 50)


async def test_the_period_count_survives_a_reload_and_follows_budget_changes(store):
    clock = store.now_iso = Clock("2026-03-04T10:00:00.000Z")
    directory, account, key = await _key_with_budget(store, budget=1_000, period="month")
    await _spend(store, account, key, 500, 450, "r1")
    clock.now = "2026-03-20T10:00:00.000Z"
    await _spend(store, account, key, 100, 100, "r2")
    await store.flush()
    fresh = await store.load_key(key.id)
    assert (fresh.budget_nano, fresh.budget_period, fresh.budget_spent_nano) == (1_000, "month", 550)
    # a week period now: recounted from the usage rows since Monday 16 March (only r2)
    await directory.update_key(key, {"budget_period": "week"})
    assert (key.budget_period, key.budget_period_start, key.budget_spent_nano) == (
        "week", "2026-03-16T00:00:00.000Z", 100)
    assert (await _reserve(store, account, key, 901, "r3")) == Refusal("key", 900)
    # a new amount keeps the period; clearing removes the budget
    await directory.update_key(key, {"budget_nano": 2_000})
    assert (key.budget_nano, key.budget_period, key.budget_spent_nano) == (2_000, "week", 100)
    await directory.update_key(key, {"budget_nano": None})
    assert (key.budget_nano, key.budget_period) == (None, None)
    assert isinstance(await _reserve(store, account, key, 5_000, "r4"), Hold)
    await store.flush()
    assert (await store.audit([account], [key]))["ok"] is True


async def test_bad_budgets_are_refused_with_a_clear_message(store):
    directory, account, key = await _key_with_budget(store)
    with pytest.raises(DirectoryError, match="budget_period must be one of day, week, month"):
        await directory.create_key(account, name="x", budget_nano=5, budget_period="year")
    with pytest.raises(DirectoryError, match="budget_period needs budget_nano"):
        await directory.create_key(account, name="x", budget_period="day")
    with pytest.raises(DirectoryError, match="budget_nano must be a non-negative integer"):
        await directory.update_key(key, {"budget_nano": -1})
    with pytest.raises(DirectoryError, match="budget_period must be one of"):
        await directory.create_key(account, name="x", budget_nano=5)


async def test_the_audit_catches_a_period_count_that_differs_from_the_usage_rows(store):
    store.now_iso = Clock("2026-03-04T10:00:00.000Z")
    _, account, key = await _key_with_budget(store)
    await _spend(store, account, key, 300, 250, "r1")
    await store.flush()
    assert (await store.audit([account], [key]))["ok"] is True
    await store._write(lambda tx: tx.run("UPDATE keys SET budget_spent_nano = 7 WHERE id = ?", (key.id,)))
    report = await store.audit([account], [key])
    assert report["ok"] is False
    assert "budget: spent 7 in the period from 2026-03-04T00:00:00.000Z != sum of its usage rows since then 250" in (
        report["keys"][0]["problems"])


def test_the_view_shows_the_period_and_what_is_left():
    view = budget_view(1_000, "day", "2026-03-03T00:00:00.000Z", 900, 0, "UTC", "2026-03-04T10:00:00.000Z")
    assert view == {"budget_period_starts_at": "2026-03-04T00:00:00.000Z",
                    "budget_period_ends_at": "2026-03-05T00:00:00.000Z",
                    "budget_period_spent_nano": 0, "budget_left_nano": 1_000}
    assert budget_view(1_000, "day", "2026-03-04T00:00:00.000Z", 900, 50, "UTC",
                       "2026-03-04T10:00:00.000Z")["budget_left_nano"] == 50
    assert budget_view(None, None, None, 0, 0, "UTC", "2026-03-04T10:00:00.000Z") == {}


@pytest.mark.skipif(not pg.available(), reason="no PostgreSQL on 127.0.0.1:5432")
async def test_postgres_computes_the_same_period_starts_as_python(tmp_path):
    import psycopg

    name, url = pg.create_database(migrated=True)
    try:
        from gatewayd.store.postgres import PostgresStore

        store = await PostgresStore.open(url, pool_size=2)
        await store.close()
        cases = [("2026-03-04T23:30:00.000Z", "day", "Asia/Tokyo"), ("2026-04-01T02:00:00.000Z", "month",
                 "America/New_York"), ("2026-03-09T03:00:00.000Z", "week", "America/Los_Angeles"),
                 ("2026-03-29T12:00:00.000Z", "day", "Europe/Berlin"), ("2026-10-25T00:30:00.000Z", "day",
                 "Europe/London"), ("2026-01-01T00:00:00.000Z", "week", "Pacific/Kiritimati")]
        with psycopg.connect(url) as conn:
            for at, period, zone in cases:
                got = conn.execute("SELECT gatewayd_period_start(%s, %s, %s)", (at, period, zone)).fetchone()[0]
                assert got == period_start(at, period, zone), (at, period, zone)
    finally:
        pg.drop_database(name)


@pytest.mark.skipif(not pg.available(), reason="no PostgreSQL on 127.0.0.1:5432")
async def test_two_instances_racing_for_the_last_of_a_budget_only_one_passes(tmp_path):
    """Two PostgreSQL stores (two instances) on one database, 20 rounds of both holding the
    last 100 of a budget at the same instant: exactly one passes each time."""
    from gatewayd.store.postgres import PostgresStore

    name, url = pg.create_database(migrated=True)
    a = await PostgresStore.open(url, pool_size=3)
    b = await PostgresStore.open(url, pool_size=3)
    try:
        for s in (a, b):
            s.now_iso = Clock("2026-03-04T10:00:00.000Z")
        _, account, key = await _key_with_budget(a, budget=2_000, period="day", paid=10_000_000)
        account_b, key_b = await b.load_account(account.id), await b.load_key(key.id)
        await _spend(a, account, key, 1_900, 1_900, "warm")
        for i in range(20):
            results = {}

            async def take(store, acct, k, tag):
                results[tag] = await _reserve(store, acct, k, 100, f"{tag}{i}")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(take, a, account, key, "a")
                nursery.start_soon(take, b, account_b, key_b, "b")
            holds = [h for h in results.values() if isinstance(h, Hold)]
            assert len(holds) == 1, results
            refused = [r for r in results.values() if isinstance(r, Refusal)]
            assert refused == [Refusal("key", 0)]
            owner = a if holds[0].account is account else b
            await owner.settle(holds[0], Settlement(status="ok", http_status=200, cost_nano=0))
        report = await a.audit()
        assert report["ok"] is True, report
    finally:
        await a.close()
        await b.close()
        pg.drop_database(name)
