"""The PostgreSQL store behind a network partition: the database goes silent, it does not refuse.

``tests/pgproxy.py``'s ``partition()`` accepts connections and forwards nothing, on the
connections open and on every new one, until ``heal()``. A call that needs the database
must still end within its deadline (the pool's connection check and the statement
included: the watchdog shuts a silent connection's socket, and the connection is thrown
away rather than lent again); the pool must come back within seconds of the heal; and a
settlement written across the partition lands exactly once.
"""

from __future__ import annotations

import time

import pytest
import trio

from gatewayd.store.base import Hold, Settlement, StoreUnavailable, UsageQuery
from tests import pg
from tests.pgproxy import Proxy
from tests.test_store_outage import _funded, _reserve

# Waits seconds on real sockets and the real clock (a PostgreSQL connection through a black-hole
# proxy, pg_sleep, the feed's ping): trio's MockClock cannot drive a socket read in a worker
# thread, so these are left to the live layer (make test, not make test-unit).

pytestmark = pytest.mark.skipif(not pg.available(), reason="no PostgreSQL on 127.0.0.1:5432")

REQUEST_BOUND_S = 3.0  # the documented bound for a request's 503


@pytest.fixture
def database():
    name, url = pg.create_database(migrated=True)
    yield url
    pg.drop_database(name)


async def _timed_reserves(store, account, key, prefix: str, count: int) -> list[float]:
    """``count`` reserves at once; each must fail with ``StoreUnavailable``; their durations."""
    took: list[float] = []

    async def one(i: int) -> None:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await _reserve(store, account, key, 1_000, f"{prefix}-{i}")
        took.append(time.monotonic() - started)

    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(one, i)
    return took


@pytest.mark.live
@pytest.mark.slow
async def test_a_black_hole_fails_every_request_within_the_deadline_and_the_pool_recovers(database):
    from gatewayd.store.postgres import PostgresStore

    proxy = Proxy()
    store = await PostgresStore.open(database.replace(":5432/", f":{proxy.port}/"), pool_size=2)
    try:
        account, key = await _funded(store)
        # warm: both pooled connections in use once, then a hold that a settlement must carry across
        held = [await _reserve(store, account, key, 10_000, f"warm-{i}") for i in range(2)]
        for h in held:
            await store.settle(h, Settlement(status="ok", http_status=200, cost_nano=1))
        across = await _reserve(store, account, key, 50_000, "across")
        assert isinstance(across, Hold)

        assert proxy.partition() >= 2  # the pool's connections and the heartbeat's go silent
        first = await _timed_reserves(store, account, key, "first", 8)  # silent pooled connections
        second = await _timed_reserves(store, account, key, "second", 4)  # new connections, black-holed too
        print(f"black hole: 503 after {max(first):.2f} s (pooled connections), {max(second):.2f} s (new ones)")
        assert max(first) < REQUEST_BOUND_S and max(second) < REQUEST_BOUND_S

        settled = trio.Event()

        async def settle_across() -> None:  # a request that finished upstream during the partition
            with trio.CancelScope(shield=True):
                await store.settle(across, Settlement(status="ok", http_status=200, cost_nano=7))
            settled.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(settle_across)
            await trio.sleep(3)
            assert not settled.is_set()
            proxy.heal()
            healed = trio.current_time()
            with trio.fail_after(20):
                while True:
                    try:
                        back = await _reserve(store, account, key, 1_000, "after")
                        break
                    except StoreUnavailable:
                        await trio.sleep(0.1)
            recovered = trio.current_time() - healed
            print(f"the pool answered {recovered:.1f} s after the heal")
            with trio.fail_after(30):
                await settled.wait()
        await store.settle(back, Settlement(status="ok", http_status=200, cost_nano=3))

        # the threads given up on have all come back (none is stuck on a silent socket)
        with trio.fail_after(5):
            while store._threads.borrowed_tokens:
                await trio.sleep(0.05)
        # any hold that landed while its answer was lost is released by maintenance
        with trio.fail_after(20):
            while True:
                await store.maintain_once()
                await store.refresh_balance(account)
                if account.held_nano == 0:
                    break
                await trio.sleep(0.2)
        rows = {r.request_id: r for r in await store.usage_rows(UsageQuery(account.id), 50)}
        assert {rid: (r.status, r.cost_nano) for rid, r in rows.items()} == {
            "warm-0": ("ok", 1), "warm-1": ("ok", 1), "across": ("ok", 7), "after": ("ok", 3)}
        assert account.credit_nano == 1_000_000 - 12
        assert (await store.audit())["ok"] is True
    finally:
        await store.close()
        proxy.close()


async def test_a_call_cancelled_by_its_caller_leaves_no_hold_behind(database):
    """A client that leaves while its hold waits on a silent database: the reserve is given up
    at once (not after the deadline), and a hold that lands anyway is released with no row."""
    from gatewayd.store.postgres import PostgresStore

    proxy = Proxy()
    store = await PostgresStore.open(database.replace(":5432/", f":{proxy.port}/"), pool_size=2)
    try:
        account, key = await _funded(store)
        await store.settle(await _reserve(store, account, key, 1_000, "warm"),
                           Settlement(status="ok", http_status=200, cost_nano=1))
        proxy.partition()
        with trio.move_on_after(0.3):
            await _reserve(store, account, key, 5_000, "gone")
        assert "gone" in store._unknown
        proxy.heal()
        with trio.fail_after(5):  # the thread given up on ends by its deadline (it may land the hold)
            while store._threads.borrowed_tokens:
                await trio.sleep(0.05)
        with trio.fail_after(20):
            while True:
                try:
                    await store.maintain_once()
                    await store.refresh_balance(account)
                    if account.held_nano == 0:
                        break
                except StoreUnavailable:
                    pass
                await trio.sleep(0.2)
        rows = await store.usage_rows(UsageQuery(account.id), 10)
        assert [r.request_id for r in rows] == ["warm"]
        assert (await store.audit())["ok"] is True
    finally:
        await store.close()
        proxy.close()
