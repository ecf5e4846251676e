"""The change feed: two stores (two instances) on one fresh PostgreSQL database, each with its
own directory (key cache). Changes made through one directory reach the other's cache, in
place, within the propagation bound; charges do not notify; a rolled-back change never does.
"""

from __future__ import annotations

import time

import pytest
import trio

from gatewayd.changes import ChangeFollower
from gatewayd.config import load_config
from gatewayd.directory import Directory
from gatewayd.store.base import Change
from tests import pg
from tests.faults import LIVENESS_S
from tests.live import postgres_ready

# Waits seconds on real sockets and the real clock (a PostgreSQL connection through a black-hole
# proxy, pg_sleep, the feed's ping): trio's MockClock cannot drive a socket read in a worker
# thread, so these are left to the live layer (make test, not make test-unit).

needs_postgres = pytest.mark.skipif(not postgres_ready(), reason="no PostgreSQL on 127.0.0.1:5432 (.ci/run starts it)")

BOUND_S = 1.0


def test_change_payloads():
    assert Change.parse("key:key_1") == Change("key", "key_1")
    assert Change.parse("account:acct_1") == Change("account", "acct_1")
    assert Change.parse("key:") is None and Change.parse("nonsense") is None and Change.parse("user:x") is None


async def until(check, what: str) -> float:
    start = trio.current_time()
    while not check():
        if trio.current_time() - start > BOUND_S:
            raise AssertionError(f"{what}: not applied within {BOUND_S} s")
        await trio.sleep(0.002)
    took = trio.current_time() - start
    print(f"{what}: {took * 1000:.1f} ms")
    return took


@pytest.fixture
async def two_instances():
    from gatewayd.store.postgres import PostgresStore

    name, url = pg.create_database(migrated=True)
    config = load_config(environ={})
    stores = [await PostgresStore.open(url, pool_size=2), await PostgresStore.open(url, pool_size=2)]
    try:
        directories = [Directory(config, s) for s in stores]
        for d in directories:
            await d.load()
        followers = [ChangeFollower(s, d) for s, d in zip(stores, directories)]
        async with trio.open_nursery() as nursery:
            for f in followers:
                await nursery.start(f.run)
            yield directories, followers
            nursery.cancel_scope.cancel()
    finally:
        for s in stores:
            await s.close()
        pg.drop_database(name)


@needs_postgres
async def test_changes_on_one_reach_the_other_in_place(two_instances):
    (a, b), (_, follow_b) = two_instances
    account = await a.create_account("feed@example.com", "Feed", "UTC")
    await until(lambda: "feed@example.com" in b.accounts_by_email, "new account")
    key, secret = await a.create_key(account, name="k")
    await until(lambda: b.key_for_secret(secret) is not None, "new key")
    cached = b.key_for_secret(secret)  # the object requests on b hold
    await a.set_key_status(key, "disabled")
    await until(lambda: cached.status == "disabled", "disable")
    await a.set_key_status(key, "enabled")
    await until(lambda: cached.status == "enabled", "enable")
    await a.update_key(key, {"models": ["gpt-4.1"], "spend_limit_nano": 5, "name": "renamed"})
    await until(lambda: cached.models == frozenset({"gpt-4.1"}) and cached.spend_limit_nano == 5, "edit")
    assert cached.name == "renamed" and b.key_for_secret(secret) is cached
    await a.pay(account, 3_000_000_000, "feed test")
    b_account = b.accounts[account.id]
    await until(lambda: b_account.total_paid_nano == 3_000_000_000, "payment")
    await a.set_groups(account, [])
    await until(lambda: b_account.groups == (), "groups")
    await a.update_account(account, timezone="Asia/Tokyo")
    await until(lambda: b_account.timezone == "Asia/Tokyo", "time zone")
    await a.set_max_concurrent(account, 7)  # the caps on requests in flight (issue 20)
    await until(lambda: b_account.max_concurrent == 7, "account's max_concurrent")
    await a.update_key(key, {"max_concurrent": 2})
    await until(lambda: cached.max_concurrent == 2, "key's max_concurrent")
    await a.set_key_status(key, "deleted")
    await until(lambda: cached.status == "deleted", "revoke")
    applied = follow_b.applied
    await trio.sleep(0.3)
    assert follow_b.applied == applied  # nothing more trickles in after the last change


@needs_postgres
async def test_a_full_reload_never_brings_a_revoked_key_back(two_instances):
    (a, b), (_, follow_b) = two_instances
    account = await a.create_account("revoked@example.com", "", "UTC")
    key, secret = await a.create_key(account, name="k")
    await until(lambda: b.key_for_secret(secret) is not None, "new key")
    await a.set_key_status(key, "deleted")
    await until(lambda: b.key_for_secret(secret).status == "deleted", "revoke")
    await follow_b.apply(Change("all"))  # what a reconnection does
    assert b.key_for_secret(secret).status == "deleted"
    assert len(b.keys_by_account[account.id]) == 1  # reloads update in place, never duplicate


@pytest.mark.live
@pytest.mark.slow
@needs_postgres
async def test_propagation_is_measured_under_a_burst(two_instances):
    """50 keys made on a as fast as it can: each usable on b within the bound of its commit."""
    (a, b), _ = two_instances
    account = await a.create_account("burst@example.com", "", "UTC")
    committed: dict[str, float] = {}
    seen: dict[str, float] = {}
    done = trio.Event()

    async def watch():
        while not done.is_set() or len(seen) < len(committed):
            for secret in committed.keys() - seen.keys():
                if b.key_for_secret(secret) is not None:
                    seen[secret] = time.monotonic()
            await trio.sleep(0.001)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            for i in range(50):
                _, secret = await a.create_key(account, name=f"k{i}")
                committed[secret] = time.monotonic()
            done.set()
    lag = sorted(seen[s] - committed[s] for s in committed)
    print(f"burst of 50 keys: lag p50 {lag[25] * 1000:.1f} ms, worst {lag[-1] * 1000:.1f} ms")
    assert lag[-1] < BOUND_S


@needs_postgres
async def test_an_instance_that_hears_its_own_creations_caches_each_once(two_instances):
    """The feed can deliver a new account or key to the creating instance before ``create_*``
    resumes after its commit: the cache still holds one object per id."""
    (a, _), (follow_a, _) = two_instances
    store = a.store
    insert_account, insert_key = store.insert_account, store.insert_key

    async def account_then_feed(account):
        await insert_account(account)
        await follow_a.apply(Change("account", account.id))  # heard before create_account resumes

    async def key_then_feed(key, max_keys):
        await insert_key(key, max_keys)
        await follow_a.apply(Change("key", key.id))

    store.insert_account, store.insert_key = account_then_feed, key_then_feed
    try:
        account = await a.create_account("own@example.com", "", "UTC")
        made = [await a.create_key(account, name=f"k{i}") for i in range(3)]
    finally:
        del store.insert_account, store.insert_key
    assert a.accounts[account.id] is account and a.account("own@example.com") is account
    assert len(a.keys_by_account[account.id]) == 3
    assert all(a.keys[key.id] is key and a.key_for_secret(secret) is key for key, secret in made)


@pytest.mark.live
@pytest.mark.slow
@needs_postgres
async def test_a_feed_connection_that_dies_silently_is_noticed_and_replaced():
    """A NAT or load balancer drops the idle LISTEN connection without a FIN or RST: nothing
    arrives, nothing fails. The feed's ping notices within FEED_PING_S + FEED_PING_TIMEOUT_S,
    reconnects and reloads everything, so a change made meanwhile still arrives."""
    from gatewayd.store.postgres import PostgresStore
    from tests.pgproxy import Proxy

    name, url = pg.create_database(migrated=True)
    proxy = Proxy()
    config = load_config(environ={})
    writer, reader = await PostgresStore.open(url, pool_size=2), await PostgresStore.open(url, pool_size=2)
    reader.url = url.replace(":5432/", f":{proxy.port}/")  # only the feed's connection goes through the proxy
    try:
        a, b = Directory(config, writer), Directory(config, reader)
        for d in (a, b):
            await d.load()
        follower = ChangeFollower(reader, b)
        async with trio.open_nursery() as nursery:
            await nursery.start(follower.run)
            account = await a.create_account("before@example.com", "", "UTC")
            await until(lambda: "before@example.com" in b.accounts_by_email, "change before the silence")
            assert proxy.blackhole() == 1  # the feed's connection: silent from now on, never closed
            start = time.monotonic()
            _, secret = await a.create_key(account, name="made while the feed was deaf")
            while b.key_for_secret(secret) is None:  # the ping notices (FEED_PING_S + FEED_PING_TIMEOUT_S)
                assert time.monotonic() - start < LIVENESS_S, "the feed never noticed its dead connection"
                await trio.sleep(0.05)
            print(f"silent feed connection replaced, change applied after {time.monotonic() - start:.1f} s")
            nursery.cancel_scope.cancel()
    finally:
        for s in (writer, reader):
            await s.close()
        proxy.close()
        pg.drop_database(name)
