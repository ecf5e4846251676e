"""Per-model rate limits: the sliding-log rule in memory, in the real Redis, and Redis going away.

Redis tests use the machine's Redis on 127.0.0.1:6379 under a key prefix of their own
(other test runs share that Redis). "Redis down" is a port nothing listens on, a
listener that never answers, and a proxy that is cut while in use.
"""

from __future__ import annotations

import os
import socket

import attrs
import coredis
import pytest
import trio

from gatewayd import ratelimit
from gatewayd.config import RateLimit, load_config
from gatewayd.errors import GatewayError
from gatewayd.ratelimit import (
    MemoryWindows,
    RateLimiter,
    RedisUnavailable,
    RedisWindows,
    StoreWindows,
    open_rate_limiter,
)
from tests.live import postgres_ready

REDIS_URL = "redis://127.0.0.1:6379/0"


def redis_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


needs_redis = pytest.mark.skipif(not redis_up(), reason="no Redis on 127.0.0.1:6379 (.ci/run starts one)")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limited_model(requests: int = 2, minutes: int = 1):
    model = load_config(environ={}).models["gpt-4.1-mini"]
    return attrs.evolve(model, rate_limit=RateLimit(requests=requests, minutes=minutes))


def prefix() -> str:
    return f"gatewayd-test-{os.getpid()}-{os.urandom(4).hex()}:"


async def clear(prefix_: str) -> None:
    async with coredis.Redis.from_url(REDIS_URL) as client:
        keys = [k async for k in client.scan_iter(match=prefix_ + "*")]
        if keys:
            await client.delete(keys)


# -- the rule, in memory ---------------------------------------------------------------


def test_memory_window_is_a_sliding_log():
    clock = Clock()
    windows = MemoryWindows(clock)
    assert windows.take_now("a", "m", 2, 60) is None
    clock.now += 30
    assert windows.take_now("a", "m", 2, 60) is None
    assert windows.take_now("a", "m", 2, 60) == pytest.approx(30)  # the first leaves the window in 30 s
    assert windows.take_now("b", "m", 2, 60) is None  # per account
    assert windows.take_now("a", "other", 2, 60) is None  # per model
    clock.now += 30  # the first request is exactly 60 s old: out of the window
    assert windows.take_now("a", "m", 2, 60) is None
    assert windows.take_now("a", "m", 2, 60) == pytest.approx(30)


async def test_refusal_is_the_specs_429_with_retry_after():
    clock = Clock()
    limiter = RateLimiter(MemoryWindows(clock))
    model = limited_model(requests=1, minutes=2)
    await limiter.check("acct", model)
    with pytest.raises(GatewayError) as info:
        await limiter.check("acct", model)
    error = info.value
    assert error.status == 429 and error.code == "rate_limit_exceeded"
    assert str(error.message).startswith("Rate limit reached: at most 1 requests per 2 minutes")
    assert error.headers["Retry-After"] == "120"  # capped at 120, where openai-python still retries


async def test_models_without_a_limit_are_never_counted():
    windows = MemoryWindows(Clock())
    limiter = RateLimiter(windows)
    model = attrs.evolve(limited_model(), rate_limit=None)
    for _ in range(100):
        await limiter.check("acct", model)
    assert windows._seen == {}


# -- the real Redis ----------------------------------------------------------------------


@needs_redis
async def test_redis_log_is_shared_by_every_limiter_on_it():
    """Two limiters (two instances) on one Redis: 20 concurrent requests, exactly 2 admitted."""
    p = prefix()
    try:
        async with coredis.Redis.from_url(REDIS_URL) as one, coredis.Redis.from_url(REDIS_URL) as two:
            limiters = [RedisWindows(one, p), RedisWindows(two, p)]
            await one.ping()  # connected before the race: the first connection on a busy machine is slow
            await two.ping()
            results = []

            async def attempt(i):
                results.append(await limiters[i % 2].take("acct", "m", 2, 60))

            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(attempt, i)
            assert results.count(None) == 2
            assert all(0 < w <= 60 for w in results if w is not None)
            assert await one.zcard(f"{p}rl:acct:m") == 2
            assert 0 < await one.pttl(f"{p}rl:acct:m") <= 60_000  # the log expires with its window
            assert await limiters[0].take("other-acct", "m", 2, 60) is None
    finally:
        await clear(p)


@needs_redis
async def test_redis_window_slides_on_redis_clock():
    p = prefix()
    try:
        async with coredis.Redis.from_url(REDIS_URL) as client:
            windows = RedisWindows(client, p)
            assert await windows.take("acct", "m", 1, 1) is None
            wait = await windows.take("acct", "m", 1, 1)
            assert wait is not None and 0 < wait <= 1
            await trio.sleep(wait + 0.05)
            assert await windows.take("acct", "m", 1, 1) is None
    finally:
        await clear(p)


# -- Redis down --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_redis_refusing_connections_falls_back_to_the_shared_log(caplog):
    clock = Clock()
    fallback = MemoryWindows(clock)
    async with coredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", retry_policy=coredis.retry.NoRetryPolicy(),
                                      connect_timeout=0.25) as dead:
        with pytest.raises(RedisUnavailable):
            await RedisWindows(dead, prefix()).take("acct", "m", 2, 60)
        limiter = RateLimiter(RedisWindows(dead, prefix()), fallback=fallback, clock=clock)
        model = limited_model(requests=2)
        await limiter.check("acct", model)
        await limiter.check("acct", model)
        with pytest.raises(GatewayError) as info:
            await limiter.check("acct", model)
        assert info.value.status == 429
        assert limiter.redis_down
        assert sum("redis unavailable" in r.getMessage() for r in caplog.records) == 1  # said once, not per request


async def test_silent_redis_costs_at_most_the_timeout(autojump_clock):
    """A Redis that accepts and never answers: the request waits REDIS_TIMEOUT_S once, then the
    fallback answers without waiting until REDIS_RETRY_S has passed."""
    clock = Clock()
    with socket.socket() as blackhole:
        blackhole.bind(("127.0.0.1", 0))
        blackhole.listen(64)
        url = f"redis://127.0.0.1:{blackhole.getsockname()[1]}/0"
        async with coredis.Redis.from_url(url, retry_policy=coredis.retry.NoRetryPolicy()) as silent:
            limiter = RateLimiter(RedisWindows(silent, prefix()), fallback=MemoryWindows(clock), clock=clock)
            model = limited_model(requests=5)
            start = trio.current_time()
            await limiter.check("acct", model)
            first = trio.current_time() - start
            assert ratelimit.REDIS_TIMEOUT_S <= first < ratelimit.REDIS_TIMEOUT_S + 0.5
            start = trio.current_time()
            for _ in range(4):
                await limiter.check("acct", model)
            assert trio.current_time() - start < 0.05
            with pytest.raises(GatewayError):
                await limiter.check("acct", model)  # the fallback counted all five


class Proxy:
    """A TCP proxy to Redis that the test can cut: every connection closed, new ones refused."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.cut = trio.Event()
        self.port: int | None = None

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED):
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, self.handle, listeners)
            task_status.started()
            await self.cut.wait()
            nursery.cancel_scope.cancel()

    async def handle(self, client):
        async with client, await trio.open_tcp_stream("127.0.0.1", self.target_port) as server:
            async def pump(src, dst):
                async for data in src:
                    await dst.send_all(data)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(pump, client, server)
                nursery.start_soon(pump, server, client)


@needs_redis
async def test_redis_cut_mid_traffic_and_back(caplog):
    clock = Clock()
    p = prefix()
    fallback = MemoryWindows(clock)
    try:
        async with trio.open_nursery() as nursery:
            proxy = Proxy(6379)
            await nursery.start(proxy.serve)
            url = f"redis://127.0.0.1:{proxy.port}/0"
            async with coredis.Redis.from_url(url, retry_policy=coredis.retry.NoRetryPolicy(),
                                              connect_timeout=0.25) as client:
                limiter = RateLimiter(RedisWindows(client, p), fallback=fallback, clock=clock)
                model = limited_model(requests=3)
                await limiter.check("acct", model)  # counted in Redis
                assert not limiter.redis_down and fallback._seen == {}
                proxy.cut.set()
                await trio.sleep(0.05)
                await limiter.check("acct", model)  # Redis gone: counted by the fallback
                assert limiter.redis_down
                assert len(fallback._seen[("acct", model.id)]) == 1
                # once REDIS_RETRY_S has passed, Redis is tried again (here still down: fallback again)
                clock.now += ratelimit.REDIS_RETRY_S + 1
                await limiter.check("acct", model)
                assert len(fallback._seen[("acct", model.id)]) == 2
        # Redis reachable again (directly this time): the next try after the pause goes back to it
        async with coredis.Redis.from_url(REDIS_URL) as client:
            limiter.windows = RedisWindows(client, p)
            clock.now += ratelimit.REDIS_RETRY_S + 1
            await limiter.check("acct", model)
            assert not limiter.redis_down
            assert await client.zcard(f"{p}rl:acct:{model.id}") == 2
        messages = [r.getMessage() for r in caplog.records]
        assert sum("redis unavailable" in m for m in messages) == 1
        assert sum("redis is back" in m for m in messages) == 1
    finally:
        await clear(p)


@needs_redis
async def test_open_rate_limiter_uses_redis_when_configured():
    p = prefix()
    config = attrs.evolve(load_config(environ={}), redis_url=REDIS_URL, redis_prefix=p)
    try:
        async with open_rate_limiter(config, shared=None) as limiter:
            assert isinstance(limiter.windows, RedisWindows) and isinstance(limiter.fallback, MemoryWindows)
            await limiter.check("acct", limited_model(requests=1))
            with pytest.raises(GatewayError):
                await limiter.check("acct", limited_model(requests=1))
        async with open_rate_limiter(attrs.evolve(config, redis_url=None), shared=None) as limiter:
            assert isinstance(limiter.windows, MemoryWindows) and limiter.fallback is None
    finally:
        await clear(p)


# -- the database's log (PostgreSQL): shared by every instance -------------------------------


@pytest.mark.skipif(not postgres_ready(), reason="no PostgreSQL on 127.0.0.1:5432 (.ci/run starts it)")
async def test_store_log_is_shared_by_every_instance_on_the_database():
    """Two stores (two instances) on one fresh database: 20 concurrent requests, exactly 2 admitted;
    the window slides on the database's clock."""
    from gatewayd.store.postgres import PostgresStore
    from tests import pg

    name, url = pg.create_database(migrated=True)
    stores = [await PostgresStore.open(url, pool_size=4), await PostgresStore.open(url, pool_size=4)]
    try:
        windows = [StoreWindows(s) for s in stores]
        results = []

        async def attempt(i):
            results.append(await windows[i % 2].take("acct", "m", 2, 1))

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(attempt, i)
        assert results.count(None) == 2, results
        waits = [w for w in results if w is not None]
        assert all(0 < w <= 1 for w in waits)
        assert await windows[0].take("other-acct", "m", 2, 1) is None  # per account
        assert await windows[1].take("acct", "other-model", 2, 1) is None  # per model
        await trio.sleep(min(waits) + 0.05)
        assert await windows[1].take("acct", "m", 2, 1) is None  # a slot left the window
        limiter = RateLimiter(windows[0])
        model = limited_model(requests=1, minutes=1)
        await limiter.check("acct2", model)
        with pytest.raises(GatewayError) as info:
            await RateLimiter(windows[1]).check("acct2", model)
        assert info.value.status == 429 and info.value.headers["Retry-After"] == "60"
    finally:
        for s in stores:
            await s.close()
        pg.drop_database(name)
