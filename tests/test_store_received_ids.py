"""The received-ids record: store contract on both stores (``store`` fixture), and the account
check of ``gatewayd.received_ids`` on a real store (cache, expiry, a store that is down)."""

from __future__ import annotations

import logging

import pytest

from gatewayd.errors import BodyError, GatewayError
from gatewayd.received_ids import RETENTION_S, ReceivedIds
from gatewayd.store.base import StoreUnavailable

NOW = 1_800_000_000


async def test_received_ids_are_per_account_and_expire(store):
    await store.record_received_ids("acct_a", ["resp_1", "conv_1", "resp_1"], NOW + 100)
    await store.record_received_ids("acct_b", ["resp_2"], NOW + 100)
    assert await store.received_ids("acct_a", ["resp_1", "conv_1", "resp_2", "resp_9"], NOW) == {"resp_1", "conv_1"}
    assert await store.received_ids("acct_b", ["resp_1", "resp_2"], NOW) == {"resp_2"}
    assert await store.received_ids("acct_a", [], NOW) == set()
    # expired at its expiry instant
    assert await store.received_ids("acct_a", ["resp_1"], NOW + 100) == set()


async def test_receiving_again_moves_the_expiry_and_forgetting_deletes_only_expired_rows(store):
    await store.record_received_ids("acct_a", ["conv_1", "resp_1"], NOW + 10)
    await store.record_received_ids("acct_a", ["conv_1"], NOW + 1000)  # the conversation's next answer
    assert await store.forget_received_ids(NOW + 10) == 1
    assert await store.received_ids("acct_a", ["conv_1", "resp_1"], NOW) == {"conv_1"}
    assert await store.forget_received_ids(NOW + 10) == 0
    await store.record_received_ids("acct_a", [], NOW)  # nothing to record: no statement


class Clock:
    def __init__(self) -> None:
        self.now = float(NOW)

    def __call__(self) -> float:
        return self.now


async def test_check_passes_the_accounts_own_ids_and_refuses_others_naming_the_field(store):
    clock = Clock()
    ids = ReceivedIds(store, clock=clock)
    await ids.record("acct_a", ["resp_1", "conv_1"], "req_1")
    await ids.check("acct_a", [("previous_response_id", "resp_1"), ("conversation.id", "conv_1")])
    with pytest.raises(BodyError) as caught:
        await ids.check("acct_b", [("previous_response_id", "resp_1")])
    assert caught.value.param == "previous_response_id" and "'resp_1'" in caught.value.message
    with pytest.raises(BodyError) as caught:
        await ids.check("acct_a", [("previous_response_id", "resp_1"), ("conversation", "conv_2")])
    assert caught.value.param == "conversation"
    with pytest.raises(BodyError):
        await ids.check("acct_a", [("previous_response_id", "")])
    with pytest.raises(BodyError):
        await ids.check("acct_a", [("previous_response_id", "r" * 1000)])


async def test_an_id_recorded_by_another_process_is_found_in_the_store_and_expires(store):
    clock = Clock()
    await ReceivedIds(store, clock=clock).record("acct_a", ["resp_1"])
    other = ReceivedIds(store, clock=clock)  # another instance: nothing in its cache
    await other.check("acct_a", [("previous_response_id", "resp_1")])
    clock.now += RETENTION_S + 1
    with pytest.raises(BodyError):
        await ReceivedIds(store, clock=clock).check("acct_a", [("previous_response_id", "resp_1")])


class DownStore:
    """A store that cannot be reached."""

    async def record_received_ids(self, *args):
        raise StoreUnavailable("down")

    async def received_ids(self, *args):
        raise StoreUnavailable("down")

    async def forget_received_ids(self, *args):
        raise StoreUnavailable("down")


async def test_a_store_that_is_down_loses_no_answer_and_this_process_remembers(caplog):
    ids = ReceivedIds(DownStore(), clock=Clock())
    with caplog.at_level(logging.WARNING, logger="gatewayd.received_ids"):
        await ids.record("acct_a", ["resp_1"], "req_1")  # does not raise
    assert "could not record" in caplog.text
    await ids.check("acct_a", [("previous_response_id", "resp_1")])  # from the cache
    with pytest.raises(GatewayError) as caught:
        await ids.check("acct_a", [("previous_response_id", "resp_2")])
    assert caught.value.status == 503 and caught.value.code == "store_unavailable"


async def test_old_records_are_pruned_at_most_hourly(store):
    clock = Clock()
    ids = ReceivedIds(store, clock=clock)
    await store.record_received_ids("acct_a", ["resp_old"], NOW - 1)
    await ids.record("acct_a", ["resp_1"])
    assert await store.forget_received_ids(NOW - 1000) == 0  # nothing expired that early
    clock.now += 3601
    await ids.record("acct_a", ["resp_2"])  # prunes
    assert await store.forget_received_ids(NOW) == 0  # resp_old is gone already
    assert await store.received_ids("acct_a", ["resp_1", "resp_2"], int(clock.now)) == {"resp_1", "resp_2"}
