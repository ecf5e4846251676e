"""Client address, IP allowlist and per-model rate limit as pure functions (no daemon).

The live tests (tests/test_keys_live.py) show the same rules through a real listener;
this table covers the corners a loopback socket cannot produce (IPv4-mapped peers,
malformed hops, chains of proxies) and the rate limiter with a frozen clock.
"""

from __future__ import annotations

import ipaddress

import pytest

from gatewayd.access import check_ip, client_address
from gatewayd.config import Model, ModelRoute, Provider, RateLimit
from gatewayd.directory import DirectoryError, parse_ip_list
from gatewayd.errors import GatewayError
from gatewayd.ratelimit import MemoryWindows, RateLimiter
from tests.test_expiry import key

PROXIES = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fd00::/8"))


@pytest.mark.parametrize(
    "peer, xff, trusted, seen",
    [
        ("198.51.100.9", None, (), "198.51.100.9"),
        ("198.51.100.9", "203.0.113.7", (), "198.51.100.9"),  # no trusted proxies: the header is ignored
        ("198.51.100.9", "203.0.113.7", PROXIES, "198.51.100.9"),  # peer not a trusted proxy: ignored
        ("10.1.1.1", None, PROXIES, "10.1.1.1"),  # trusted peer, no header
        ("10.1.1.1", "203.0.113.7", PROXIES, "203.0.113.7"),
        ("10.1.1.1", "1.1.1.1, 203.0.113.7", PROXIES, "203.0.113.7"),  # left part is the client's say
        ("10.1.1.1", "203.0.113.7, 10.2.2.2", PROXIES, "203.0.113.7"),  # a chain of trusted proxies
        ("10.1.1.1", "203.0.113.7,10.2.2.2 , 10.3.3.3", PROXIES, "203.0.113.7"),
        ("10.1.1.1", "2001:db8::5", PROXIES, "2001:db8::5"),
        ("10.1.1.1", "[2001:db8::5]", PROXIES, "2001:db8::5"),
        ("fd00::1", "203.0.113.7", PROXIES, "203.0.113.7"),  # an IPv6 proxy
        ("10.1.1.1", "garbage, 203.0.113.7", PROXIES, "203.0.113.7"),
        ("10.1.1.1", "203.0.113.7, garbage", PROXIES, "10.1.1.1"),  # a malformed hop: trust nothing left of it
        ("10.1.1.1", "10.2.2.2", PROXIES, "10.1.1.1"),  # only trusted hops
        ("::1", None, (), "::1"),
        # an IPv4 peer on a dual-stack socket arrives IPv4-mapped: it is the IPv4 address for every rule
        ("::ffff:198.51.100.9", None, (), "198.51.100.9"),
        ("::ffff:10.1.1.1", "203.0.113.7", PROXIES, "203.0.113.7"),
        ("10.1.1.1", "203.0.113.7, ::ffff:10.2.2.2", PROXIES, "203.0.113.7"),
        ("10.1.1.1", "::ffff:203.0.113.7", PROXIES, "203.0.113.7"),
    ],
)
def test_client_address(peer, xff, trusted, seen):
    assert client_address(peer, xff, trusted) == seen


@pytest.mark.parametrize(
    "allow, address, allowed",
    [
        (None, "198.51.100.9", True),
        (["198.51.100.9"], "198.51.100.9", True),
        (["198.51.100.0/24"], "198.51.100.200", True),
        (["198.51.100.0/24"], "198.51.101.1", False),
        (["2001:db8::/32"], "2001:db8:1::1", True),
        (["2001:db8::/32"], "2001:db9::1", False),
        (["::1"], "::1", True),
        (["::1"], "127.0.0.1", False),  # versions never match each other
        (["127.0.0.1"], "::1", False),
        (["127.0.0.1"], "::ffff:127.0.0.1", True),  # an IPv4-mapped peer on a dual-stack socket
        (["10.0.0.0/8", "2001:db8::/32"], "2001:db8::7", True),
        (["10.0.0.0/8"], None, False),
        (["10.0.0.0/8"], "not-an-address", False),
    ],
)
def test_check_ip(allow, address, allowed):
    k = key()
    k.allow_ips = None if allow is None else parse_ip_list(allow)
    if allowed:
        check_ip(k, address)
    else:
        with pytest.raises(GatewayError) as refused:
            check_ip(k, address)
        assert (refused.value.status, refused.value.code) == (403, "access_denied")


@pytest.mark.parametrize(
    "entries, shown",
    [
        (["203.0.113.7"], ["203.0.113.7/32"]),
        (["203.0.113.7/24"], ["203.0.113.0/24"]),  # host bits are dropped, not refused
        ([" 10.0.0.0/8 "], ["10.0.0.0/8"]),
        (["2001:DB8::1"], ["2001:db8::1/128"]),
        (["2001:db8::/32", "::1"], ["2001:db8::/32", "::1/128"]),
    ],
)
def test_parse_ip_list_accepts(entries, shown):
    assert [str(n) for n in parse_ip_list(entries)] == shown


@pytest.mark.parametrize(
    "entries, named",
    [
        (["999.1.1.1"], "'999.1.1.1'"),
        (["10.0.0.0/33"], "'10.0.0.0/33'"),
        (["2001:db8::/129"], "'2001:db8::/129'"),
        (["10.0.0.1", "bad"], "'bad'"),
        ([""], "''"),
        (["example.com"], "'example.com'"),
        ([7], "7"),
        ([], "non-empty list"),
        ("10.0.0.1", "non-empty list"),  # a bare string is not a list
    ],
)
def test_parse_ip_list_refuses_naming_the_entry(entries, named):
    with pytest.raises(DirectoryError) as refused:
        parse_ip_list(entries)
    assert refused.value.status == 400 and named in refused.value.message


def limited(requests: int, minutes: int, model_id: str = "m") -> Model:
    provider = Provider(name="p", protocol="openai", base_url="http://sim", api_key=None)
    return Model(id=model_id, routes=(ModelRoute(provider=provider, upstream_id=model_id),), kind="chat", family="gpt", input_price=1,
                 output_price=1, cached_input_price=None, cache_write_price=None, max_output_tokens=10,
                 rate_limit=RateLimit(requests=requests, minutes=minutes))


class Limiter:
    """A RateLimiter over the in-memory log with a clock the test sets."""

    def __init__(self) -> None:
        self.now = 0.0
        self.limiter = RateLimiter(MemoryWindows(lambda: self.now))

    async def check(self, account: str, model: Model, now: float) -> None:
        self.now = now
        await self.limiter.check(account, model)


async def retry_after(limiter: Limiter, account: str, model: Model, now: float) -> int:
    with pytest.raises(GatewayError) as refused:
        await limiter.check(account, model, now)
    assert refused.value.status == 429
    assert refused.value.message == f"Rate limit reached: at most {model.rate_limit.requests} requests per " \
                                    f"{model.rate_limit.minutes} minutes"
    return int(refused.value.headers["Retry-After"])


async def test_rate_limit_window_and_honest_retry_after():
    limiter, model = Limiter(), limited(2, 1)
    await limiter.check("a", model, 1000.0)
    await limiter.check("a", model, 1010.0)
    assert await retry_after(limiter, "a", model, 1010.5) == 50  # the first request leaves the window at 1060
    assert await retry_after(limiter, "a", model, 1059.2) == 1  # never 0: the client must wait a little
    await limiter.check("a", model, 1060.0)  # the first one has left the window
    assert await retry_after(limiter, "a", model, 1061.0) == 9


async def test_rate_limit_is_per_account_and_model():
    limiter, model, other = Limiter(), limited(1, 1), limited(1, 1, "other")
    await limiter.check("a", model, 0.0)
    await retry_after(limiter, "a", model, 1.0)
    await limiter.check("b", model, 1.0)
    await limiter.check("a", other, 1.0)


async def test_retry_after_is_capped_at_120_so_sdks_retry():
    limiter, model = Limiter(), limited(1, 60)
    await limiter.check("a", model, 0.0)
    assert await retry_after(limiter, "a", model, 1.0) == 120


async def test_refused_requests_do_not_use_up_the_window():
    """A 429 is not counted: a client that keeps retrying gets in as soon as the window allows."""
    limiter, model = Limiter(), limited(1, 1)
    await limiter.check("a", model, 0.0)
    for t in range(1, 60):
        await retry_after(limiter, "a", model, float(t))
    await limiter.check("a", model, 60.0)
