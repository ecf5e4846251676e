"""Issue 31, L-N4: money given back before its credit arrived is kept and applied when it does.

The issue's finding: a Stripe refund that arrived before its credit was answered 200 and
dropped for good. ``record_outside_payment`` keeps it waiting and applies it in the
transaction that records the credit, exactly once, in both orders; on both stores
(``store`` fixture) and with two PostgreSQL instances racing.
"""

from __future__ import annotations

import trio

from tests.test_payments import _account, _stored
from tests.two_stores import two_postgres_stores

USD = 10**9


async def _rows(store, account) -> list[tuple]:
    return sorted((p.source, p.reference, p.amount_nano) for p in await store.payments(account.id))


async def test_a_refund_before_its_credit_waits_and_is_applied_with_it_once(store):
    account = await _account(store)
    assert await store.record_outside_payment(account, -5 * USD, "refund", source="refund", reference="re_1") \
        == "waiting"
    assert await store.record_outside_payment(account, -5 * USD, "refund", source="refund", reference="re_1") \
        == "waiting"  # the refund's event delivered again: still one waiting entry
    assert await store.payments(account.id) == [] and account.total_paid_nano == 0
    assert [w["reference"] for w in await store.payments_waiting(account.id)] == ["re_1"]
    assert await store.record_outside_payment(account, 20 * USD, "card", source="card", reference="cs_1") \
        == "recorded"
    assert await _rows(store, account) == [("card", "cs_1", 20 * USD), ("refund", "re_1", -5 * USD)]
    assert await store.payments_waiting(account.id) == []
    assert (account.credit_nano, account.total_paid_nano) == (15 * USD, 15 * USD)
    # the refund's event again after it was applied, and the credit's: nothing more
    assert await store.record_outside_payment(account, -5 * USD, "", source="refund", reference="re_1") == "repeat"
    assert await store.record_outside_payment(account, 20 * USD, "", source="card", reference="cs_1") == "repeat"
    stored = await _stored(store, account)
    assert (stored.credit_nano, stored.total_paid_nano) == (15 * USD, 15 * USD)
    assert (await store.audit([account], []))["ok"] is True


async def test_both_orders_end_in_the_same_rows(store):
    """Credit then refund then dispute, and the reverse order, on two accounts: the same rows."""
    first, second = await _account(store, "one@example.com"), await _account(store, "two@example.com")
    events = [(20 * USD, "card", "cs_{}"), (-5 * USD, "refund", "re_{}"), (-15 * USD, "dispute", "dp_{}")]
    for amount, source, ref in events:
        await store.record_outside_payment(first, amount, "", source=source, reference=ref.format(1))
    outcomes = [await store.record_outside_payment(second, amount, "", source=source, reference=ref.format(2))
                for amount, source, ref in reversed(events)]
    assert outcomes == ["waiting", "waiting", "recorded"]
    assert [(s, r[:3], a) for s, r, a in await _rows(store, first)] == [
        (s, r[:3], a) for s, r, a in await _rows(store, second)]
    for account in (first, second):
        assert (account.credit_nano, account.total_paid_nano) == (0, 0)
        assert await store.payments_waiting(account.id) == []
    assert (await store.audit([first, second], []))["ok"] is True


async def test_money_given_back_beyond_what_was_ever_paid_keeps_waiting(store):
    account = await _account(store)
    await store.record_outside_payment(account, -30 * USD, "", source="dispute", reference="dp_big")
    assert await store.record_outside_payment(account, 20 * USD, "", source="card", reference="cs_1") == "recorded"
    assert [w["reference"] for w in await store.payments_waiting(account.id)] == ["dp_big"]  # 30 > 20 paid
    await store.record_outside_payment(account, 10 * USD, "", source="card", reference="cs_2")
    assert await store.payments_waiting(account.id) == [] and account.total_paid_nano == 0
    assert (await store.audit([account], []))["ok"] is True


async def test_two_postgres_instances_racing_a_credit_and_its_refunds_apply_each_once(tmp_path):
    """Each credit on one instance while its refund arrives on the other, both at once, 15 times:
    whichever wins, every refund ends applied once and none waits."""
    async with two_postgres_stores(tmp_path) as (a, b):
        account = await _account(a)
        on_b = await b.load_account(account.id)
        async with trio.open_nursery() as nursery:
            for i in range(15):
                nursery.start_soon(lambda i=i: a.record_outside_payment(account, 2 * USD, "", source="card",
                                                                        reference=f"cs_{i}"))
                nursery.start_soon(lambda i=i: b.record_outside_payment(on_b, -2 * USD, "", source="refund",
                                                                        reference=f"re_{i}"))
        assert await a.payments_waiting(account.id) == []
        assert len(await a.payments(account.id)) == 30
        stored = await a.load_account(account.id)
        assert (stored.credit_nano, stored.total_paid_nano) == (0, 0)
        assert (await a.audit([], []))["ok"] is True
