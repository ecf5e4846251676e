"""PostgreSQL instances on one database: dead instances' holds released once, live ones never.

"Dead" is judged with ``DEAD_AFTER_S`` shortened to 1 s here (and beats every 0.1 s), so a
shared outage, an instance cut off alone, and the judge's own continuity can be played
out in seconds. Outages go through ``tests/pgproxy.py``.
"""

from __future__ import annotations

import psycopg
import pytest
import trio

from gatewayd.config import load_config
from gatewayd.directory import Directory
from gatewayd.store import pg_instances
from gatewayd.store.base import Hold, Refusal, Settlement, StoreUnavailable, UsageQuery
from tests import pg
from tests.pgproxy import Proxy

# Waits seconds on real sockets and the real clock (a PostgreSQL connection through a black-hole
# proxy, pg_sleep, the feed's ping): trio's MockClock cannot drive a socket read in a worker
# thread, so these are left to the live layer (make test, not make test-unit).

pytestmark = pytest.mark.skipif(not pg.available(), reason="no PostgreSQL on 127.0.0.1:5432")

DEAD_AFTER_S = 1.0


@pytest.fixture(autouse=True)
def quick_judgement(monkeypatch):
    monkeypatch.setattr(pg_instances, "DEAD_AFTER_S", DEAD_AFTER_S)
    monkeypatch.setattr(pg_instances, "MAX_BEAT_GAP_S", 0.5)


@pytest.fixture
def database():
    name, url = pg.create_database(migrated=True)
    yield url
    pg.drop_database(name)


@pytest.fixture
async def two_instances(database, tmp_path):
    from gatewayd.store.postgres import PostgresStore

    # two instances starting together on an empty database: the advisory lock orders the migrations
    stores: dict = {}

    async def start(name):
        stores[name] = await PostgresStore.open(database, pool_size=3, data_dir=tmp_path / name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(start, "a")
        nursery.start_soon(start, "b")
    try:
        yield database, stores["a"], stores["b"]
    finally:
        for s in stores.values():
            await s.close()


async def _funded(store, email: str, paid: int = 1_000_000):
    directory = Directory(load_config(None, environ={}), store)
    account = await directory.create_account(email)
    await directory.pay(account, paid)
    key, _ = await directory.create_key(account, name="k")
    return account, key


async def _hold(store, account, key, amount: int, request_id: str):
    held = await store.reserve(account, key, amount, request_id=request_id, model="m", endpoint="chat", stream=True)
    assert isinstance(held, Hold), held
    return held


async def beat(seconds: float, *stores) -> None:
    """Every store heartbeats every 0.1 s for ``seconds`` (a heartbeat that fails is let be)."""
    end = trio.current_time() + seconds
    while trio.current_time() < end:
        for s in stores:
            try:
                await s.heartbeat()
            except StoreUnavailable:
                pass
        await trio.sleep(0.1)


async def beat_until_judging(*stores) -> None:
    """``beat`` until every store may judge the others (each has heartbeated without a gap for
    more than DEAD_AFTER_S). A heartbeat slower than the test's 0.5 s gap limit (a loaded
    machine, a database still busy with the migrations) restarts a store's count; waiting for
    the count, not for a fixed time, keeps the tests below about the release, not the timing."""
    await beat(DEAD_AFTER_S + 0.3, *stores)
    with trio.fail_after(15):
        while not all(s.may_judge() for s in stores):
            await beat(0.2, *stores)


async def pools_back(*stores) -> None:
    """Until each store's pool answers again: psycopg_pool retries with a backoff that started
    during the cut, so its next attempt may come some seconds after the restore."""
    with trio.fail_after(30):
        for s in stores:
            while True:
                try:
                    await s.ping()
                    break
                except StoreUnavailable:
                    await trio.sleep(0.2)


async def _after(call):
    """``call()`` once it works (a link still holding a connection from before the cut fails once)."""
    with trio.fail_after(10):
        while True:
            try:
                return await call()
            except StoreUnavailable:
                await trio.sleep(0.1)


def _age_heartbeat(url: str, instance_id: str, seconds: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE instances SET heartbeat_at = clock_timestamp() - make_interval(secs => %s)"
                     " WHERE id = %s", (seconds, instance_id))


async def _rows(store, account) -> dict:
    rows = await store.usage_rows(UsageQuery(account.id), 50)
    assert len({r.request_id for r in rows}) == len(rows), rows  # one usage row per request, always
    return {r.request_id: r for r in rows}


async def test_holds_of_a_silent_instance_are_released_once_and_live_ones_never(two_instances):
    url, a, b = two_instances
    account, key = await _funded(a, "i@example.com")
    held = await _hold(b, account, key, 400_000, "on-b")
    mine = await _hold(a, account, key, 100_000, "on-a")
    await beat_until_judging(a, b)  # both alive, and both may judge now
    assert a.may_judge() and b.may_judge()
    assert await a.release_dead_holds() == 0 and await b.release_dead_holds() == 0

    _age_heartbeat(url, b.instance_id, 60)  # b stopped beating a minute ago
    results = []

    async def release(store):
        results.append(await store.release_dead_holds())

    async with trio.open_nursery() as nursery:  # two cleanups race for it: released once
        nursery.start_soon(release, a)
        nursery.start_soon(release, a)
    assert sorted(results) == [0, 1]
    rows = await _rows(a, account)
    # b may be alive behind a partition: its hold is charged provisionally, not handed out again
    assert rows["on-b"].status == "unsettled" and rows["on-b"].cost_nano == 400_000
    assert rows["on-b"].hold_nano == 400_000  # the provisional charge is the hold
    assert "on-a" not in rows  # the live instance's hold is untouched
    await a.refresh_balance(account)
    assert (account.credit_nano, account.held_nano) == (1_000_000 - 400_000, 100_000)
    assert (await a.audit())["ok"] is True

    # b was alive after all (its database link was cut): it settles. Its unsettled row becomes
    # the real outcome (one row for the request), the provisional charge corrected to it;
    # nothing released twice
    await b.settle(held, Settlement(status="ok", http_status=200, input_tokens=3, output_tokens=4, cost_nano=7))
    await b.heartbeat()  # and registers again
    await a.settle(mine, Settlement(status="ok", http_status=200, cost_nano=5))
    rows = await _rows(a, account)
    assert sorted(rows) == ["on-a", "on-b"]
    assert (rows["on-b"].status, rows["on-b"].cost_nano, rows["on-b"].output_tokens) == ("ok", 7, 4)
    await a.refresh_balance(account)
    assert (account.credit_nano, account.held_nano) == (1_000_000 - 12, 0)
    assert (await a.audit())["ok"] is True
    assert {i["id"] for i in await a.instances()} == {a.instance_id, b.instance_id}
    # a settlement retried after that (its answer lost) changes nothing
    held.settled = False
    await b.settle(held, Settlement(status="ok", http_status=200, cost_nano=7))
    await a.refresh_balance(account)
    assert account.credit_nano == 1_000_000 - 12 and len(await _rows(a, account)) == 2


async def test_a_silent_instances_hold_cannot_be_spent_again_and_its_late_charge_corrects_it(two_instances):
    """b looked dead: its hold became a provisional charge of the held amount, so the money
    cannot be held again through a (issue 25: no overdraft); b settles after all, and its
    row becomes the real outcome, the provisional charge corrected to the real cost."""
    url, a, b = two_instances
    account, key = await _funded(a, "late@example.com", paid=1_000)
    held = await _hold(b, account, key, 1_000, "on-b")
    await beat_until_judging(a, b)
    _age_heartbeat(url, b.instance_id, 60)
    assert await a.release_dead_holds() == 1
    refused = await a.reserve(account, key, 1_000, request_id="on-a", model="m", endpoint="chat", stream=False)
    assert isinstance(refused, Refusal), "the silent instance's money was handed out again"
    await b.settle(held, Settlement(status="ok", http_status=200, output_tokens=4, cost_nano=600))
    rows = await _rows(a, account)
    assert (rows["on-b"].status, rows["on-b"].cost_nano, rows["on-b"].hold_nano) == ("ok", 600, 1_000)
    late = await a._read(lambda tx: tx.rows("SELECT request_id FROM usage WHERE charged_after_release = 1"))
    assert late == []
    report = await a.audit()
    [acct] = [x for x in report["accounts"] if x["account_id"] == account.id]
    assert acct["balance_nano"] == 400 and report["ok"] is True, report


@pytest.mark.live
@pytest.mark.slow
async def test_after_a_shared_outage_the_first_instance_back_releases_no_live_holds(database, tmp_path):
    """The database is away longer than DEAD_AFTER_S for everyone; b's maintenance runs first
    when it is back. b must not take a's silence for death: a could not beat either."""
    from gatewayd.store.postgres import PostgresStore

    proxy = Proxy()
    via = database.replace(":5432/", f":{proxy.port}/")
    a = await PostgresStore.open(via, pool_size=2, data_dir=tmp_path / "a")
    b = await PostgresStore.open(via, pool_size=2, data_dir=tmp_path / "b")
    try:
        account, key = await _funded(a, "outage@example.com")
        stream = await _hold(a, account, key, 300_000, "a-stream")
        await beat(DEAD_AFTER_S + 0.3, a, b)
        assert b.may_judge()
        proxy.cut()
        await beat(DEAD_AFTER_S * 2, a, b)  # every heartbeat fails
        assert not a.may_judge() and not b.may_judge()
        proxy.restore()
        await pools_back(a, b)
        await b.maintain_once()  # b is back first: it beats, then looks for the dead
        assert await b.release_dead_holds() == 0
        await beat(DEAD_AFTER_S + 0.3, a, b)  # now b has beaten long enough, and so has a
        assert b.may_judge() and await b.release_dead_holds() == 0
        assert await _rows(b, account) == {}  # nothing was recorded interrupted
        await b.refresh_balance(account)
        assert account.held_nano == 300_000  # a's stream still holds its money
        await a.settle(stream, Settlement(status="ok", http_status=200, cost_nano=11))
        rows = await _rows(a, account)
        assert [(r.request_id, r.status) for r in rows.values()] == [("a-stream", "ok")]
        assert (await a.audit())["ok"] is True
    finally:
        for s in (a, b):
            await s.close()
        proxy.close()


async def test_an_instance_cut_off_alone_is_fenced_charged_provisionally_and_corrected(database, tmp_path):
    """a is cut off alone with a stream holding 600,000 of 1,000,000. It fences itself before b
    may judge it dead; b then charges the hold provisionally (the money is not handed out
    again: b cannot hold 900,000); a, back, must heartbeat before it holds again, and its
    stream's settlement corrects the provisional charge to the real cost."""
    from gatewayd.store.pg_instances import Fenced
    from gatewayd.store.postgres import PostgresStore

    proxy = Proxy()
    a = await PostgresStore.open(database.replace(":5432/", f":{proxy.port}/"), pool_size=2, data_dir=tmp_path / "a")
    b = await PostgresStore.open(database, pool_size=2, data_dir=tmp_path / "b")
    try:
        account, key = await _funded(b, "alone@example.com", paid=1_000_000)
        stream = await _hold(a, account, key, 600_000, "a-stream")
        await a.heartbeat()
        proxy.cut()  # a alone loses the database; b beats all along
        async with trio.open_nursery() as nursery:
            nursery.start_soon(beat, 3600, b)
            fenced_at = released_at = None
            with trio.fail_after(DEAD_AFTER_S * 5 + 5):
                while released_at is None:
                    if fenced_at is None and a.fenced:
                        fenced_at = trio.current_time()
                    if b.may_judge() and await b.release_dead_holds():
                        released_at = trio.current_time()
                    await trio.sleep(0.02)
            assert fenced_at is not None and fenced_at < released_at  # fenced before anyone could release
            with pytest.raises(Fenced):
                await a.reserve(account, key, 1, request_id="a-fenced", model="m", endpoint="chat", stream=False)
            rows = await _rows(b, account)
            assert (rows["a-stream"].status, rows["a-stream"].cost_nano) == ("unsettled", 600_000)
            refused = await b.reserve(account, key, 900_000, request_id="b-too-much", model="m", endpoint="chat",
                                      stream=False)
            assert isinstance(refused, Refusal) and refused.what == "account"
            more = await _hold(b, account, key, 350_000, "b-after")
            proxy.restore()
            await pools_back(a)
            with pytest.raises(Fenced):  # reachable again, but its lease is not renewed yet
                await a.reserve(account, key, 1, request_id="a-early", model="m", endpoint="chat", stream=False)
            await _after(a.heartbeat)  # registers again: a live instance, whose holds b leaves alone
            late = await _hold(a, account, key, 40_000, "a-late")
            assert b.may_judge() and await b.release_dead_holds() == 0
            assert "a-late" not in await _rows(b, account)
            nursery.cancel_scope.cancel()
        # a's stream ends: the unsettled row becomes the real outcome, the charge corrected to it
        await a.settle(stream, Settlement(status="ok", http_status=200, output_tokens=9, cost_nano=400_000))
        await b.settle(more, Settlement(status="ok", http_status=200, cost_nano=1_000))
        await a.settle(late, Settlement(status="ok", http_status=200, cost_nano=10))
        rows = await _rows(b, account)
        assert {rid: (r.status, r.cost_nano) for rid, r in rows.items()} == {
            "a-stream": ("ok", 400_000), "b-after": ("ok", 1_000), "a-late": ("ok", 10)}
        await b.refresh_balance(account)
        assert (account.credit_nano, account.held_nano) == (1_000_000 - 401_010, 0)
        await b.refresh_key(key)
        assert key.spent_nano == 401_010
        assert (await b.audit())["ok"] is True
    finally:
        for s in (a, b):
            await s.close()
        proxy.close()


async def test_a_restart_refunds_the_provisional_charges_of_its_previous_life(two_instances, tmp_path):
    """b, judged dead by its silence, had its hold charged provisionally; then it is known dead
    (its next start reclaims its slot): the charge is refunded and the row is interrupted."""
    from gatewayd.store.postgres import PostgresStore

    url, a, b = two_instances
    account, key = await _funded(a, "refund@example.com")
    await _hold(b, account, key, 300_000, "lost")
    await beat(DEAD_AFTER_S + 0.3, a)
    _age_heartbeat(url, b.instance_id, 60)
    assert await a.release_dead_holds() == 1
    await a.refresh_balance(account)
    assert account.credit_nano == 1_000_000 - 300_000
    b.slot.release()  # b was really dead: the kernel drops its lock
    again = await PostgresStore.open(url, pool_size=2, data_dir=tmp_path / "b")
    try:
        rows = await _rows(again, account)
        assert {rid: (r.status, r.cost_nano) for rid, r in rows.items()} == {"lost": ("interrupted", 0)}
        await again.refresh_balance(account)
        assert (account.credit_nano, account.held_nano) == (1_000_000, 0)
        await again.refresh_key(key)
        assert key.spent_nano == 0
        assert (await again.audit())["ok"] is True
    finally:
        await again.close()


async def test_a_newcomer_never_releases_a_live_instances_holds(two_instances, tmp_path):
    """A second process started on the same data dir (same host, same admin socket, same
    worker number: everything the old slot name was made of) takes another slot."""
    from gatewayd.store.postgres import PostgresStore

    url, a, _ = two_instances
    account, key = await _funded(a, "slot@example.com")
    await _hold(a, account, key, 300_000, "running")
    newcomer = await PostgresStore.open(url, pool_size=2, data_dir=tmp_path / "a")
    try:
        assert (a.slot.number, newcomer.slot.number) == (0, 1)
        assert await _rows(newcomer, account) == {}
        await newcomer.refresh_balance(account)
        assert account.held_nano == 300_000
        assert newcomer.instance_id in {i["id"] for i in await newcomer.instances()}
    finally:
        await newcomer.close()
    assert (tmp_path / "a" / "instance-1.id").read_text().strip() == newcomer.instance_id


async def test_a_restart_in_the_same_slot_releases_its_previous_life_at_once(two_instances, tmp_path):
    from gatewayd.store.postgres import PostgresStore

    url, a, b = two_instances
    account, key = await _funded(a, "r@example.com")
    await _hold(b, account, key, 300_000, "lost")
    await _hold(a, account, key, 100_000, "kept")
    b.slot.release()  # b is killed: the kernel drops its lock (nothing else of it runs)
    again = await PostgresStore.open(url, pool_size=2, data_dir=tmp_path / "b")
    try:  # released by the start itself, before any maintenance round (and b's heartbeat is fresh)
        assert again.slot.number == 0 and again.slot.previous == b.instance_id
        rows = await again.usage_rows(UsageQuery(account.id), 10)
        assert [(r.request_id, r.status) for r in rows] == [("lost", "interrupted")]
        await again.refresh_balance(account)
        assert account.held_nano == 100_000  # a's hold, untouched
        assert (await again.audit())["ok"] is True
        assert {i["id"] for i in await again.instances()} == {a.instance_id, again.instance_id}
    finally:
        await again.close()
