"""The SQLite store's money path: when hold rows are written (lazily), on a real file."""

from __future__ import annotations

import attrs
import trio

from gatewayd.billing.ledger import Ledger
from gatewayd.billing.pricing import Bill, Line
from gatewayd.config import load_config
from gatewayd.directory import Directory
from gatewayd.formats.usage import Usage
from gatewayd.store import sqlite as sqlite_store
from gatewayd.store.base import UsageQuery
from gatewayd.store.sqlite import SQLiteStore


async def _setup(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    directory = Directory(load_config(None, environ={}), store)
    account = await directory.create_account("l@example.com")
    await directory.pay(account, 1_000_000)
    key, _ = await directory.create_key(account, name="k", spend_limit_nano=600_000)
    return store, directory, account, key


def _hold_rows(store):
    return store.read_blocking(lambda conn: conn.execute("SELECT request_id, instance_id FROM holds").fetchall())



def _bill(nano: int) -> Bill:
    return Bill((Line("output", 1, nano, nano),))


async def test_quick_settle_writes_no_hold_row(tmp_path):
    store, _, account, key = await _setup(tmp_path)
    ledger = Ledger(store)
    hold = await ledger.reserve(account, key, 500_000, request_id="r1", model="m", endpoint="chat", stream=False)
    assert (account.balance_nano, account.held_nano, key.held_nano) == (500_000, 500_000, 500_000)
    bill = Bill((Line("input", 10, 5, 50), Line("output", 5, 10, 50), Line("tool:web_search", 1, 23, 23)))
    await ledger.settle(hold, Usage(10, 5), bill, status="ok", http_status=200)
    await ledger.settle(hold, Usage(10, 5), bill, status="ok", http_status=200)  # exactly once
    await store.flush()
    assert _hold_rows(store) == []
    assert (account.balance_nano, account.held_nano, key.spent_nano, key.held_nano) == (1_000_000 - 123, 0, 123, 0)
    rows = store.read_blocking(lambda conn: conn.execute("SELECT cost_nano, hold_nano FROM usage").fetchall())
    assert [tuple(r) for r in rows] == [(123, 500_000)]
    # the row says what the charge is made of, and its lines add up to it
    [row] = await store.usage_rows(UsageQuery(account.id), 10)
    assert row.breakdown == bill.doc() and sum(line["nano"] for line in row.breakdown["lines"]) == row.cost_nano
    await store.close()


async def test_the_usage_row_records_the_bill_the_relay_makes(tmp_path):
    """pricing.bill's breakdown (tier, long context, tool calls) goes into the row as it is."""
    from fractions import Fraction

    from gatewayd.billing import pricing
    from gatewayd.catalogue import LongContext, Rates
    from gatewayd.formats.usage import tool_calls

    store, directory, account, key = await _setup(tmp_path)
    model = attrs.evolve(directory.config.models["gpt-4.1"], tool_prices={"web_search": 25_000},
                         long_context=LongContext(100, Rates(input=4_000, output=16_000)))
    usage = Usage(input_tokens=101, output_tokens=5, tool_calls=tool_calls({"web_search": 2}))
    bill = pricing.bill(model, usage, Fraction(1))
    ledger = Ledger(store)
    hold = await ledger.reserve(account, key, 500_000, request_id="r3", model=model.id, endpoint="chat",
                                stream=False)
    await ledger.settle(hold, usage, bill, status="ok", http_status=200)
    [row] = await store.usage_rows(UsageQuery(account.id), 10)
    assert row.cost_nano == bill.total_nano == 101 * 4_000 + 5 * 16_000 + 2 * 25_000  # long-context rates
    assert row.breakdown["long_context"] is True and row.breakdown["tier"] is None
    assert {line["dimension"]: line["nano"] for line in row.breakdown["lines"]} == {
        "input": 404_000, "output": 80_000, "tool:web_search": 50_000}
    assert row.hold_nano == 500_000
    await store.close()


async def test_long_hold_is_flushed_with_its_instance_then_deleted_at_settle(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_store, "HOLD_FLUSH_INTERVAL_S", 0.01)
    store, _, account, key = await _setup(tmp_path)
    ledger = Ledger(store)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.maintain)
        hold = await ledger.reserve(account, key, 100, request_id="r2", model="m", endpoint="chat", stream=True)
        await trio.sleep(0.1)
        await store.writer.flush()
        assert [tuple(r) for r in _hold_rows(store)] == [("r2", store.instance_id)]
        await ledger.settle(hold, Usage(), Bill(()), status="ok", http_status=200)
        assert _hold_rows(store) == []
        nursery.cancel_scope.cancel()
    await store.close()


async def test_a_second_process_on_the_same_file_is_refused(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    try:
        try:
            SQLiteStore(str(tmp_path / "g.db"))
            raise AssertionError("a second store opened the same SQLite file")
        except sqlite_store.DatabaseInUse as e:
            assert "serves one instance" in str(e) and "postgresql://" in str(e)
    finally:
        await store.close()
    again = SQLiteStore(str(tmp_path / "g.db"))  # closed: the lock is free again
    await again.close()
