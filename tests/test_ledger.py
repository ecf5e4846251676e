"""The ledger on a real SQLite file: holds, settlement, and when hold rows are written."""

from __future__ import annotations

import trio

from gatewayd.billing.ledger import Ledger
from gatewayd.config import load_config
from gatewayd.directory import Directory
from gatewayd.errors import GatewayError
from gatewayd.formats.usage import Usage
from gatewayd.store.sqlite import SQLiteStore


async def _setup(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    directory = Directory(load_config(None, environ={}), store)
    account = await directory.create_account("l@example.com")
    await directory.pay(account, 1_000_000)
    key, _ = await directory.create_key(account, name="k", spend_limit_nano=600_000)
    return store, directory, account, key


def _hold_rows(store):
    return store.read_blocking(lambda conn: conn.execute("SELECT request_id FROM holds").fetchall())


async def test_quick_settle_writes_no_hold_row(tmp_path):
    store, _, account, key = await _setup(tmp_path)
    ledger = Ledger(store)
    hold = ledger.reserve(account, key, 500_000, request_id="r1", model="m", endpoint="chat", stream=False)
    assert (account.balance_nano, account.held_nano, key.held_nano) == (500_000, 500_000, 500_000)
    await ledger.settle(hold, Usage(10, 5), 123, status="ok", http_status=200)
    await ledger.settle(hold, Usage(10, 5), 123, status="ok", http_status=200)  # exactly once
    ledger.flush_holds()
    await store.flush()
    assert _hold_rows(store) == []
    assert (account.balance_nano, account.held_nano, key.spent_nano, key.held_nano) == (1_000_000 - 123, 0, 123, 0)
    rows = store.read_blocking(lambda conn: conn.execute("SELECT cost_nano FROM usage").fetchall())
    assert [r[0] for r in rows] == [123]
    store.close()


async def test_long_hold_is_flushed_then_deleted_at_settle(tmp_path):
    store, _, account, key = await _setup(tmp_path)
    ledger = Ledger(store)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ledger.persist_holds, 0.01)
        hold = ledger.reserve(account, key, 100, request_id="r2", model="m", endpoint="chat", stream=True)
        await trio.sleep(0.1)
        await store.flush()
        assert [r[0] for r in _hold_rows(store)] == ["r2"]
        await ledger.settle(hold, Usage(), 0, status="ok", http_status=200)
        assert _hold_rows(store) == []
        nursery.cancel_scope.cancel()
    store.close()


async def test_refusals_hold_nothing(tmp_path):
    store, _, account, key = await _setup(tmp_path)
    ledger = Ledger(store)
    try:
        ledger.reserve(account, key, 700_000, request_id="r3", model="m", endpoint="chat", stream=False)
        raise AssertionError("a hold over the key's limit was taken")
    except GatewayError as e:
        assert e.status == 403 and e.code == "pre_consume_token_quota_failed"
        assert e.message.startswith("token quota is not enough")
    key.spend_limit_nano = None
    try:
        ledger.reserve(account, key, 1_000_001, request_id="r4", model="m", endpoint="chat", stream=False)
        raise AssertionError("a hold over the balance was taken")
    except GatewayError as e:
        assert e.status == 403 and e.code == "insufficient_user_quota"
    assert (account.held_nano, key.held_nano) == (0, 0)
    store.close()
