"""A daemon with ``[redis] url``: limits counted in Redis; with Redis unreachable, still enforced."""

from __future__ import annotations

import os
import socket
import time

import coredis
import httpx
import pytest
import trio

from tests.live import Daemon, postgres_ready, unique_email
from tests.test_ratelimit import REDIS_URL, clear, needs_redis

LIMITED = """
[[models]]
id = "limited-mini"
provider = "openai"
upstream_id = "gpt-4.1-mini"
input_price = 0.40
output_price = 1.60
max_output_tokens = 1000
rate_limit = { requests = 2, minutes = 1 }
"""


def post(daemon: Daemon, secret: str) -> httpx.Response:
    return httpx.post(
        daemon.url + "/v1/chat/completions", headers={"authorization": f"Bearer {secret}"}, timeout=30,
        json={"model": "limited-mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20},
    )


def redis_daemon(tmp_path, sim, url: str, prefix: str) -> Daemon:
    return Daemon(tmp_path, sim.url, extra=f'\n[redis]\nurl = "{url}"\nkey_prefix = "{prefix}"\n' + LIMITED)


def redis_members(key: str) -> int:
    async def count() -> int:
        async with coredis.Redis.from_url(REDIS_URL) as client:
            return await client.zcard(key)

    return trio.run(count)


@pytest.mark.slow
@needs_redis
def test_limits_are_counted_in_redis(tmp_path, sim):
    prefix = f"gatewayd-test-{os.getpid()}-{os.urandom(4).hex()}:"
    daemon = redis_daemon(tmp_path, sim, REDIS_URL, prefix)
    try:
        account = daemon.admin.account(unique_email())
        secret = daemon.admin.key(account["id"])["secret"]
        assert [post(daemon, secret).status_code for _ in range(3)] == [200, 200, 429]
        assert redis_members(f"{prefix}rl:{account['id']}:limited-mini") == 2
        assert "redis unavailable" not in daemon.output.text
    finally:
        daemon.stop()
        trio.run(clear, prefix)


@pytest.mark.slow
def test_redis_down_limits_still_hold(tmp_path, sim):
    """Redis configured but nothing listening: requests are served, limits counted by the fallback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"redis://127.0.0.1:{s.getsockname()[1]}/0"
    daemon = redis_daemon(tmp_path, sim, dead, "unused:")
    try:
        account = daemon.admin.account(unique_email())
        secret = daemon.admin.key(account["id"])["secret"]
        responses = [post(daemon, secret) for _ in range(3)]
        assert [r.status_code for r in responses] == [200, 200, 429]
        assert responses[2].json()["error"]["code"] == "rate_limit_exceeded"
        assert daemon.admin.audit()["ok"]
        assert daemon.output.text.count("redis unavailable") == 1
    finally:
        daemon.stop()


@pytest.mark.slow
@needs_redis
@pytest.mark.skipif(not postgres_ready(), reason="no PostgreSQL on 127.0.0.1:5432 (.ci/run starts it)")
def test_two_instances_share_the_count_in_redis(tmp_path, sim):
    """Two instances on one PostgreSQL database, both counting in Redis: 2 a minute admits 2 across both."""
    from tests import pg

    prefix = f"gatewayd-test-{os.getpid()}-{os.urandom(4).hex()}:"
    name, url = pg.create_database()
    extra = f'\n[redis]\nurl = "{REDIS_URL}"\nkey_prefix = "{prefix}"\n' + LIMITED
    daemons = [Daemon(tmp_path / f"i{i}", sim.url, extra=extra, env={"GATEWAY_DATABASE_URL": url}) for i in range(2)]
    try:
        a, b = daemons
        account = a.admin.account(unique_email())
        secret = a.admin.key(account["id"])["secret"]
        deadline = time.monotonic() + 5
        while httpx.get(b.url + "/v1/models", headers={"authorization": f"Bearer {secret}"}).status_code != 200:
            assert time.monotonic() < deadline, "the key never reached the second instance"
            time.sleep(0.02)
        statuses = [post(daemons[i % 2], secret).status_code for i in range(8)]
        assert statuses.count(200) == 2 and statuses.count(429) == 6, statuses
        assert redis_members(f"{prefix}rl:{account['id']}:limited-mini") == 2
        for d in daemons:
            assert "redis unavailable" not in d.output.text
    finally:
        for d in daemons:
            d.stop()
        pg.drop_database(name)
        trio.run(clear, prefix)
