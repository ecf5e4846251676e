"""The operator's rows on both stores (migrations 0033): admin tokens kept as hashes, the admin
audit log, the operator's settings, and balance adjustments in the ledger."""

from __future__ import annotations

from gatewayd.admin import tokens
from gatewayd.config import load_config
from gatewayd.directory import Directory, DirectoryError
from gatewayd.store.admin_sql import OPERATOR_PASSWORD, AdminToken, AuditEntry

USD = 10**9


async def test_a_token_is_found_by_its_hash_only_and_revoked_once(store):
    secret = tokens.new_token()
    token = AdminToken("adm_1", "ci", secret[-4:], ("read", "money"), ("10.0.0.0/8",), "2026-11-29T00:00:00.000Z",
                       "socket (local operator)", "2099-01-01T00:00:00.000Z")
    await store.insert_admin_token(token, tokens.token_hash(secret))
    assert await store.admin_token_by_hash(tokens.token_hash(secret)) == token
    assert await store.admin_token_by_hash(tokens.token_hash(secret + "x")) is None
    assert secret not in str(await store.admin_tokens())
    revoked = await store.revoke_admin_token("adm_1", "2026-11-29T01:00:00.000Z")
    again = await store.revoke_admin_token("adm_1", "2026-11-29T02:00:00.000Z")
    assert revoked is not None and again is not None
    assert again.revoked_at == "2026-11-29T01:00:00.000Z" and again.state("2026-11-29T03:00:00.000Z") == "revoked"
    assert await store.revoke_admin_token("adm_none", "2026-11-29T01:00:00.000Z") is None


async def test_the_audit_log_pages_newest_first_and_filters(store):
    for i in range(5):
        await store.append_admin_audit(AuditEntry(
            f"2026-11-29T00:00:0{i}.000Z", "adm_1" if i % 2 else "socket", "n", "http", "192.0.2.1",
            "GET" if i == 0 else "POST", f"/admin/v1/x/{i}", 200, target=f"account:{i % 2}",
            request={"amount_nano": i}, before={"b": i}, after={"a": [i]}))
    rows = await store.admin_audit(limit=3)
    assert [r.path for r in rows] == ["/admin/v1/x/4", "/admin/v1/x/3", "/admin/v1/x/2"]
    assert rows[0].request == {"amount_nano": 4} and rows[0].after == {"a": [4]}
    more = await store.admin_audit(limit=3, before_id=rows[-1].id)
    assert [r.path for r in more] == ["/admin/v1/x/1", "/admin/v1/x/0"]
    assert [r.path for r in await store.admin_audit(actor="adm_1")] == ["/admin/v1/x/3", "/admin/v1/x/1"]
    assert [r.path for r in await store.admin_audit(target="account:0", changes_only=True)] == \
        ["/admin/v1/x/4", "/admin/v1/x/2"]
    assert [r.path for r in await store.admin_audit(since="2026-11-29T00:00:03.000Z")] == \
        ["/admin/v1/x/4", "/admin/v1/x/3"]


async def test_operator_settings_are_set_and_replaced(store):
    assert await store.operator_setting(OPERATOR_PASSWORD) is None
    await store.set_operator_setting(OPERATOR_PASSWORD, "one")
    await store.set_operator_setting(OPERATOR_PASSWORD, "two")
    assert await store.operator_setting(OPERATOR_PASSWORD) == "two"


async def test_an_adjustment_moves_the_balance_either_way_and_the_audit_stays_true(store):
    directory = Directory(load_config(environ={}), store)
    await directory.load()
    account = await directory.create_account("adj@example.com")
    await directory.pay(account, 10 * USD)
    up = await directory.adjust(account, 2 * USD, "goodwill credit for the outage")
    down = await directory.adjust(account, -5 * USD, "invoice 7 was paid twice")
    assert (up["source"], down["amount_nano"]) == ("adjustment", -5 * USD)
    assert (account.balance_nano, account.total_paid_nano) == (7 * USD, 7 * USD)
    for bad_amount, bad_note in ((0, "x"), (True, "x"), (1.5, "x"), (USD, ""), (USD, "   "), (-100 * USD, "too much")):
        try:
            await directory.adjust(account, bad_amount, bad_note)
        except DirectoryError:
            pass
        else:
            raise AssertionError(f"adjust({bad_amount!r}, {bad_note!r}) was accepted")
    assert account.total_paid_nano == 7 * USD
    report = await store.audit(directory.accounts.values(), directory.keys.values())
    assert report["ok"], report


async def test_a_debit_stops_at_a_zero_balance_counting_open_holds_unless_forced(store):
    """Issue 32: the floor of ``account adjust``; in the debit's own UPDATE, so two debits at
    once cannot both pass it."""
    import trio

    from gatewayd.store.base import Hold

    directory = Directory(load_config(environ={}), store)
    await directory.load()
    account = await directory.create_account("floor@example.com")
    await directory.pay(account, 10 * USD)
    key, _ = await directory.create_key(account, name="k")
    hold = await store.reserve(account, key, 3 * USD, request_id="req_floor", model="gpt-4.1", endpoint="chat",
                               stream=False)
    assert isinstance(hold, Hold)  # balance 7: 10 of credit, 3 held
    try:
        await directory.adjust(account, -7 * USD - 1, "one nano too many")
    except DirectoryError as e:
        assert (e.status, e.code) == (409, "below_floor") and "balance of $7.000000 below zero" in e.message
    else:
        raise AssertionError("a debit below a zero balance was accepted")
    outcomes: list[str] = []

    async def debit() -> None:
        try:
            await directory.adjust(account, -4 * USD, "paid twice")
            outcomes.append("done")
        except DirectoryError as e:
            outcomes.append(e.code)

    async with trio.open_nursery() as nursery:  # 4 + 4 > 7: one of them only
        nursery.start_soon(debit)
        nursery.start_soon(debit)
    assert sorted(outcomes) == ["below_floor", "done"]
    await directory.adjust(account, -5 * USD, "chargeback", force=True)  # below zero, as asked
    fresh = await store.refresh_balance(account)
    assert (fresh.balance_nano, fresh.total_paid_nano) == (-2 * USD, USD)
    try:
        await directory.adjust(account, -USD, "x", force="yes")
    except DirectoryError as e:
        assert "force must be true or false" in e.message
    else:
        raise AssertionError("force='yes' was accepted")
