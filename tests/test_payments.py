"""Payments carry a source and a reference (issue 22): ``record_payment`` credits exactly once per
``(source, reference)``, refunds and disputes are negative rows, and the audit stays exact.

Run on both stores (``store`` fixture); the race between two instances on PostgreSQL.
"""

from __future__ import annotations

import pytest
import trio

from gatewayd.config import load_config
from gatewayd.directory import Directory
from gatewayd.money import MAX_PAID_NANO
from gatewayd.store.base import Hold, PaymentTooLarge, Settlement
from tests import pg
from tests.two_stores import two_postgres_stores


async def _account(store, email="p@example.com"):
    directory = Directory(load_config(None, environ={}), store)
    return await directory.create_account(email)


async def _stored(store, account):
    """The account as the store has it (not the cached object)."""
    await store.flush()
    loaded = await store.load_account(account.id)
    assert loaded is not None
    return loaded


async def test_a_repeated_reference_credits_once_and_returns_the_first_row(store):
    account = await _account(store)
    first, credited = await store.record_payment(account, 5_000, "card", source="card", reference="cs_1")
    again, credited_again = await store.record_payment(account, 5_000, "card again", source="card",
                                                       reference="cs_1")
    assert (credited, credited_again) == (True, False)
    assert again == first
    assert (first.source, first.reference, first.note) == ("card", "cs_1", "card")
    # the same reference under another source is another payment
    _, other = await store.record_payment(account, 1_000, "", source="code", reference="cs_1")
    assert other is True
    assert (account.credit_nano, account.total_paid_nano) == (6_000, 6_000)
    stored = await _stored(store, account)
    assert (stored.credit_nano, stored.total_paid_nano) == (6_000, 6_000)
    rows = await store.payments(account.id)
    assert [(p.amount_nano, p.source, p.reference) for p in rows] == [(1_000, "code", "cs_1"),
                                                                      (5_000, "card", "cs_1")]
    assert (await store.audit([account], []))["ok"] is True


async def test_concurrent_repeats_in_one_process_credit_once(store):
    account = await _account(store)
    results: list = []

    async def pay():
        results.append(await store.record_payment(account, 7_000, "", source="card", reference="cs_race"))

    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(pay)
    assert sum(credited for _, credited in results) == 1
    assert len({p.id for p, _ in results}) == 1
    assert (await _stored(store, account)).credit_nano == 7_000 == account.credit_nano
    assert (await store.audit([account], []))["ok"] is True


async def test_operator_payments_have_no_reference_and_each_credits(store):
    account = await _account(store)
    a = await store.add_payment(account, 100, "cash")
    b = await store.add_payment(account, 100, "cash")
    assert a.id != b.id
    assert (a.source, a.reference) == ("operator", None)
    assert (await _stored(store, account)).total_paid_nano == 200
    assert [p.doc()["source"] for p in await store.payments(account.id)] == ["operator", "operator"]


async def test_a_refund_is_a_negative_row_the_balance_may_go_below_zero_and_the_audit_stays_exact(store):
    account = await _account(store)
    directory = Directory(load_config(None, environ={}), store)
    key, _ = await directory.create_key(account, name="k")
    await store.record_payment(account, 1_000_000, "", source="card", reference="cs_a")
    hold = await store.reserve(account, key, 800_000, request_id="r1", model="m", endpoint="chat", stream=False)
    assert isinstance(hold, Hold)
    await store.settle(hold, Settlement(status="ok", http_status=200, input_tokens=1, output_tokens=1,
                                        cost_nano=700_000))
    refund, credited = await store.record_payment(account, -1_000_000, "refunded", source="refund",
                                                  reference="re_a")
    assert credited and refund.amount_nano == -1_000_000
    _, again = await store.record_payment(account, -1_000_000, "refunded", source="refund", reference="re_a")
    assert again is False
    await store.refresh_balance(account)
    # a refund lowers the credit and the total paid: total paid is what was paid and kept
    assert (account.credit_nano, account.total_paid_nano) == (-700_000, 0)
    stored = await _stored(store, account)
    assert (stored.credit_nano, stored.total_paid_nano) == (-700_000, 0)
    report = await store.audit([account], [key])
    assert report["ok"] is True, report
    row = next(a for a in report["accounts"] if a["account_id"] == account.id)
    assert row["balance_nano"] == -700_000 == row["expected_balance_nano"]
    assert row["lowest_allowed_balance_nano"] < -1_000_000  # -t x paid in - given back
    assert "given back" in row["warnings"][0]
    # nothing is held against a balance below zero
    refused = await store.reserve(account, key, 1, request_id="r2", model="m", endpoint="chat", stream=False)
    assert not isinstance(refused, Hold)


async def test_more_given_back_than_paid_is_refused_and_stores_nothing(store):
    account = await _account(store)
    await store.record_payment(account, 500, "", source="card", reference="cs_b")
    with pytest.raises(PaymentTooLarge):
        await store.record_payment(account, -501, "", source="dispute", reference="dp_b")
    _, credited = await store.record_payment(account, -500, "", source="dispute", reference="dp_b")
    assert credited is True  # the refused attempt left no row behind to block the reference
    stored = await _stored(store, account)
    assert (stored.credit_nano, stored.total_paid_nano) == (0, 0)
    with pytest.raises(PaymentTooLarge):
        await store.record_payment(account, MAX_PAID_NANO + 1, "", source="card", reference="cs_big")
    assert [p.reference for p in await store.payments(account.id)] == ["dp_b", "cs_b"]
    assert (await store.audit([account], []))["ok"] is True


async def test_amounts_must_fit_their_source(store):
    account = await _account(store)
    for amount, source in ((100, "refund"), (-100, "card"), (0, "code"), (-100, "operator"), (100, "gift")):
        with pytest.raises(ValueError):
            await store.record_payment(account, amount, "", source=source, reference=None)
    assert await store.payments(account.id) == []


async def test_the_audit_fails_a_balance_below_what_refunds_and_holds_explain(store, monkeypatch):
    """A charge beyond what refunds explain is still caught: the bound moves by R, not more."""
    from gatewayd.store import audit as audit_module

    account = await _account(store)
    await store.record_payment(account, 1_000, "", source="card", reference="cs_c")
    await store.record_payment(account, -400, "", source="refund", reference="re_c")
    report = await store.audit([account], [])
    row = next(a for a in report["accounts"] if a["account_id"] == account.id)
    # paid in 1000, given back 400, t = HOLD_TOLERANCE: lowest = -t x 1000 - 400
    from gatewayd.billing.estimate import HOLD_TOLERANCE
    import math
    assert row["lowest_allowed_balance_nano"] == math.ceil(-HOLD_TOLERANCE * 1_000 - 400)
    assert audit_module.lowest_allowed_balance(600, 0, 0, HOLD_TOLERANCE, 400) == row["lowest_allowed_balance_nano"]


@pytest.mark.skipif(not pg.available(), reason="no PostgreSQL on 127.0.0.1:5432")
async def test_two_postgres_instances_racing_on_one_reference_credit_once(tmp_path):
    async with two_postgres_stores(tmp_path) as (a, b):
        account = await _account(a)
        on_b = await b.load_account(account.id)
        results: list = []

        async def pay(store, acct, reference):
            results.append((reference, await store.record_payment(acct, 1_000, "", source="card",
                                                                  reference=reference)))

        async with trio.open_nursery() as nursery:
            for i in range(20):  # each reference sent to both instances at once, three times each
                for _ in range(3):
                    nursery.start_soon(pay, a, account, f"cs_{i}")
                    nursery.start_soon(pay, b, on_b, f"cs_{i}")
        for i in range(20):
            mine = [(p.id, credited) for ref, (p, credited) in results if ref == f"cs_{i}"]
            assert len(mine) == 6 and sum(c for _, c in mine) == 1 and len({pid for pid, _ in mine}) == 1
        stored = await a.load_account(account.id)
        assert (stored.credit_nano, stored.total_paid_nano) == (20_000, 20_000)
        assert len(await a.payments(account.id)) == 20
        assert (await a.audit([], []))["ok"] is True
