"""Alerts in the outbox (issue 22, gatewayd/alerts.py), through the store contract on both stores:
which crossings write a row, that each crossing writes one, how they re-arm, and that the row
is in the transaction that moved the money."""

from __future__ import annotations

import sqlite3

import pytest

from gatewayd.alerts import level_80_at
from gatewayd.config import load_config
from gatewayd.directory import Directory, DirectoryError
from gatewayd.store.base import Hold, Settlement

USD = 1_000_000_000


async def _account(store, *, paid=10 * USD, alert_below=None, email="a@example.com"):
    directory = Directory(load_config(None, environ={}), store)
    account = await directory.create_account(email, "", "UTC")
    if paid:
        await directory.pay(account, paid)
    if alert_below is not None:
        await directory.set_alert_below(account, alert_below)
    return directory, account


async def _spend(store, account, key, cost, rid):
    held = await store.reserve(account, key, cost, request_id=rid, model="m", endpoint="chat", stream=False)
    assert isinstance(held, Hold), held
    await store.settle(held, Settlement(status="ok", http_status=200, cost_nano=cost))


async def _alerts(store, account, kind=None):
    await store.flush()
    rows = list(reversed(await store.recent_alerts(account.id, 100)))
    return [r for r in rows if kind is None or r.kind == kind]


def test_80_percent_is_reached_at_the_ceiling():
    assert level_80_at(10) == 8
    assert level_80_at(7) == 6  # 5.6 rounds up
    assert level_80_at(5 * USD) == 4 * USD


async def test_the_balance_falling_below_its_threshold_alerts_once_and_rearms(store):
    directory, account = await _account(store, paid=10 * USD, alert_below=5 * USD)
    key, _ = await directory.create_key(account, name="k")
    await _spend(store, account, key, 4 * USD, "r1")  # 6: above
    assert await _alerts(store, account, "balance_below") == []
    await _spend(store, account, key, 2 * USD, "r2")  # 4: crossed
    await _spend(store, account, key, 1 * USD, "r3")  # 3: still below, no new alert
    [alert] = await _alerts(store, account, "balance_below")
    assert (alert.amount_nano, alert.threshold_nano) == (4 * USD, 5 * USD)
    await directory.pay(account, 3 * USD)  # 6: above again (re-armed) ...
    await _spend(store, account, key, 2 * USD, "r4")  # ... 4: crossed again
    assert [a.amount_nano for a in await _alerts(store, account, "balance_below")] == [4 * USD, 4 * USD]
    # exactly at the threshold is not below it
    await directory.pay(account, 1 * USD)
    assert len(await _alerts(store, account, "balance_below")) == 2


async def test_no_threshold_no_balance_alert_and_bad_thresholds_are_refused(store):
    directory, account = await _account(store, paid=10 * USD)
    key, _ = await directory.create_key(account, name="k")
    await _spend(store, account, key, 9 * USD, "r1")
    assert await _alerts(store, account, "balance_below") == []
    for bad in (-1, 1.5, "5", True, 10**19):
        with pytest.raises(DirectoryError):
            await directory.set_alert_below(account, bad)
    await directory.set_alert_below(account, None)
    assert account.alert_below_nano is None


async def test_a_key_alerts_at_80_and_100_percent_of_its_spend_limit(store):
    directory, account = await _account(store, paid=100 * USD)
    key, _ = await directory.create_key(account, name="k", spend_limit_nano=10 * USD)
    await _spend(store, account, key, 7 * USD, "r1")
    assert await _alerts(store, account, "key_spend_limit") == []
    await _spend(store, account, key, 1 * USD, "r2")  # 8 of 10: 80%
    await _spend(store, account, key, 1 * USD, "r3")  # 9: nothing new
    await _spend(store, account, key, 1 * USD, "r4")  # 10: 100%
    alerts = await _alerts(store, account, "key_spend_limit")
    assert [(a.level, a.amount_nano, a.key_id) for a in alerts] == [(80, 8 * USD, key.id), (100, 10 * USD, key.id)]
    # raising the limit re-arms: 10 of 20 is 50%, and 16 is 80% again
    await directory.update_key(key, {"spend_limit_nano": 20 * USD})
    await _spend(store, account, key, 6 * USD, "r5")
    assert [a.level for a in await _alerts(store, account, "key_spend_limit")] == [80, 100, 80]


async def test_one_charge_past_both_levels_alerts_100_only(store):
    directory, account = await _account(store)
    key, _ = await directory.create_key(account, name="k", spend_limit_nano=1 * USD)
    await _spend(store, account, key, 1 * USD, "r1")
    assert [a.level for a in await _alerts(store, account, "key_spend_limit")] == [100]


async def test_a_key_alerts_at_80_and_100_percent_of_its_period_budget_and_again_next_period(store):
    from tests.test_key_budgets import Clock

    clock = store.now_iso = Clock("2026-03-04T10:00:00.000Z")
    directory, account = await _account(store)
    key, _ = await directory.create_key(account, name="k", budget_nano=1_000, budget_period="day")
    await _spend(store, account, key, 500, "r1")
    await _spend(store, account, key, 300, "r2")  # 800: 80%
    await _spend(store, account, key, 100, "r3")
    await _spend(store, account, key, 100, "r4")  # 1000: 100%
    alerts = await _alerts(store, account, "key_budget")
    assert [(a.level, a.amount_nano, a.period_start) for a in alerts] == [
        (80, 800, "2026-03-04T00:00:00.000Z"), (100, 1_000, "2026-03-04T00:00:00.000Z")]
    clock.now = "2026-03-05T01:00:00.000Z"  # a new day: a new budget, a new 80%
    await _spend(store, account, key, 900, "r5")
    alerts = await _alerts(store, account, "key_budget")
    assert [(a.level, a.period_start) for a in alerts][2:] == [(80, "2026-03-05T00:00:00.000Z")]


async def test_a_payment_is_an_alert(store):
    directory, account = await _account(store, paid=0)
    payment = await directory.pay(account, 7 * USD, "wire 42")
    [alert] = await _alerts(store, account, "payment")
    assert (alert.amount_nano, alert.payment_id, alert.source) == (7 * USD, payment["id"], "operator")
    # a card payment recorded twice (a replayed webhook) is one payment and one alert
    card, new = await store.record_payment(account, 5 * USD, "checkout", source="card", reference="cs_1")
    again, repeated = await store.record_payment(account, 5 * USD, "checkout", source="card", reference="cs_1")
    assert (new, repeated, again.id) == (True, False, card.id)
    alerts = await _alerts(store, account, "payment")
    assert [(a.source, a.payment_id) for a in alerts] == [("operator", payment["id"]), ("card", card.id)]


async def test_claims_are_exclusive_and_finished_rows_are_never_claimed_again(store):
    directory, account = await _account(store, paid=5 * USD)
    await directory.pay(account, 1 * USD)
    first = await store.claim_alerts(now=1000.0, lease_s=30, token="a", limit=10)
    assert len(first) == 2
    assert await store.claim_alerts(now=1010.0, lease_s=30, token="b", limit=10) == []  # leased to a
    assert await store.retry_alert(first[0].id, "a", next_attempt_at=1100.0, email_done=True, webhook_done=False,
                                   error="webhook: answered 500")
    assert await store.finish_alert(first[1].id, "a", outcome="delivered", email_done=True, webhook_done=True)
    assert not await store.finish_alert(first[1].id, "a", outcome="delivered", email_done=True, webhook_done=True)
    assert await store.claim_alerts(now=1050.0, lease_s=30, token="b", limit=10) == []  # not due yet
    # past the lease, the other claimant takes the unfinished row, and the first can no longer mark it
    [again] = await store.claim_alerts(now=1100.0, lease_s=30, token="b", limit=10)
    assert (again.id, again.attempts, again.email_done, again.webhook_done) == (first[0].id, 1, True, False)
    assert not await store.finish_alert(again.id, "a", outcome="delivered", email_done=True, webhook_done=True)


async def test_a_charge_and_its_alert_commit_together_or_not_at_all(tmp_path):
    """SQLite: a settlement whose usage row cannot be written (a duplicate request id) writes
    neither its charge nor its alert: the trigger's row is part of the same transaction."""
    from gatewayd.store.sqlite import SQLiteStore

    path = str(tmp_path / "store.db")
    store = SQLiteStore(path)
    try:
        directory, account = await _account(store, paid=10 * USD, alert_below=5 * USD)
        key, _ = await directory.create_key(account, name="k")
        await store.flush()

        def charge(conn):
            conn.execute("UPDATE accounts SET credit_nano = credit_nano - ? WHERE id = ?", (6 * USD, account.id))
            raise sqlite3.IntegrityError("the job failed after the charge")

        with pytest.raises(sqlite3.IntegrityError):
            await store.write(charge)
        assert await _alerts(store, account, "balance_below") == []
        credit = store.read_blocking(lambda c: c.execute("SELECT credit_nano FROM accounts WHERE id = ?",
                                                         (account.id,)).fetchone()[0])
        assert credit == 10 * USD
    finally:
        await store.close()


async def test_postgres_a_settlement_and_its_alert_are_one_transaction(store):
    """PostgreSQL: the alert is written inside gatewayd_settle's statement; a settlement rolled
    back (here: by the transaction that wraps it) takes its alert with it."""
    if store.kind != "postgres":
        pytest.skip("the SQLite variant is the test above")
    directory, account = await _account(store, paid=10 * USD, alert_below=5 * USD)
    key, _ = await directory.create_key(account, name="k")
    held = await store.reserve(account, key, 6 * USD, request_id="r1", model="m", endpoint="chat", stream=False)
    job = store._settle_job(held, Settlement(status="ok", http_status=200, cost_nano=6 * USD), 5)

    class Rollback(Exception):
        pass

    def settle_then_fail(tx):
        row = job(tx)
        assert row["settled"]
        assert tx.one("SELECT count(*) AS n FROM alert_outbox WHERE kind = 'balance_below'")["n"] == 1
        raise Rollback

    with pytest.raises(Rollback):
        await store._write(settle_then_fail)
    assert await _alerts(store, account, "balance_below") == []
    assert (await store.refresh_balance(account)).credit_nano == 10 * USD
    await store.settle(held, Settlement(status="ok", http_status=200, cost_nano=6 * USD))
    assert [a.amount_nano for a in await _alerts(store, account, "balance_below")] == [4 * USD]


@pytest.mark.parametrize(("text", "env", "message"), [
    ("[alerts]\npoll_s = 1\n", {}, "alerts: give [alerts.smtp] or [alerts.webhook]"),
    ('[alerts.webhook]\nurl = "ftp://x"\nsecret_env = "S"\n', {"S": "s"}, "alerts.webhook.url: must start with"),
    ('[alerts.webhook]\nurl = "https://x"\nsecret_env = "S"\n', {}, "alerts.webhook.secret_env: environment variable S"),
    ('[alerts.smtp]\nhost = "h"\nfrom = "nobody"\n', {}, "alerts.smtp.from: must be an email address"),
    ('[alerts.smtp]\nhost = "h"\nfrom = "a@b"\nport = 70000\n', {}, "alerts.smtp.port: must be at most 65535"),
    ('[alerts.smtp]\nhost = "h"\nfrom = "a@b"\nusername_env = "U"\n', {"U": "u"}, "give both or neither"),
    ('[alerts.smtp]\nhost = "h"\nfrom = "a@b"\ntls = true\n', {}, "alerts.smtp.tls: unknown key"),
])
def test_a_bad_alerts_section_is_one_config_error(tmp_path, text, env, message):
    from gatewayd.config import ConfigError

    path = tmp_path / "gatewayd.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_config(path, environ=env)
    assert message in str(refused.value), str(refused.value)


def test_the_signature_verifies_and_refuses_tampering_and_stale_timestamps():
    from gatewayd.alerts import sign, verify

    header = sign(b"k", b'{"id":1}', 1_000_000)
    assert verify(b"k", b'{"id":1}', header, now=1_000_100)
    assert not verify(b"k", b'{"id":2}', header, now=1_000_100)
    assert not verify(b"other", b'{"id":1}', header, now=1_000_100)
    assert not verify(b"k", b'{"id":1}', header, now=1_000_400)  # past the 5-minute tolerance
    assert not verify(b"k", b'{"id":1}', "v1=abc", now=1_000_000)
