"""The store contract, one set of test functions run against both stores (``store`` fixture).

SQLite runs on a real file; PostgreSQL on a fresh database made for each test on the
machine's server. Whatever the daemon relies on is checked here through the contract's
named methods only.
"""

from __future__ import annotations

import time
from fractions import Fraction

import pytest
import trio

from gatewayd.config import load_config
from gatewayd.directory import Directory, DirectoryError
from gatewayd.store.base import Hold, Refusal, Settlement, UsageQuery


async def _account_and_key(store, *, paid=1_000_000, limit=600_000, email="c@example.com"):
    directory = Directory(load_config(None, environ={}), store)
    account = await directory.create_account(email)
    if paid:
        await directory.pay(account, paid)
    key, _ = await directory.create_key(account, name="k", spend_limit_nano=limit)
    return directory, account, key


async def _reserve(store, account, key, amount, rid, stream=False):
    return await store.reserve(account, key, amount, request_id=rid, model="m", endpoint="chat", stream=stream)


async def test_reserve_holds_then_settle_charges_exactly_once(store):
    _, account, key = await _account_and_key(store)
    hold = await _reserve(store, account, key, 500_000, "r1")
    assert isinstance(hold, Hold)
    assert (account.balance_nano, account.held_nano, key.held_nano) == (500_000, 500_000, 500_000)
    result = Settlement(status="ok", http_status=200, input_tokens=10, output_tokens=5, cost_nano=123)
    await store.settle(hold, result)
    await store.settle(hold, result)  # exactly once
    await store.flush()
    await store.refresh_balance(account)
    await store.refresh_key(key)
    assert (account.balance_nano, account.held_nano, key.spent_nano, key.held_nano) == (1_000_000 - 123, 0, 123, 0)
    assert key.last_used_at is not None
    rows = await store.usage_rows(UsageQuery(account.id), 10)
    assert [(r.request_id, r.cost_nano, r.input_tokens, r.output_tokens, r.status) for r in rows] == [
        ("r1", 123, 10, 5, "ok")]
    report = await store.audit([account], [key])
    assert report["ok"] is True, report


async def test_refusals_name_what_is_short_and_hold_nothing(store):
    _, account, key = await _account_and_key(store)
    refused = await _reserve(store, account, key, 700_000, "r3")
    assert refused == Refusal("key", 600_000)
    key.spend_limit_nano = None
    await store.update_key(key)
    refused = await _reserve(store, account, key, 1_000_001, "r4")
    assert refused == Refusal("account", 1_000_000)
    await store.refresh_balance(account)
    assert (account.held_nano, key.held_nano) == (0, 0)
    assert (await store.audit([account], [key]))["ok"] is True


async def test_concurrent_holds_never_exceed_the_balance_or_the_key_limit(store):
    """40 concurrent reserves of 100k against 800k (balance) and 500k (key limit)."""
    _, account, key = await _account_and_key(store, paid=800_000, limit=None)
    _, account2, key2 = await _account_and_key(store, paid=10_000_000, limit=500_000, email="d@example.com")
    results: list = []

    async def one(acct, k, rid):
        results.append((acct.id, await _reserve(store, acct, k, 100_000, rid)))

    async with trio.open_nursery() as nursery:
        for i in range(40):
            nursery.start_soon(one, account, key, f"a{i}")
            nursery.start_soon(one, account2, key2, f"b{i}")
    held = [r for acct, r in results if acct == account.id and isinstance(r, Hold)]
    held2 = [r for acct, r in results if acct == account2.id and isinstance(r, Hold)]
    assert len(held) == 8 and len(held2) == 5
    for hold in held + held2:
        await store.settle(hold, Settlement(status="ok", http_status=200, cost_nano=100_000))
    await store.refresh_balance(account)
    assert account.balance_nano == 0 and account.held_nano == 0
    assert (await store.audit([account, account2], [key, key2]))["ok"] is True


async def test_key_limit_is_counted_in_the_store_under_concurrent_creation(store):
    directory, account, _ = await _account_and_key(store)
    directory_b = Directory(directory.config, store)  # a second instance's cache of the same database
    await directory_b.load()
    account_b = directory_b.account(account.id)
    created, refused = [], []

    async def create(d, acct, i):
        try:
            created.append(await d.create_key(acct, name=f"k{i}"))
        except DirectoryError as e:
            assert e.code == "too_many_keys" and e.status == 409
            refused.append(i)

    import gatewayd.directory as directory_module

    old = directory_module.MAX_KEYS_PER_ACCOUNT
    directory_module.MAX_KEYS_PER_ACCOUNT = 6  # the one existing key + 5 more
    try:
        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(create, directory if i % 2 else directory_b, account if i % 2 else account_b, i)
    finally:
        directory_module.MAX_KEYS_PER_ACCOUNT = old
    assert len(created) == 5 and len(refused) == 5


async def test_revoke_wins_over_a_later_enable_and_revoked_keys_do_not_change(store):
    directory, account, key = await _account_and_key(store)
    assert await store.set_key_status(key.id, "disabled") == "disabled"
    assert await store.set_key_status(key.id, "deleted") == "deleted"
    assert await store.set_key_status(key.id, "enabled") == "deleted"
    from gatewayd.store.base import KeyRevoked

    with pytest.raises(KeyRevoked):
        await store.update_key(key)
    reloaded = await store.load_key(key.id)
    assert reloaded.status == "deleted" and reloaded.secret_hash == key.secret_hash


async def test_accounts_emails_payments_and_reload(store):
    directory, account, key = await _account_and_key(store, paid=0)
    from gatewayd.store.base import EmailTaken

    import attrs

    clash = attrs.evolve(account, id="acct_other", email="C@EXAMPLE.com")
    with pytest.raises(EmailTaken):
        await store.insert_account(clash)
    p1 = await store.add_payment(account, 250, "first")
    p2 = await store.add_payment(account, 750, "")
    assert [p.id for p in await store.payments(account.id)] == [p2.id, p1.id]
    await store.set_groups(account.id, ("default", "vip"))
    await store.set_embedding_models(account.id, frozenset({"e1"}))
    await store.update_account(account.id, name="N", timezone="Asia/Kathmandu")
    await store.set_password_hash(account.id, "scrypt$x")
    loaded = await store.load_account(account.id)
    assert (loaded.credit_nano, loaded.total_paid_nano, loaded.groups, loaded.embedding_models) == (
        1000, 1000, ("default", "vip"), frozenset({"e1"}))
    assert (loaded.name, loaded.timezone, loaded.password_hash) == ("N", "Asia/Kathmandu", "scrypt$x")
    accounts, keys = await store.load_directory()
    assert [a.id for a in accounts] == [account.id] and [k.id for k in keys] == [key.id]
    assert keys[0].expires_at is None and keys[0].spend_limit_nano == 600_000


async def test_the_caps_on_requests_in_flight_are_stored_and_reloaded(store):
    """``max_concurrent`` of accounts and keys (issue 20): null by default, set, cleared."""
    directory, account, key = await _account_and_key(store, paid=0)
    assert (account.max_concurrent, key.max_concurrent) == (None, None)
    capped, _ = await directory.create_key(account, name="capped", max_concurrent=3)
    await directory.set_max_concurrent(account, 40)
    await directory.update_key(key, {"max_concurrent": 0})
    assert (await store.load_account(account.id)).max_concurrent == 40
    assert (await store.load_key(capped.id)).max_concurrent == 3
    assert (await store.load_key(key.id)).max_concurrent == 0
    await directory.set_max_concurrent(account, None)
    await directory.update_key(capped, {"max_concurrent": None})
    accounts, keys = await store.load_directory()
    assert [a.max_concurrent for a in accounts] == [None]
    assert {k.id: k.max_concurrent for k in keys} == {key.id: 0, capped.id: None}
    for bad in (-1, 1_000_001, True, 2.5, "3"):
        with pytest.raises(DirectoryError, match="max_concurrent"):
            await directory.set_max_concurrent(account, bad)
        with pytest.raises(DirectoryError, match="max_concurrent"):
            await directory.update_key(key, {"max_concurrent": bad})


async def test_usage_queries_filter_page_and_stay_in_their_account(store):
    _, account, key = await _account_and_key(store)
    _, other, other_key = await _account_and_key(store, email="o@example.com")
    for i in range(7):
        for acct, k in ((account, key), (other, other_key)):
            hold = await _reserve(store, acct, k, 10, f"{acct.id}-{i}")
            hold.model = "m1" if i % 2 else "m2"
            await store.settle(hold, Settlement(status="ok", http_status=200, cost_nano=i))
    query = UsageQuery(account.id)
    page = await store.usage_page(query, 2, 3)
    assert (page.total, page.pages, page.page, page.total_cost_nano) == (7, 3, 2, sum(range(7)))
    assert [r.request_id for r in page.rows] == [f"{account.id}-{i}" for i in (3, 2, 1)]
    assert {r.model for r in await store.usage_rows(UsageQuery(account.id, model="m1"), 50)} == {"m1"}
    first = await store.usage_batch(query, None, 4)
    rest = await store.usage_batch(query, first[-1].id, 4)
    assert [r.request_id for r in first + rest] == [f"{account.id}-{i}" for i in range(6, -1, -1)]
    assert await store.models_used(account.id) == ["m1", "m2"]
    spend = await store.spend_by_quarter_hour(account.id, "2000-01-01T00:00:00.000Z")
    assert sum(cost for _, _, cost in spend) == sum(range(7)) and all(len(q) == 16 for _, q, _ in spend)
    assert await store.usage_rows(UsageQuery(account.id, since="2999-01-01T00:00:00.000Z"), 10) == []


async def test_console_state_is_in_the_store(store):
    assert await store.console_secret("first-secret" * 4) == "first-secret" * 4
    assert await store.console_secret("second") == "first-secret" * 4  # the first one wins
    now = time.time()
    assert not await store.session_ended("sid1", now)
    await store.end_session("sid1", now + 100, now)
    assert await store.session_ended("sid1", now) and not await store.session_ended("sid1", now + 101)

    def count(states):  # a decide() that takes one attempt from each bucket
        return {b: {**st, "attempts": st["attempts"] + 1, "last_at": now} for b, st in states.items()}, sorted(states)

    assert await store.take_signin_attempt(["e:a|1", "a:1"], now, count) == ["a:1", "e:a|1"]
    seen = {}
    await store.take_signin_attempt(["e:a|1", "a:1", "a:2"], now, lambda st: (seen.update(st), ({}, None))[1])
    assert {b: st["attempts"] for b, st in seen.items()} == {"e:a|1": 1, "a:1": 1, "a:2": 0}
    await store.signin_succeeded(cleared=["e:a|1"], refunded=["a:1"])
    await store.take_signin_attempt(["e:a|1", "a:1"], now, lambda st: (seen.update(st), ({}, None))[1])
    assert (seen["e:a|1"]["attempts"], seen["a:1"]["attempts"]) == (0, 0)
    assert await store.forget_signin_attempts(now + 1, now + 1) == 3  # quiet and not locked: forgotten
    # a password hash is replaced only if it is still the one it replaces (compare and set)
    _, account, _ = await _account_and_key(store)
    await store.set_password_hash(account.id, "old-hash")
    assert await store.replace_password_hash(account.id, "old-hash", "new-hash")
    assert not await store.replace_password_hash(account.id, "old-hash", "newer-hash")
    assert (await store.load_account(account.id)).password_hash == "new-hash"


async def test_interrupted_holds_of_a_dead_instance_are_released_once(store):
    _, account, key = await _account_and_key(store)
    hold = await _reserve(store, account, key, 300_000, "long", stream=True)
    await store.flush()
    assert hold.amount_nano == 300_000
    # this instance is alive: nothing of it is released
    assert await store.release_dead_holds() == 0
    await store.settle(hold, Settlement(status="ok", http_status=200, cost_nano=1))
    assert (await store.audit([account], [key]))["ok"] is True


async def test_holds_released_as_interrupted_record_what_was_held(store):
    """A dead instance's holds become rows that record their hold (interrupted, no charge; on
    PostgreSQL a provisional charge of the hold): they pass the audit."""
    _, account, key = await _account_and_key(store)
    hold = await _reserve(store, account, key, 300_000, "orphan", stream=True)
    await store.flush()
    # the hold row now belongs to an instance that no longer exists
    await store._write(lambda tx: tx.run("UPDATE holds SET instance_id = 'inst_gone' WHERE request_id = 'orphan'"))
    if store.kind == "postgres":
        store.may_judge = lambda: True  # this test's instance has not lived DEAD_AFTER_S yet
    assert await store.release_dead_holds() == 1
    [row] = await store.usage_rows(UsageQuery(account.id), 10)
    if store.kind == "postgres":
        # silence is no proof of death on a shared database: a provisional charge of the hold,
        # until the instance reports or is known dead (issue 25, docs/operations.md)
        assert (row.request_id, row.status, row.cost_nano, row.hold_nano, row.breakdown) == (
            "orphan", "unsettled", 300_000, 300_000, None)
        return
    assert (row.request_id, row.status, row.cost_nano, row.hold_nano, row.breakdown) == (
        "orphan", "interrupted", 0, 300_000, None)
    account.held_nano = key.held_nano = 0  # (SQLite: the released hold was this process's memory)
    await store.refresh_balance(account)
    assert account.held_nano == 0 and hold.amount_nano == 300_000


async def test_the_audit_reports_a_balance_below_zero_and_a_key_over_its_limit(store, monkeypatch):
    """A charge above its hold but within the tolerance: the audit lists the balance below
    zero and the key over its limit as warnings and stays ok."""
    _tolerance(monkeypatch, Fraction(1, 2))
    _, account, key = await _account_and_key(store, paid=1_000, limit=1_000)
    hold = await _reserve(store, account, key, 1_000, "overshoot")
    await store.settle(hold, Settlement(status="ok", http_status=200, output_tokens=9, cost_nano=1_400))
    await store.flush()
    report = await store.audit([account], [key])
    assert report["ok"] is True and report["problems"] == [], report
    [a] = [a for a in report["accounts"] if a["account_id"] == account.id]
    [k] = [k for k in report["keys"] if k["key_id"] == key.id]
    assert a["balance_nano"] == -400 and a["warnings"] == [
        "balance below zero by 400 (charges exceeded their holds, within the tolerance: it may go down to -500)"]
    assert k["spent_nano"] == 1_400 and k["warnings"] == [
        "spent 400 over its limit (within the hold tolerance: at most 500)"]


def _tolerance(monkeypatch, tolerance: Fraction) -> None:
    """The audit's hold tolerance for this test (the measured one may change)."""
    from gatewayd.store import audit

    monkeypatch.setattr(audit, "HOLD_TOLERANCE", tolerance)


async def test_a_charge_over_its_hold_fails_the_audit_naming_the_request(store, monkeypatch):
    _tolerance(monkeypatch, Fraction(1, 2))
    _, account, key = await _account_and_key(store, paid=1_000_000, limit=None)
    within = await _reserve(store, account, key, 1_000, "within")
    await store.settle(within, Settlement(status="ok", http_status=200, cost_nano=1_500))  # exactly at 1.5 x
    await store.flush()
    assert (await store.audit([account], [key]))["ok"] is True
    over = await _reserve(store, account, key, 1_000, "req_over_its_hold")
    await store.settle(over, Settlement(status="ok", http_status=200, cost_nano=1_501))
    await store.flush()
    report = await store.audit([account], [key])
    assert report["ok"] is False
    assert report["problems"] == ["request req_over_its_hold (m chat ok) was charged 1501 nano-USD, over its hold of 1000"
                                  " x 3/2 (1500): the charge escaped its hold"]
    # a row from before the hold was recorded (NULL) is not checked
    await store._write(lambda tx: tx.run("UPDATE usage SET hold_nano = NULL, breakdown = NULL"
                                         " WHERE request_id = 'req_over_its_hold'"))
    assert (await store.audit([account], [key]))["ok"] is True
    [old] = [r for r in await store.usage_rows(UsageQuery(account.id), 10) if r.request_id == "req_over_its_hold"]
    assert (old.hold_nano, old.breakdown) == (None, None)


async def test_the_usage_row_carries_its_hold_and_breakdown_on_every_read(store):
    _, account, key = await _account_and_key(store)
    breakdown = {"lines": [{"dimension": "input", "quantity": 10, "unit_nano": 2, "nano": 20},
                           {"dimension": "tool:web_search", "quantity": 1, "unit_nano": 100, "nano": 100}],
                 "tier": "priority", "long_context": True}
    hold = await _reserve(store, account, key, 5_000, "with-breakdown")
    await store.settle(hold, Settlement(status="ok", http_status=200, input_tokens=10, cost_nano=120,
                                        breakdown=breakdown))
    bare = await _reserve(store, account, key, 7_000, "without")
    await store.settle(bare, Settlement(status="upstream_error", http_status=502))
    await store.flush()
    query = UsageQuery(account.id)
    [a, b] = await store.usage_rows(query, 10)
    assert (a.request_id, a.hold_nano, a.breakdown) == ("without", 7_000, None)
    assert (b.request_id, b.hold_nano, b.breakdown, b.cost_nano) == ("with-breakdown", 5_000, breakdown, 120)
    assert b.doc()["breakdown"] == breakdown and b.doc()["hold_nano"] == 5_000
    assert [r.breakdown for r in (await store.usage_page(query, 1, 10)).rows] == [None, breakdown]
    assert [r.hold_nano for r in await store.usage_batch(query, None, 10)] == [7_000, 5_000]
    from gatewayd.store.usage_queries import UsageFilter

    exported, _ = await store.usage_export(UsageFilter(account.id), before_id=None, limit=10)
    assert [(r["request_id"], r["hold_nano"], r["breakdown"]) for r in exported] == [
        ("without", 7_000, None), ("with-breakdown", 5_000, breakdown)]


async def test_the_usage_row_records_the_alias_a_request_named(store):
    """Aliases (issue 32): the row's model is the catalogue id, requested_model the id named."""
    from gatewayd.store.usage_queries import UsageFilter

    _, account, key = await _account_and_key(store)
    hold = await _reserve(store, account, key, 5_000, "by-alias")
    hold.requested_model = "m-20250101"
    await store.settle(hold, Settlement(status="ok", http_status=200, input_tokens=10, cost_nano=20))
    plain = await _reserve(store, account, key, 5_000, "by-id")
    await store.settle(plain, Settlement(status="ok", http_status=200, input_tokens=10, cost_nano=20))
    await store.flush()
    rows = await store.usage_rows(UsageQuery(account.id), 10)
    assert [(r.request_id, r.model, r.requested_model) for r in rows] == [
        ("by-id", "m", None), ("by-alias", "m", "m-20250101")]
    exported, _ = await store.usage_export(UsageFilter(account.id), before_id=None, limit=10)
    assert [r["requested_model"] for r in exported] == [None, "m-20250101"]


async def test_a_payment_past_the_total_bound_is_refused_and_stores_nothing(store):
    from gatewayd.money import MAX_PAID_NANO
    from gatewayd.store.base import PaymentTooLarge

    _, account, key = await _account_and_key(store, paid=1_000)
    with pytest.raises(PaymentTooLarge) as info:
        await store.add_payment(account, MAX_PAID_NANO - 999, "too much")
    assert info.value.total_paid_nano == 1_000
    with pytest.raises(PaymentTooLarge):
        await store.add_payment(account, 2**64, "beyond 64 bits")
    await store.add_payment(account, MAX_PAID_NANO - 1_000, "up to the bound")
    assert (account.credit_nano, account.total_paid_nano) == (MAX_PAID_NANO, MAX_PAID_NANO)
    assert [p.amount_nano for p in await store.payments(account.id)] == [MAX_PAID_NANO - 1_000, 1_000]
    await store.refresh_balance(account)
    assert (account.credit_nano, account.total_paid_nano) == (MAX_PAID_NANO, MAX_PAID_NANO)
    assert (await store.audit([account], [key]))["ok"]


async def test_a_payment_shows_once_on_the_cached_account_even_if_it_was_reloaded_meanwhile(store):
    """On PostgreSQL the change feed reloads an account whose payment committed, and may do so
    before ``add_payment`` returns: the payment must then not be added to the cache a second
    time (``gatewayctl account pay`` once answered total_paid 6.00 after paying 3.00)."""
    if store.kind != "postgres":
        pytest.skip("SQLite has no change feed: the process itself is the truth")
    directory, account, _ = await _account_and_key(store, paid=1_000)
    write = store._write

    async def write_then_reload(job):
        done = await write(job)
        await store.refresh_balance(account)  # what the change feed does when the NOTIFY arrives first
        return done

    store._write = write_then_reload
    try:
        await directory.pay(account, 3_000)
    finally:
        store._write = write
    assert (account.credit_nano, account.total_paid_nano) == (4_000, 4_000)
    assert (await store.load_account(account.id)).total_paid_nano == 4_000


async def test_migrations_run_by_their_own_number_not_above_the_highest(store, tmp_path):
    """Branches add migrations side by side: a 0002 merged after 0003 was applied still runs, once."""
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "0001_a.sql").write_text("CREATE TABLE mig_a (x INTEGER);\n")
    (folder / "0003_c.sql").write_text("CREATE TABLE mig_c (x INTEGER);\n")
    if store.kind == "sqlite":
        from gatewayd.store.sqlite import migrate
        from gatewayd.store.sqlite_batch import connect

        def run() -> tuple[int, list]:
            conn = connect(str(tmp_path / "mig.db"))
            try:
                version = migrate(conn, folder)
                return version, sorted(r[0] for r in conn.execute("SELECT version FROM schema_version"))
            finally:
                conn.close()
    else:
        from gatewayd.store.postgres import migrate
        from tests import pg

        name, url = pg.create_database()

        def run() -> tuple[int, list]:
            import psycopg

            version = migrate(url, folder)
            with psycopg.connect(url) as conn:
                return version, sorted(r[0] for r in conn.execute("SELECT version FROM schema_version"))
    try:
        assert run() == (3, [1, 3])
        (folder / "0002_b.sql").write_text("CREATE TABLE mig_b (x INTEGER);\n")
        assert run() == (3, [1, 2, 3])  # applied now, after 0003
        assert run() == (3, [1, 2, 3])  # and once (a second CREATE TABLE mig_b would fail)
    finally:
        if store.kind != "sqlite":
            pg.drop_database(name)
