"""Issue 31, L-N3 and L-N4: Stripe Checkout throttled per account; refunds and disputes kept in any order.

In process: the real console and webhook on the public listener, a real SQLite store, and
the loopback fake of Stripe's API (tests/stripe_fake.py: the internet edge). The same rules
on both stores and with two PostgreSQL instances racing: tests/test_payments_waiting.py.
"""

from __future__ import annotations

import re
import secrets

import httpx
import pytest

from gatewayd import passwords
from tests.console_helpers import PASSWORD
from tests.inproc import Gateway
from tests.stripe_fake import SECRET_KEY, WEBHOOK_SECRET, StripeFake, event, signed

USD = 10**9
CHEAP_N = 2**10  # scrypt's cost for the holders' passwords: what is tested is the payments


@pytest.fixture
def fake():
    fake = StripeFake()
    yield fake
    fake.close()


@pytest.fixture
async def gw(tmp_path, monkeypatch, fake):
    monkeypatch.setenv("T_STRIPE_KEY", SECRET_KEY)
    monkeypatch.setenv("T_STRIPE_HOOK", WEBHOOK_SECRET)
    hash_password = passwords.hash_password
    monkeypatch.setattr(passwords, "N", CHEAP_N)
    monkeypatch.setattr(passwords, "hash_password", lambda password: hash_password(password, n=CHEAP_N))
    section = (f'\n[payments.stripe]\nsecret_key_env = "T_STRIPE_KEY"\nwebhook_secret_env = "T_STRIPE_HOOK"\n'
               f'currency = "usd"\napi_base = "{fake.url}"\ncheckout_sessions_per_hour = 3\n')
    gateway = Gateway(tmp_path, lambda request: httpx.Response(500), extra=section)
    await gateway.mount_console()
    try:
        yield gateway
    finally:
        await gateway.aclose()


async def signed_in(gw: Gateway, email: str) -> tuple[httpx.AsyncClient, str]:
    account = await gw.directory.create_account(email, "Holder", "UTC", PASSWORD)
    client = httpx.AsyncClient(transport=gw.http._transport, base_url="http://gateway.test")
    page = await client.get("/console/signin")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    answer = await client.post("/console/signin", data={"email": email, "password": PASSWORD, "csrf_token": token})
    assert answer.status_code == 302
    return client, account.id


async def add_funds(client: httpx.AsyncClient, dollars: str) -> httpx.Response:
    page = await client.get("/console/balance")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    return await client.post("/console/balance/funds", data={"amount": dollars, "nonce": secrets.token_hex(16),
                                                             "csrf_token": token})


async def deliver(gw: Gateway, kind: str, obj: dict) -> dict:
    body, headers = signed(event(kind, obj))
    answer = await gw.http.post("/webhooks/stripe", content=body, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()


async def test_checkout_sessions_are_throttled_per_account(gw, fake):
    """The issue's L-N3: "Add funds" created one Checkout Session per POST, unthrottled (50 in
    2.3 s). Now an account makes at most ``checkout_sessions_per_hour`` (3 here): the 4th and
    5th are 429 with the wait and Stripe is not asked; another account is served meanwhile."""
    attacker, _ = await signed_in(gw, "many@example.com")
    other, _ = await signed_in(gw, "other@example.com")
    try:
        answers = [await add_funds(attacker, "10") for _ in range(5)]
        served = await add_funds(other, "10")
    finally:
        await attacker.aclose()
        await other.aclose()
    assert [a.status_code for a in answers] == [303, 303, 303, 429, 429]
    assert 3000 < int(answers[3].headers["retry-after"]) <= 3600 and "Too many payment attempts" in answers[3].text
    assert served.status_code == 303
    assert len(fake.sessions) == 4  # three for the attacker, one for the other account


async def test_a_refund_before_its_credit_is_kept_and_applied_when_the_credit_arrives(gw, fake):
    """The issue's L-N4: a refund that arrived before its credit was answered 200 and dropped
    for good. Now it waits and is applied, once, when the credit comes (both replayed)."""
    client, account_id = await signed_in(gw, "early@example.com")
    try:
        redirect = await add_funds(client, "100")
    finally:
        await client.aclose()
    session_id = redirect.headers["location"].rsplit("/", 1)[1]
    paid = fake.pay(session_id)
    refunded = fake.refund(fake.charge_of(session_id), 1500)  # $15 back, delivered first
    early = await deliver(gw, "charge.refunded", refunded)
    assert [(e["recorded"], e.get("waiting")) for e in early["entries"]] == [(False, True)]
    account = gw.directory.accounts[account_id]
    assert account.balance_nano == 0 and len(await gw.store.payments_waiting(account_id)) == 1
    credited = await deliver(gw, "checkout.session.completed", paid)
    assert [e["recorded"] for e in credited["entries"]] == [True]
    for kind, obj in (("charge.refunded", refunded), ("checkout.session.completed", paid)):
        again = await deliver(gw, kind, obj)
        assert [e["recorded"] for e in again["entries"]] == [False]
    assert account.balance_nano == 85 * USD
    assert sorted((p.source, p.amount_nano) for p in await gw.store.payments(account_id)) == [
        ("card", 100 * USD), ("refund", -15 * USD)]
    assert await gw.store.payments_waiting(account_id) == []
    assert (await gw.store.audit([account], []))["ok"]


async def test_a_dispute_holds_its_amount_from_its_opening_until_it_closes(gw, fake):
    """``charge.dispute.created`` did nothing until the dispute closed. Now the disputed amount
    is held at once: a dispute won gives it back, a dispute lost keeps it (once, whatever the
    order of its events)."""
    client, account_id = await signed_in(gw, "disputed@example.com")
    try:
        redirect = await add_funds(client, "100")
    finally:
        await client.aclose()
    session_id = redirect.headers["location"].rsplit("/", 1)[1]
    await deliver(gw, "checkout.session.completed", fake.pay(session_id))
    account = gw.directory.accounts[account_id]
    charge = fake.charge_of(session_id)
    won = fake.dispute(charge, "needs_response")
    await deliver(gw, "charge.dispute.created", won)
    assert account.balance_nano == 0  # held while the dispute is open
    await deliver(gw, "charge.dispute.closed", {**won, "status": "won"})
    assert account.balance_nano == 100 * USD
    lost = fake.dispute(charge, "lost")
    closed_first = await deliver(gw, "charge.dispute.closed", lost)  # the closing event first this time
    opened_late = await deliver(gw, "charge.dispute.created", {**lost, "status": "needs_response"})
    assert [e["recorded"] for e in closed_first["entries"]] == [True]
    assert [e["recorded"] for e in opened_late["entries"]] == [False]
    assert account.balance_nano == 0
    assert sorted((p.source, p.reference, p.amount_nano) for p in await gw.store.payments(account_id)) == sorted([
        ("card", session_id, 100 * USD), ("dispute", won["id"], -100 * USD), ("dispute_won", won["id"], 100 * USD),
        ("dispute", lost["id"], -100 * USD)])
    assert (await gw.store.audit([account], []))["ok"]
