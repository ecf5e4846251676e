"""The PostgreSQL store while the database is away or slow, through ``tests/pgproxy.py``.

A request that cannot reach the database gets its ``StoreUnavailable`` (the 503) within
``POOL_WAIT_S``, however many wait with it; settlements and heartbeats do not queue behind
requests.
"""

from __future__ import annotations

import pytest
import trio

from gatewayd.config import load_config
from gatewayd.directory import Directory
from gatewayd.store.base import Hold, Settlement, StoreUnavailable
from tests import pg
from tests.pgproxy import Proxy

pytestmark = pytest.mark.skipif(not pg.available(), reason="no PostgreSQL on 127.0.0.1:5432")


@pytest.fixture
def database():
    name, url = pg.create_database()
    yield url
    pg.drop_database(name)


@pytest.fixture
def proxy():
    p = Proxy()
    yield p
    p.close()


async def _funded(store, email: str = "o@example.com"):
    directory = Directory(load_config(None, environ={}), store)
    account = await directory.create_account(email)
    await directory.pay(account, 1_000_000)
    key, _ = await directory.create_key(account, name="k")
    return account, key


async def _reserve(store, account, key, amount, request_id):
    return await store.reserve(account, key, amount, request_id=request_id, model="m", endpoint="chat", stream=False)


async def test_every_waiting_request_gets_its_503_within_the_bound(database, proxy):
    """8 requests on a pool of 2 while the database is cut: all answered within POOL_WAIT_S
    (not 3, 6, 9, 12 s as they would if each waited its turn for the pool's 3 s)."""
    from gatewayd.store.postgres import POOL_WAIT_S, PostgresStore

    store = await PostgresStore.open(database.replace(":5432/", f":{proxy.port}/"), pool_size=2)
    try:
        account, key = await _funded(store)
        proxy.cut()
        waited: list[float] = []

        async def one(i: int) -> None:
            start = trio.current_time()
            with pytest.raises(StoreUnavailable):
                await _reserve(store, account, key, 10, f"r{i}")
            waited.append(trio.current_time() - start)

        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(one, i)
        print(f"503s after {', '.join(f'{w:.1f}' for w in sorted(waited))} s")
        assert len(waited) == 8 and max(waited) < POOL_WAIT_S + 1.0
        proxy.restore()
        assert isinstance(await _reserve(store, account, key, 10, "after"), Hold)  # no restart needed
    finally:
        await store.close()


async def test_settlements_and_heartbeats_do_not_queue_behind_requests(database):
    from gatewayd.store.postgres import PostgresStore

    store = await PostgresStore.open(database, pool_size=2)
    try:
        account, key = await _funded(store)
        hold = await _reserve(store, account, key, 100, "settles")
        async with trio.open_nursery() as nursery:
            for _ in range(6):  # 2 run for 1 s, 4 wait for them: 2 s of backlog
                nursery.start_soon(store._read, lambda tx: tx.one("SELECT pg_sleep(1)"))
            await trio.sleep(0.2)
            start = trio.current_time()
            await store.heartbeat()
            beat = trio.current_time() - start
            start = trio.current_time()
            await store.settle(hold, Settlement(status="ok", http_status=200, cost_nano=5))
            settled = trio.current_time() - start
        print(f"heartbeat {beat * 1000:.0f} ms, settlement {settled * 1000:.0f} ms behind a 2 s backlog")
        assert beat < 0.5  # its own connection
        assert settled < 1.5  # waited for a connection (the running requests end at 1 s), not for the backlog
        assert (await store.audit())["ok"] is True
    finally:
        await store.close()
