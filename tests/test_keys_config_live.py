"""Key and account rules that need a daemon with its own configuration.

- trusted proxies: ``server.trusted_proxies`` makes X-Forwarded-For decide the client
  address (the right-most untrusted hop); without it a spoofed header is ignored;
- an IPv6 listener, so the allowlist is shown with a real IPv6 peer (::1);
- groups from the config file (price ratio, retired) and the groups an account may use;
- a per-model rate limit from the catalogue, counted per account and model.

Every refusal asserts status, ``error.code``, message and that nothing was charged.
"""

from __future__ import annotations

import math
import threading
from fractions import Fraction

import httpx
import openai
import pytest

from tests.keys_helpers import CHAT, ctl, key_state, nothing_charged, ok, one_line, post, refused
from tests.live import Daemon, unique_email

# gpt-4.1-mini: $0.40 / $1.60 per 1M tokens -> nano per token
MINI_IN, MINI_OUT = 400, 1600

CUSTOM = """
[[groups]]
name = "vip"
price_ratio = 0.5

[[groups]]
name = "old"
price_ratio = 2.0
retired = true

[[models]]
id = "limited-mini"
provider = "openai"
upstream_id = "gpt-4.1-mini"
input_price = 0.40
output_price = 1.60
max_output_tokens = 1000
rate_limit = { requests = 2, minutes = 1 }

[[models]]
id = "limited-unpriced"
provider = "openai"
upstream_id = "gpt-4.1-mini"
rate_limit = { requests = 1, minutes = 1 }
"""


@pytest.fixture(scope="module")
def custom(sim, tmp_path_factory):
    """Groups vip (x0.5) and old (retired), a rate-limited model and a rate-limited unpriced one."""
    d = Daemon(tmp_path_factory.mktemp("custom"), sim.url, extra=CUSTOM)
    yield d
    d.stop()


@pytest.fixture(scope="module")
def proxied(sim, tmp_path_factory):
    """Loopback is a trusted proxy: X-Forwarded-For decides the client address."""
    d = Daemon(tmp_path_factory.mktemp("proxied"), sim.url, server='trusted_proxies = ["127.0.0.1/32"]\n')
    yield d
    d.stop()


@pytest.fixture(scope="module")
def ipv6(sim, tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("ipv6"), sim.url, args=["--listen", "[::1]:0"])
    yield d
    d.stop()


@pytest.fixture(scope="module")
def dual_stack(sim, tmp_path_factory):
    """An IPv6 socket that IPv4 clients reach too: their peer address arrives as ::ffff:127.0.0.1."""
    d = Daemon(tmp_path_factory.mktemp("dual"), sim.url, args=["--listen", "[::ffff:127.0.0.1]:0"],
               server='trusted_proxies = ["127.0.0.1/32"]\n')
    d.url = "http://127.0.0.1:" + d.url.rsplit(":", 1)[1]
    yield d
    d.stop()


def fresh(daemon, paid_usd: str | None = "10", **key_fields) -> tuple[dict, dict]:
    account = daemon.admin.account(unique_email("cfg"), paid_usd=paid_usd)
    return account, daemon.admin.key(account["id"], **key_fields)


# --- trusted proxies ---------------------------------------------------------------------

CLIENT = "203.0.113.7"
XFF_ROWS = [
    # (X-Forwarded-For header lines, address the gateway should see)
    ([CLIENT], CLIENT),
    (["198.51.100.1, " + CLIENT], CLIENT),  # the left part is whatever the client claimed
    ([CLIENT + ", 198.51.100.1"], "198.51.100.1"),  # right-most untrusted wins
    ([CLIENT + ", 127.0.0.1"], CLIENT),  # a trusted hop is skipped
    ([CLIENT + ",127.0.0.1 , 127.0.0.1"], CLIENT),
    ([], "127.0.0.1"),  # no header: the peer itself
    (["garbage"], "127.0.0.1"),
    # a proxy that adds its own header line after the client's: the lines form one list
    ([CLIENT, "198.51.100.1"], "198.51.100.1"),
    (["198.51.100.1", CLIENT], CLIENT),
]


@pytest.mark.parametrize("lines, seen", XFF_ROWS, ids=[" | ".join(r[0]) or "none" for r in XFF_ROWS])
def test_trusted_proxy_forwarded_for_decides(proxied, lines, seen):
    account, key = fresh(proxied, allow_ips=[CLIENT])
    headers = httpx.Headers([("x-forwarded-for", line) for line in lines])
    response = httpx.post(proxied.url + CHAT, headers=[("authorization", f"Bearer {key['secret']}"), *headers.raw],
                          json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}],
                                "max_tokens": 20})
    if seen == CLIENT:
        ok(response)
    else:
        with nothing_charged(proxied.admin, account["id"]):
            refused(response, 403, "access_denied", f"Your IP {seen} is not allowed")


def test_trusted_proxy_ipv6_client(proxied):
    account, key = fresh(proxied, allow_ips=["2001:db8::/64"])
    ok(post(proxied, key["secret"], max_tokens=20, headers={"x-forwarded-for": "2001:db8::5"}))
    with nothing_charged(proxied.admin, account["id"]):
        refused(post(proxied, key["secret"], headers={"x-forwarded-for": "2001:db8:1::5"}), 403, "access_denied",
                "Your IP 2001:db8:1::5 is not allowed")


def test_untrusted_peer_cannot_spoof_forwarded_for(gateway):
    """The session gateway trusts no proxy: the header is ignored, the socket peer decides."""
    account, key = fresh(gateway, allow_ips=[CLIENT])
    with nothing_charged(gateway.admin, account["id"]):
        for lines in ([CLIENT], ["127.0.0.1, " + CLIENT], [CLIENT, CLIENT]):
            headers = [("authorization", f"Bearer {key['secret']}")] + [("x-forwarded-for", v) for v in lines]
            response = httpx.post(gateway.url + CHAT, headers=headers,
                                  json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]})
            refused(response, 403, "access_denied", "Your IP 127.0.0.1 is not allowed")


def test_dual_stack_peer_is_its_ipv4_address(dual_stack):
    """The trusted proxy 127.0.0.1 is recognised when it arrives as ::ffff:127.0.0.1 (it was not)."""
    account, key = fresh(dual_stack, allow_ips=[CLIENT])
    ok(post(dual_stack, key["secret"], max_tokens=20, headers={"x-forwarded-for": CLIENT}))
    with nothing_charged(dual_stack.admin, account["id"]):
        refused(post(dual_stack, key["secret"]), 403, "access_denied", "Your IP 127.0.0.1 is not allowed")
    _, local = fresh(dual_stack, allow_ips=["127.0.0.1"])
    ok(post(dual_stack, local["secret"], max_tokens=20))


# --- IPv6 peer -----------------------------------------------------------------------------

IPV6_ROWS = [
    (["::1"], True),
    (["::1/128", "10.0.0.0/8"], True),
    (["::/0"], True),
    (["2001:db8::/32"], False),
    (["127.0.0.1"], False),  # the peer is ::1, not 127.0.0.1
]


@pytest.mark.parametrize("allow, allowed", IPV6_ROWS, ids=[",".join(r[0]) for r in IPV6_ROWS])
def test_ipv6_peer_allowlist(ipv6, allow, allowed):
    assert ipv6.url.startswith("http://[::1]:")
    account, key = fresh(ipv6, allow_ips=allow)
    if allowed:
        ok(post(ipv6, key["secret"], max_tokens=20))
    else:
        with nothing_charged(ipv6.admin, account["id"]):
            refused(post(ipv6, key["secret"]), 403, "access_denied", "Your IP ::1 is not allowed")


# --- groups --------------------------------------------------------------------------------

GROUP_ROWS = [
    # (groups the account may use, key pinned to, message prefix or None when it works)
    (["default"], "vip", "This token is pinned to group vip, which this account cannot use"),
    (["vip"], "default", "This token is pinned to group default, which this account cannot use"),
    ([], "default", "This token is pinned to group default, which this account cannot use"),
    (["default", "old"], "old", "This token is pinned to group old, which has been retired"),
    (["default"], "old", "This token is pinned to group old, which this account cannot use"),
    (["default", "vip"], "vip", None),
    (["vip"], "vip", None),
    (["default"], "default", None),
]


@pytest.mark.parametrize("groups, pinned, refusal", GROUP_ROWS,
                         ids=[f"{','.join(r[0]) or 'none'}->{r[1]}" for r in GROUP_ROWS])
def test_group_pinning(custom, groups, pinned, refusal):
    account, key = fresh(custom, group=pinned)
    assert custom.admin.call("PUT", f"/accounts/{account['id']}/groups", {"groups": groups})["groups"] == groups
    listed = httpx.get(custom.url + "/v1/models", headers={"authorization": f"Bearer {key['secret']}"}).json()
    if refusal is None:
        assert "gpt-4.1-mini" in {m["id"] for m in listed["data"]}
        ok(post(custom, key["secret"], max_tokens=20))
        return
    assert listed["data"] == []  # /v1/models lists what the key may call: nothing
    with nothing_charged(custom.admin, account["id"]):
        refused(post(custom, key["secret"]), 403, "", refusal)
        refused(post(custom, None, "claude-haiku-4-5", path="/v1/messages", headers={"x-api-key": key["secret"]}),
                403, "", refusal)
    assert key_state(custom.admin, key["id"]) == "enabled"


def half_up(nano: int, ratio: Fraction) -> int:
    return math.floor(nano * ratio + Fraction(1, 2))


def test_group_price_ratio_multiplies_the_charge_exactly(custom):
    admin = custom.admin
    account, key = fresh(custom, group="vip")
    run = ctl(custom, "account", "groups", account["id"], "default,vip", "--json")
    assert run.returncode == 0, run.stderr
    sdk = openai.OpenAI(base_url=custom.url + "/v1", api_key=key["secret"], max_retries=0)
    charged = []
    for words in (3, 8, 13):  # odd and even raw costs: the half-nano rounds up
        completion = sdk.chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": f"hi [[sim:words={words}]]"}], max_tokens=50)
        raw = completion.usage.prompt_tokens * MINI_IN + completion.usage.completion_tokens * MINI_OUT
        charged.append(half_up(raw, Fraction(1, 2)))
        assert admin.usage(account["id"])[0]["cost_nano"] == charged[-1]
    assert admin.balance(account["id"])["balance_nano"] == 10_000_000_000 - sum(charged)
    assert admin.call("GET", f"/keys/{key['id']}")["spent_nano"] == sum(charged)
    # the same request unpinned on an account of the default group pays the full price
    other, plain = fresh(custom)
    full = openai.OpenAI(base_url=custom.url + "/v1", api_key=plain["secret"], max_retries=0).chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi [[sim:words=3]]"}], max_tokens=50)
    assert admin.usage(other["id"])[0]["cost_nano"] == \
        full.usage.prompt_tokens * MINI_IN + full.usage.completion_tokens * MINI_OUT
    assert admin.audit()["ok"]


@pytest.mark.parametrize("call, message", [
    (("POST", "keys", {"name": "k", "group": "nope"}), "no group named 'nope' in the configuration"),
    (("PUT", "groups", {"groups": ["default", "nope"]}), "no group named 'nope' in the configuration"),
    (("PUT", "groups", {"groups": "vip"}), "groups must be a list of group names"),
])
def test_unknown_group_is_refused(custom, call, message):
    account = custom.admin.account(unique_email("grp"), paid_usd=None)
    method, path, doc = call
    error = custom.admin.call(method, f"/accounts/{account['id']}/{path}", doc, expect=400)
    assert error["error"]["message"] == message


def test_gatewayctl_refuses_unknown_group(custom):
    account = custom.admin.account(unique_email("grp"), paid_usd=None)
    run = ctl(custom, "account", "groups", account["id"], "default,nope")
    assert run.returncode == 1 and "no group named 'nope'" in one_line(run.stderr)


# --- per-model rate limit --------------------------------------------------------------------

LIMIT_MESSAGE = "Rate limit reached: at most 2 requests per 1 minutes"


def test_rate_limit_per_account_and_model(custom):
    admin = custom.admin
    account, key = fresh(custom)
    sdk = openai.OpenAI(base_url=custom.url + "/v1", api_key=key["secret"], max_retries=0)
    hello = dict(messages=[{"role": "user", "content": "hi"}], max_tokens=20)
    for _ in range(2):
        sdk.chat.completions.create(model="limited-mini", **hello)
    with nothing_charged(admin, account["id"]):
        response = post(custom, key["secret"], "limited-mini", max_tokens=20)
        error = refused(response, 429, "rate_limit_exceeded", LIMIT_MESSAGE)
        assert error["message"] == f"{LIMIT_MESSAGE} (request id: {response.headers['x-request-id']})"
        assert error["type"] == "rate_limit_error"
        retry_after = response.headers["retry-after"]
        assert retry_after.isdigit() and 1 <= int(retry_after) <= 60  # honest: the window is one minute
        with pytest.raises(openai.RateLimitError) as e:
            sdk.chat.completions.create(model="limited-mini", **hello)
        assert e.value.status_code == 429 and 1 <= int(e.value.response.headers["retry-after"]) <= 60
    assert key_state(admin, key["id"]) == "enabled"
    # counted per model: the same account's other models are not limited
    for _ in range(3):
        sdk.chat.completions.create(model="gpt-4.1-mini", **hello)
    # counted per account: a second key of the same account shares the count
    second = admin.key(account["id"], name="second")
    refused(post(custom, second["secret"], "limited-mini", max_tokens=20), 429, "rate_limit_exceeded", LIMIT_MESSAGE)
    # ... and another account has its own
    _, other = fresh(custom)
    for _ in range(2):
        ok(post(custom, other["secret"], "limited-mini", max_tokens=20))
    refused(post(custom, other["secret"], "limited-mini", max_tokens=20), 429, "rate_limit_exceeded", LIMIT_MESSAGE)


# --- order of checks: price before the rate limit, the rate limit before holds -----------------


def test_price_is_checked_before_the_rate_limit(custom):
    """An unpriced model is refused with model_price_error every time: it never reaches the limiter."""
    account, key = fresh(custom)
    with nothing_charged(custom.admin, account["id"]):
        for _ in range(3):  # its limit is 1 a minute
            refused(post(custom, key["secret"], "limited-unpriced"), 400, "model_price_error",
                    "model limited-unpriced is listed but has no price yet")


def test_rate_limit_is_checked_before_holds(custom):
    """Requests refused for their hold still count against the rate: the third one is 429, not
    403. (A key with a tiny spend limit: limited-mini's whole output allowance, 1,000 tokens,
    cannot be made to cost more than the $3 balance now that caps are lowered to it.)"""
    account, _ = fresh(custom, paid_usd="3")
    key = custom.admin.key(account["id"], name="tight", spend_limit_nano=1_000)
    with nothing_charged(custom.admin, account["id"]):
        for _ in range(2):
            refused(post(custom, key["secret"], "limited-mini"), 403, "pre_consume_token_quota_failed",
                    "token quota is not enough")
        refused(post(custom, key["secret"], "limited-mini"), 429, "rate_limit_exceeded", LIMIT_MESSAGE)


def test_model_list_and_group_are_checked_before_the_rate_limit(custom):
    account, key = fresh(custom)
    for _ in range(2):
        ok(post(custom, key["secret"], "limited-mini", max_tokens=20))
    listed = custom.admin.key(account["id"], name="listed", models=["gpt-4.1-mini"])
    pinned = custom.admin.key(account["id"], name="pinned", group="vip")
    with nothing_charged(custom.admin, account["id"]):
        refused(post(custom, listed["secret"], "limited-mini"), 403, "", "This token has no access to model")
        refused(post(custom, pinned["secret"], "limited-mini"), 403, "", "This token is pinned to group vip")
        refused(post(custom, key["secret"], "limited-mini"), 429, "rate_limit_exceeded", LIMIT_MESSAGE)


# --- states survive a restart -------------------------------------------------------------------


def race_revoke(daemon, key_id: str) -> None:
    """One revoke and eleven enables of the same key, all at once."""
    def act(action: str) -> None:
        with httpx.Client(transport=httpx.HTTPTransport(uds=daemon.socket), base_url="http://gatewayd") as c:
            c.post(f"/admin/v1/keys/{key_id}/{action}")

    threads = [threading.Thread(target=act, args=("revoke" if i == 5 else "enable",)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_key_states_and_limits_survive_a_restart(sim, tmp_path):
    """Everything the request path reads from memory is read back the same from SQLite."""
    daemon = Daemon(tmp_path, sim.url, extra=CUSTOM)
    try:
        admin = daemon.admin
        account = admin.account(unique_email("restart"), timezone="Pacific/Kiritimati")
        admin.call("PUT", f"/accounts/{account['id']}/groups", {"groups": ["default", "vip"]})
        spent_key = admin.key(account["id"], name="spent")
        ok(post(daemon, spent_key["secret"], max_tokens=20))
        spent = admin.call("GET", f"/keys/{spent_key['id']}")["spent_nano"]
        admin.call("PATCH", f"/keys/{spent_key['id']}", {"spend_limit_nano": spent})
        keys = {
            "used_up": spent_key,
            "disabled": admin.key(account["id"], name="disabled"),
            "deleted": admin.key(account["id"], name="deleted"),
            "expired": admin.key(account["id"], name="expired", expires_on="2020-01-01", force=True),
            "far": admin.key(account["id"], name="far", expires_on="9999-12-31"),
            "fenced": admin.key(account["id"], name="fenced", models=["gpt-4.1-nano"], allow_ips=["127.0.0.1"],
                                group="vip"),
        }
        admin.call("POST", f"/keys/{keys['disabled']['id']}/disable")
        admin.call("POST", f"/keys/{keys['deleted']['id']}/revoke")
        for n in range(5):  # a revoke racing eleven enables stays revoked (it came back in 2-4 of 10)
            keys[f"raced{n}"] = admin.key(account["id"], name=f"raced{n}")
            race_revoke(daemon, keys[f"raced{n}"]["id"])
        before = {name: admin.call("GET", f"/keys/{k['id']}") for name, k in keys.items()}
        daemon.restart()
        admin = daemon.admin
        after = {name: admin.call("GET", f"/keys/{k['id']}") for name, k in keys.items()}
        assert after == before
        assert [after[n]["state"] for n in ("used_up", "disabled", "deleted", "expired", "far", "fenced")] == \
            ["used_up", "disabled", "deleted", "expired", "enabled", "enabled"]
        raced = [n for n in keys if n.startswith("raced")]
        assert {after[n]["state"] for n in raced} == {"deleted"}
        for name in ("used_up", "disabled", "deleted", "expired", *raced):
            refused(post(daemon, keys[name]["secret"]), 401, "", "Invalid token")
        ok(post(daemon, keys["far"]["secret"], max_tokens=20))
        ok(post(daemon, keys["fenced"]["secret"], "gpt-4.1-nano", max_tokens=20))
        refused(post(daemon, keys["fenced"]["secret"]), 403, "", "This token has no access to model")
        assert admin.call("GET", f"/accounts/{account['id']}")["timezone"] == "Pacific/Kiritimati"
        assert admin.audit()["ok"]
    finally:
        daemon.stop()
