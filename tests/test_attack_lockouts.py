"""Issue 31, N7: sign-in lockouts lock out the attacker, not the account holder.

The issue's attack: anyone who knows an account's email could keep its holder out of the
console: 20 wrong passwords from anywhere gave doubling lockouts, up to a day. In process
(the real console on the public listener, a real SQLite store, clients behind a trusted
proxy so each attempt can come from an address of its own); the operator's unlock through
the real admin API and gatewayctl. No timing is asserted: the ceiling's own waits are tested
on trio's virtual clock.
"""

from __future__ import annotations

import re
from urllib.parse import quote

import httpx
import trio

from gatewayd import passwords
from gatewayd.console.session import CheckCeiling, SignInThrottle
from tests.admin_inproc import RealAdmin
from tests.console_helpers import PASSWORD
from tests.gatewayctl_cli import Made, gatewayctl
from tests.gatewayctl_cli import (  # noqa: F401  (fixtures)
    admin_fixture, ann_fixture, shared_admin_fixture,
)
from tests.inproc import Gateway

WRONG = "not the password at all"
HOLDER = "holder@example.com"


CHEAP_N = 2**10  # scrypt's cost for these tests' hashes: the rules are what is tested, not the hash


async def console(tmp_path, checks_per_s: float, monkeypatch) -> Gateway:
    """The console with the holder's account; its hash, and the decoy's, made cheap (the
    rules tested here do not depend on scrypt's cost, and 30 checks at the real one take
    half a minute on this machine)."""
    monkeypatch.setattr(passwords, "N", CHEAP_N)
    monkeypatch.setattr(passwords, "decoy_hash", lambda: passwords.hash_password("decoy", n=CHEAP_N))
    gw = Gateway(tmp_path, lambda request: httpx.Response(500),
                 server=f'trusted_proxies = ["127.0.0.1/32"]\npassword_checks_per_s = {checks_per_s}\n')
    await gw.mount_console()
    account = await gw.directory.create_account(HOLDER, "Holder", "UTC", PASSWORD)  # one hash at full cost
    await gw.directory.upgrade_password_hash(account, account.password_hash,
                                             passwords.hash_password(PASSWORD, n=CHEAP_N))
    await gw.directory.pay(account, 10 * 10**9)
    return gw


async def sign_in(gw: Gateway, address: str, password: str) -> httpx.Response:
    """One sign-in from ``address`` (the proxy's X-Forwarded-For), in a session of its own."""
    async with httpx.AsyncClient(transport=gw.http._transport, base_url="http://gateway.test",
                                 headers={"x-forwarded-for": address}) as client:
        page = await client.get("/console/signin")
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
        return await client.post("/console/signin", data={"email": HOLDER, "password": password,
                                                          "csrf_token": token})


async def test_failures_from_elsewhere_never_lock_out_the_holder(tmp_path, monkeypatch):
    """25 wrong passwords for the holder's email, each from an address of its own (20 used to
    lock the email out from everywhere), then 6 from one address: that address is locked out
    after its 5th (429), and the holder, from an address that never failed, signs in."""
    gw = await console(tmp_path, checks_per_s=1000, monkeypatch=monkeypatch)
    try:
        spread = [(await sign_in(gw, f"198.51.100.{i}", WRONG)).status_code for i in range(25)]
        one_address = [(await sign_in(gw, "192.0.2.66", WRONG)).status_code for _ in range(6)]
        holder = await sign_in(gw, "203.0.113.7", PASSWORD)
        attacker_with_the_password = await sign_in(gw, "192.0.2.66", PASSWORD)
    finally:
        await gw.aclose()
    assert spread == [400] * 25  # each checked, none locks anyone else out
    assert one_address == [400] * 5 + [429]
    assert holder.status_code == 302 and holder.headers["location"].endswith("/console/keys")
    assert attacker_with_the_password.status_code == 429  # the address that failed stays locked


async def test_the_ceiling_on_password_checks_makes_excess_wait_or_429_and_locks_nothing(tmp_path, monkeypatch):
    """At most ``password_checks_per_s`` checks a second, whoever asks (0.01 here: one check,
    then the next in 100 s): past the wait the ceiling allows (5 s) an attempt is 429 with
    the wait, and the attempt it took from the throttle is given back, so the holder's address
    is not one failure closer to a lockout."""
    gw = await console(tmp_path, checks_per_s=0.01, monkeypatch=monkeypatch)
    try:
        checked = await sign_in(gw, "198.51.100.1", WRONG)
        refused = [await sign_in(gw, "203.0.113.7", PASSWORD) for _ in range(6)]
        throttle = SignInThrottle(gw.store)
        still_open = await throttle.reserve(HOLDER, "203.0.113.7")  # 6 refusals and no lockout
    finally:
        await gw.aclose()
    assert checked.status_code == 400
    assert [r.status_code for r in refused] == [429] * 6
    assert 90 <= int(refused[0].headers["retry-after"]) <= 100 and "checking too many passwords" in refused[0].text
    assert still_open is None


async def test_check_ceiling_grants_a_seconds_worth_then_queues_then_refuses(autojump_clock):
    ceiling = CheckCeiling(lambda: 4, max_wait_s=1.0)
    began = trio.current_time()
    granted_at = []
    for _ in range(8):
        assert await ceiling.take() is None
        granted_at.append(trio.current_time() - began)
    assert granted_at[:4] == [0, 0, 0, 0]  # a second's worth at once
    assert granted_at[4:] == [0.25, 0.5, 0.75, 1.0]  # then one every 1/4 s, each waiting its turn
    # nine asking at once: four now, four waiting their turn (up to 1 s), the ninth would
    # wait 1.25 s, over max_wait_s: refused with the seconds to wait, nothing taken
    at_once = CheckCeiling(lambda: 4, max_wait_s=1.0)
    results: list = []

    async def ask() -> None:
        results.append(await at_once.take())

    async with trio.open_nursery() as nursery:
        for _ in range(9):
            nursery.start_soon(ask)
    assert sorted(results, key=lambda r: r is None) == [2] + [None] * 8


def test_gatewayctl_account_unlock_lifts_the_lockouts_at_every_address(admin: RealAdmin, ann: Made) -> None:
    """``gatewayctl account unlock``: the operator lifts an email's lockouts (every address)."""
    async def lock(directory, store):
        throttle = SignInThrottle(store)
        for address in ("192.0.2.1", "192.0.2.2"):
            for _ in range(5):
                await throttle.reserve(ann.email, address)
        return [await throttle.reserve(ann.email, a) for a in ("192.0.2.1", "192.0.2.2", "192.0.2.3")]

    async def after(directory, store):
        throttle = SignInThrottle(store)
        return [await throttle.reserve(ann.email, a) for a in ("192.0.2.1", "192.0.2.2")]

    locked = admin.call(lock)
    run = gatewayctl(admin, "account", "unlock", ann.email)
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("POST", f"/admin/v1/accounts/{quote(ann.email)}/unlock")
    assert f"Sign-in unlocked for {ann.email} (3 throttle entries cleared)" in run.stdout  # two locked, one not
    assert locked[0] and locked[1] and locked[2] is None  # locked at the two addresses that failed
    assert admin.call(after) == [None, None]


async def test_unlock_clears_one_emails_buckets_and_no_other(store):
    """On both stores: an email's buckets at every address go, another email's (one whose name
    a LIKE pattern would match: ``_`` and ``%`` are literal) and the addresses' stay."""
    throttle = SignInThrottle(store, limit=2)
    for email in ("a_b@example.com", "axb@example.com", "a%b@example.com"):
        for address in ("192.0.2.1", "192.0.2.2"):
            await throttle.reserve(email, address)
            await throttle.reserve(email, address)
    assert await throttle.reserve("a_b@example.com", "192.0.2.1") is not None  # locked
    assert await throttle.unlock("A_B@example.com") == 2
    assert await throttle.reserve("a_b@example.com", "192.0.2.1") is None
    assert await throttle.reserve("axb@example.com", "192.0.2.1") is not None  # still locked
    assert await throttle.reserve("a%b@example.com", "192.0.2.2") is not None
