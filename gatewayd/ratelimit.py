"""Per-model rate limits: at most N requests per account and model in any window of M minutes.

The rule is a sliding log, not fixed buckets: a request is admitted when fewer than N
admitted requests of that account and model started in the last M minutes. Where the log
lives decides how far the limit reaches:

- ``MemoryWindows``: this process's memory. Exact for one process (SQLite, one instance).
- ``StoreWindows``: the store's ``take_rate_slot`` (PostgreSQL: one row per account and
  model, updated under its row lock, timed by the database's clock). Exact across every
  instance on that database.
- ``RedisWindows``: a sorted set per account and model, checked and appended by one Lua
  script (atomic in Redis, timed by Redis's clock). Exact across every instance that uses
  that Redis; set ``[redis] url`` (or ``GATEWAY_REDIS_URL``) to take this load off the
  database.

Redis configured and down (refused, reset, or silent for ``REDIS_TIMEOUT_S``): the limiter
counts in the store instead, so the limits still hold across instances and a Redis outage
never refuses or lets through traffic on its own. It tries Redis again after
``REDIS_RETRY_S``. The two logs do not see each other: in the window around a switch a
model can admit up to twice its limit (what Redis counted plus what the store counts).
Each switch is logged once.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import time
from typing import TYPE_CHECKING, Callable, Protocol

import trio

from gatewayd.config import Model

if TYPE_CHECKING:  # imported when Redis is configured
    import coredis
from gatewayd.errors import GatewayError

log = logging.getLogger("gatewayd.ratelimit")

REDIS_TIMEOUT_S = 0.5  # a Redis call slower than this counts as Redis being down
REDIS_RETRY_S = 5.0  # after a failure, how long the store counts before Redis is tried again


class Windows(Protocol):
    async def take(self, account_id: str, model_id: str, requests: int, window_s: int) -> float | None:
        """Admit and record one request (None), or say how many seconds until a slot frees."""


class MemoryWindows:
    """The log in this process's memory: exact as long as one process serves the database."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._seen: dict[tuple[str, str], collections.deque[float]] = {}

    def take_now(self, account_id: str, model_id: str, requests: int, window_s: int) -> float | None:
        now = self._clock()
        seen = self._seen.setdefault((account_id, model_id), collections.deque())
        while seen and seen[0] <= now - window_s:
            seen.popleft()
        if len(seen) >= requests:
            return seen[0] + window_s - now
        seen.append(now)
        return None

    async def take(self, account_id: str, model_id: str, requests: int, window_s: int) -> float | None:
        return self.take_now(account_id, model_id, requests, window_s)


class StoreWindows:
    """The log in the store (``take_rate_slot``): shared by every instance on the database."""

    def __init__(self, store) -> None:
        self.store = store

    async def take(self, account_id: str, model_id: str, requests: int, window_s: int) -> float | None:
        from gatewayd.billing.ledger import store_unavailable
        from gatewayd.store.base import StoreUnavailable

        try:
            return await self.store.take_rate_slot(account_id, model_id, requests, window_s)
        except StoreUnavailable:
            raise store_unavailable() from None  # a 503 like a hold that cannot be taken: nothing charged


# KEYS[1]: the account+model log. ARGV: window in microseconds, limit, a unique member.
# Returns 0 when admitted, else the microseconds until the oldest entry leaves the window.
_TAKE_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000))
  return 0
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return math.max(1, tonumber(oldest[2]) + window - now)
"""


class RedisUnavailable(Exception):
    """Redis refused, reset or did not answer within REDIS_TIMEOUT_S."""


class RedisWindows:
    """The log in Redis. ``client`` is an entered ``coredis.Redis``."""

    def __init__(self, client, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    async def take(self, account_id: str, model_id: str, requests: int, window_s: int) -> float | None:
        import coredis.exceptions

        key = f"{self.prefix}rl:{account_id}:{model_id}"
        member = os.urandom(9).hex()
        try:
            with trio.fail_after(REDIS_TIMEOUT_S):
                waited_us = await self.client.eval(
                    _TAKE_SCRIPT, keys=[key], args=[window_s * 1_000_000, requests, member]
                )
        except (trio.TooSlowError, TimeoutError, OSError, coredis.exceptions.ConnectionError,
                coredis.exceptions.AuthenticationError, coredis.exceptions.ReadOnlyError) as e:
            raise RedisUnavailable(f"{type(e).__name__}: {e}") from None
        return None if int(waited_us) == 0 else int(waited_us) / 1_000_000


class RateLimiter:
    """The rule and its 429; ``windows`` decides where the log lives, ``fallback`` covers Redis outages."""

    def __init__(self, windows: Windows, fallback: Windows | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.windows = windows
        self.fallback = fallback
        self._clock = clock
        self._redis_down_until: float | None = None

    async def check(self, account_id: str, model: Model) -> None:
        limit = model.rate_limit
        if limit is None:
            return
        window_s = limit.minutes * 60
        wait = await self._take(account_id, model.id, limit.requests, window_s)
        if wait is not None:
            retry_after = max(1, min(120, math.ceil(wait)))
            raise GatewayError(
                429,
                f"Rate limit reached: at most {limit.requests} requests per {limit.minutes} minutes",
                "rate_limit_exceeded",
                headers={"Retry-After": str(retry_after)},
            )

    async def _take(self, account_id: str, model_id: str, requests: int, window_s: int) -> float | None:
        if self.fallback is None:
            return await self.windows.take(account_id, model_id, requests, window_s)
        if self._redis_down_until is not None:
            if self._clock() < self._redis_down_until:
                return await self.fallback.take(account_id, model_id, requests, window_s)
        try:
            wait = await self.windows.take(account_id, model_id, requests, window_s)
        except RedisUnavailable as e:
            self.redis_failed(str(e))
            return await self.fallback.take(account_id, model_id, requests, window_s)
        if self._redis_down_until is not None:
            log.warning("redis is back: rate limits are counted in redis again")
            self._redis_down_until = None
        return wait

    def redis_failed(self, reason: str) -> None:
        """Count in the fallback for the next REDIS_RETRY_S; said once per outage."""
        if self._redis_down_until is None:
            log.warning("redis unavailable (%s): rate limits are counted without it (in the database, or in memory with SQLite) until it is back", reason)
        self._redis_down_until = self._clock() + REDIS_RETRY_S

    @property
    def redis_down(self) -> bool:
        return self._redis_down_until is not None


class open_rate_limiter:
    """``async with open_rate_limiter(config, store) as limiter``: the limiter the config asks for.

    ``shared`` is the store's log when several instances may serve the database (None for
    SQLite, where one process serves it and memory is exact). With Redis configured the
    client lives as long as the block; it connects lazily, so a Redis that is down at
    start-up is the same as one that goes down later.
    """

    def __init__(self, config, shared: Windows | None) -> None:
        self.config = config
        self.shared = shared
        self._client: coredis.Redis[bytes] | None = None

    async def __aenter__(self) -> RateLimiter:
        local: Windows = self.shared or MemoryWindows()
        if self.config.redis_url is None:
            return RateLimiter(local)
        import coredis
        import coredis.exceptions
        from coredis.retry import NoRetryPolicy

        self._client = coredis.Redis.from_url(
            self.config.redis_url, connect_timeout=REDIS_TIMEOUT_S, stream_timeout=REDIS_TIMEOUT_S,
            retry_policy=NoRetryPolicy(), verify_version=False,
        )
        await self._client.__aenter__()
        limiter = RateLimiter(RedisWindows(self._client, self.config.redis_prefix), fallback=local)
        # connect now, so the first limited request does not pay for it (and a slow first
        # connection is not taken for Redis being down); a Redis that is down is not an error here
        with trio.move_on_after(2):
            try:
                await self._client.ping()
            except (OSError, coredis.exceptions.RedisError) as e:
                limiter.redis_failed(f"{type(e).__name__}: {e}")
        return limiter

    async def __aexit__(self, *exc) -> bool | None:
        if self._client is not None:
            return await self._client.__aexit__(*exc)
        return None
