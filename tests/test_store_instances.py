"""PostgreSQL instances on one database: dead instances' holds released once, live ones never."""

from __future__ import annotations

import psycopg
import pytest
import trio

from gatewayd.config import load_config
from gatewayd.directory import Directory
from gatewayd.store.base import Hold, Settlement, UsageQuery
from tests import pg

pytestmark = pytest.mark.skipif(not pg.available(), reason="no PostgreSQL on 127.0.0.1:5432")


@pytest.fixture
async def two_instances():
    from gatewayd.store.postgres import PostgresStore

    name, url = pg.create_database()
    # two instances starting together on an empty database: the advisory lock orders the migrations
    stores: list = []

    async def start(slot):
        stores.append(await PostgresStore.open(url, pool_size=3, slot=slot))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(start, "host|a.sock|0")
        nursery.start_soon(start, "host|b.sock|0")
    try:
        yield url, stores[0], stores[1]
    finally:
        for s in stores:
            await s.close()
        pg.drop_database(name)


def _age_heartbeat(url: str, instance_id: str, seconds: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE instances SET heartbeat_at = clock_timestamp() - make_interval(secs => %s)"
                     " WHERE id = %s", (seconds, instance_id))


async def test_holds_of_a_silent_instance_are_released_once_and_live_ones_never(two_instances):
    url, a, b = two_instances
    directory = Directory(load_config(None, environ={}), a)
    account = await directory.create_account("i@example.com")
    await directory.pay(account, 1_000_000)
    key, _ = await directory.create_key(account, name="k")
    held = await b.reserve(account, key, 400_000, request_id="on-b", model="m", endpoint="chat", stream=True)
    mine = await a.reserve(account, key, 100_000, request_id="on-a", model="m", endpoint="chat", stream=True)
    assert isinstance(held, Hold) and isinstance(mine, Hold)
    assert await a.release_dead_holds() == 0 and await b.release_dead_holds() == 0  # both alive

    _age_heartbeat(url, b.instance_id, 60)  # b stopped beating a minute ago
    results = []

    async def release(store):
        results.append(await store.release_dead_holds())

    async with trio.open_nursery() as nursery:  # two cleanups race for it: released once
        nursery.start_soon(release, a)
        nursery.start_soon(release, a)
    assert sorted(results) == [0, 1]
    rows = {r.request_id: r for r in await a.usage_rows(UsageQuery(account.id), 10)}
    assert rows["on-b"].status == "interrupted" and rows["on-b"].cost_nano == 0
    assert "on-a" not in rows  # the live instance's hold is untouched
    await a.refresh_balance(account)
    assert account.held_nano == 100_000
    assert (await a.audit())["ok"] is True

    # b was alive after all (its database link was cut): it settles; charged, nothing released twice
    await b.settle(held, Settlement(status="ok", http_status=200, cost_nano=7))
    await b.heartbeat()  # and registers again
    await a.settle(mine, Settlement(status="ok", http_status=200, cost_nano=5))
    await a.refresh_balance(account)
    assert (account.credit_nano, account.held_nano) == (1_000_000 - 12, 0)
    assert (await a.audit())["ok"] is True
    assert {i["id"] for i in await a.instances()} == {a.instance_id, b.instance_id}


async def test_a_restart_in_the_same_slot_releases_its_previous_life_at_once(two_instances):
    from gatewayd.store.postgres import PostgresStore

    url, a, b = two_instances
    directory = Directory(load_config(None, environ={}), a)
    account = await directory.create_account("r@example.com")
    await directory.pay(account, 1_000_000)
    key, _ = await directory.create_key(account, name="k")
    await b.reserve(account, key, 300_000, request_id="lost", model="m", endpoint="chat", stream=True)
    # b is killed (no close) and comes back in its slot: its old holds go at once, a's never
    again = await PostgresStore.open(url, pool_size=2, slot=b.slot)
    try:
        rows = await again.usage_rows(UsageQuery(account.id), 10)
        assert [(r.request_id, r.status) for r in rows] == [("lost", "interrupted")]
        assert (await again.audit())["ok"] is True
        assert {i["id"] for i in await again.instances()} == {a.instance_id, again.instance_id}
    finally:
        await again.close()
