"""Redemption codes in the store (both stores): a code credits once, however often and wherever
it is redeemed; expired, revoked and unknown codes credit nothing; wrong codes are throttled.

The console form and the CLI against the real daemon: tests/test_codes_live.py.
"""

from __future__ import annotations

import datetime as dt

import pytest
import trio

from gatewayd import codes
from gatewayd.config import load_config
from gatewayd.console.session import SignInThrottle
from gatewayd.directory import Directory, DirectoryError
from gatewayd.records import utc_now_iso
from gatewayd.store.base import utc_iso
from gatewayd.store.redemption_codes import EXPIRED, REDEEMED, REVOKED, UNKNOWN
from tests import pg
from tests.two_stores import two_postgres_stores


async def _account(store, email="r@example.com"):
    return await Directory(load_config(None, environ={}), store).create_account(email)


async def _make(store, amount=2_000_000_000, count=1, expires_at=None, note="promo"):
    made = codes.new_codes(amount, count, expires_at, note)
    await store.insert_codes([(row, hashed) for row, _, hashed in made])
    return [(row, code) for row, code, _ in made]


def _hash(code: str) -> str:
    canonical = codes.canonical(code)
    assert canonical is not None
    return codes.code_hash(canonical)


def test_codes_have_140_random_bits_read_forgivingly():
    made = {codes.new_code() for _ in range(200)}
    assert len(made) == 200
    code = next(iter(made))
    assert code.startswith("gwc-") and len(code.replace("-", "")) == 3 + 28
    body = code.removeprefix("gwc-").replace("-", "")
    assert set(body) <= set(codes.ALPHABET) and len(codes.ALPHABET) == 32  # 28 x 5 bits
    # case, spaces, dashes and the look-alike letters do not matter
    sloppy = " " + code.lower().replace("-", " ").replace("0", "o").replace("1", "l") + " "
    assert codes.canonical(sloppy) == codes.canonical(code) == "gwc-" + body
    assert codes.canonical(body) == "gwc-" + body  # the prefix may be left out
    for wrong in ("", "gwc-", code[:-1], code + "A", code[:-1] + "U", "u" * 28, "gwc-" + "!" * 28):
        assert codes.canonical(wrong) is None


def test_creation_refuses_bad_input_with_a_clear_message():
    past = utc_iso(dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1))
    for amount, count, expires, note, word in (
            (0, 1, None, "", "amount_nano"), (True, 1, None, "", "amount_nano"), (10**19, 1, None, "", "amount_nano"),
            (1, 0, None, "", "count"), (1, 1001, None, "", "count"), (1, "2", None, "", "count"),
            (1, 1, "2026-13-01", "", "expires_at"), (1, 1, "2026-01-01T00:00:00", "", "expires_at"),
            (1, 1, past, "", "in the past"), (1, 1, 5, "", "expires_at"),
            (1, 1, None, "a\x00b", "note"), (1, 1, None, "x" * 501, "note")):
        with pytest.raises(DirectoryError) as refused:
            codes.new_codes(amount, count, expires, note)
        assert word in refused.value.message and refused.value.status == 400
    [(row, _, _)] = codes.new_codes(1, 1, "2999-12-31", "")
    assert row.expires_at == "3000-01-01T00:00:00.000Z"  # through the end of that day, UTC


async def test_a_code_credits_once_and_is_a_payment_row_with_its_id(store):
    account = await _account(store)
    other = await _account(store, "s@example.com")
    [(row, code)], [(unused, _)] = await _make(store), await _make(store, amount=5)
    payment, refused = await store.redeem_code(account, _hash(code.lower()), utc_now_iso())
    assert refused is None and payment is not None
    assert (payment.amount_nano, payment.source, payment.reference) == (2_000_000_000, "code", row.id)
    assert payment.note == f"code {row.id}: promo"
    for who in (account, other):
        again, why = await store.redeem_code(who, _hash(code), utc_now_iso())
        assert (again, why) == (None, REDEEMED)
    assert (account.credit_nano, account.total_paid_nano, other.credit_nano) == (2_000_000_000, 2_000_000_000, 0)
    await store.flush()
    assert (await store.load_account(account.id)).credit_nano == 2_000_000_000
    assert [p.reference for p in await store.payments(account.id)] == [row.id]
    listed = {c.id: c for c in await store.redemption_codes()}
    assert listed[row.id].redeemed_by == account.id and listed[row.id].status(utc_now_iso()) == "redeemed"
    assert listed[unused.id].status(utc_now_iso()) == "unused"
    assert (await store.audit([account, other], []))["ok"] is True


async def test_expired_revoked_and_unknown_codes_credit_nothing(store):
    account = await _account(store)
    soon = utc_iso(dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1))
    [(expiring, expiring_code)] = await _make(store, expires_at=soon)
    [(revoked, revoked_code)] = await _make(store)
    after = utc_iso(dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=2))  # "now" past the expiry
    assert (await store.redeem_code(account, _hash(expiring_code), after)) == (None, EXPIRED)
    gone = await store.revoke_code(revoked.id, utc_now_iso())
    assert gone is not None and gone.revoked_at is not None
    again = await store.revoke_code(revoked.id, utc_now_iso())  # the first time is kept
    assert again is not None and again.revoked_at == gone.revoked_at
    assert (await store.redeem_code(account, _hash(revoked_code), utc_now_iso())) == (None, REVOKED)
    assert (await store.redeem_code(account, _hash(codes.new_code()), utc_now_iso())) == (None, UNKNOWN)
    assert await store.revoke_code("code_nosuch", utc_now_iso()) is None
    # a redeemed code cannot be revoked: the row says who has it
    [(kept, kept_code)] = await _make(store)
    await store.redeem_code(account, _hash(kept_code), utc_now_iso())
    late = await store.revoke_code(kept.id, utc_now_iso())
    assert late is not None and late.revoked_at is None and late.redeemed_by == account.id
    assert await store.payments(account.id) != [] and account.credit_nano == 2_000_000_000
    assert (await store.audit([account], []))["ok"] is True


async def test_concurrent_redemptions_in_one_process_credit_once(store):
    first, second = await _account(store), await _account(store, "t@example.com")
    [(_, code)] = await _make(store)
    results: list = []

    async def redeem(account):
        results.append(await store.redeem_code(account, _hash(code), utc_now_iso()))

    async with trio.open_nursery() as nursery:
        for i in range(12):
            nursery.start_soon(redeem, first if i % 2 else second)
    assert sum(p is not None for p, _ in results) == 1
    assert sorted(why for p, why in results if p is None) == [REDEEMED] * 11
    assert first.credit_nano + second.credit_nano == 2_000_000_000
    assert (await store.audit([first, second], []))["ok"] is True


async def test_wrong_codes_are_throttled_like_sign_ins_with_counts_of_their_own(store):
    clock = [1_000_000.0]
    codes_throttle = SignInThrottle(store, scope="code", clock=lambda: clock[0])
    signins = SignInThrottle(store, clock=lambda: clock[0])
    for _ in range(5):
        assert await codes_throttle.reserve("acc_1", "192.0.2.1") is None
    wait = await codes_throttle.reserve("acc_1", "192.0.2.1")
    assert wait is not None and 0 < wait <= 15 * 60
    # the same account from elsewhere has its own per-address count; sign-ins are not touched
    assert await codes_throttle.reserve("acc_1", "192.0.2.2") is None
    assert await signins.reserve("acc_1", "192.0.2.1") is None
    clock[0] += 15 * 60 + 1
    assert await codes_throttle.reserve("acc_1", "192.0.2.1") is None


@pytest.mark.skipif(not pg.available(), reason="no PostgreSQL on 127.0.0.1:5432")
async def test_two_postgres_instances_redeeming_at_once_credit_once(tmp_path):
    async with two_postgres_stores(tmp_path) as (a, b):
        account = await _account(a)
        on_b = await b.load_account(account.id)
        made = await _make(a, amount=1_000, count=15)
        results: list = []

        async def redeem(store, acct, code):
            results.append((code, await store.redeem_code(acct, _hash(code), utc_now_iso())))

        async with trio.open_nursery() as nursery:
            for _, code in made:  # every code sent to both instances at once, twice each
                for _ in range(2):
                    nursery.start_soon(redeem, a, account, code)
                    nursery.start_soon(redeem, b, on_b, code)
        for _, code in made:
            outcomes = [r for c, r in results if c == code]
            assert sum(p is not None for p, _ in outcomes) == 1, outcomes
            assert [why for p, why in outcomes if p is None] == [REDEEMED] * 3
        stored = await a.load_account(account.id)
        assert (stored.credit_nano, stored.total_paid_nano) == (15_000, 15_000)
        payments = await a.payments(account.id)
        assert sorted(p.reference for p in payments) == sorted(row.id for row, _ in made)
        assert (await a.audit([], []))["ok"] is True


async def test_a_code_past_the_total_paid_bound_is_refused_and_stays_unused(store):
    from gatewayd.money import MAX_PAID_NANO
    from gatewayd.store.base import PaymentTooLarge

    account = await _account(store)
    await store.add_payment(account, MAX_PAID_NANO - 10, "")
    [(row, code)] = await _make(store, amount=11)
    with pytest.raises(PaymentTooLarge):
        await store.redeem_code(account, _hash(code), utc_now_iso())
    listed = {c.id: c for c in await store.redemption_codes()}
    assert listed[row.id].status(utc_now_iso()) == "unused"  # the claim rolled back with the payment
    assert account.total_paid_nano == MAX_PAID_NANO - 10
    assert (await store.audit([account], []))["ok"] is True
