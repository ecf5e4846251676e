"""The received-ids record: store contract on both stores (``store`` fixture), and the account
check of ``gatewayd.received_ids`` on a real store (cache, expiry, a store that is down)."""

from __future__ import annotations

import logging

import httpx
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


# -- the relay's hook, in process: a store that cannot record loses neither answer nor money --


def _responses_answer(stream: bool) -> bytes:
    import orjson

    response = {"id": "resp_up_1", "object": "response", "status": "completed", "model": "gpt-4.1-mini",
                "conversation": {"id": "conv_up_1"},
                "output": [{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": "hello", "annotations": []}]}],
                "usage": {"input_tokens": 10, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}}
    if not stream:
        return orjson.dumps(response)
    created = {**response, "status": "in_progress", "output": [], "usage": None}
    events = [("response.created", {"type": "response.created", "response": created, "sequence_number": 0}),
              ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "hello",
                                              "item_id": "msg_1", "output_index": 0, "content_index": 0,
                                              "sequence_number": 1}),
              ("response.completed", {"type": "response.completed", "response": response, "sequence_number": 2})]
    return b"".join(f"event: {name}\n".encode() + b"data: " + orjson.dumps(data) + b"\n\n" for name, data in events)


class Unread(httpx.AsyncByteStream):
    """An answer body not read yet, as from the network."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self):
        yield self.data


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("failure", [StoreUnavailable("down"), RuntimeError("a bug of ours")])
async def test_an_answer_whose_ids_cannot_be_recorded_is_delivered_and_charged(tmp_path, caplog, stream, failure):
    from tests.inproc import Gateway

    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        import orjson

        seen.append(orjson.loads(request.content))
        streamed = seen[-1].get("stream") is True
        kind = "text/event-stream" if streamed else "application/json"
        return httpx.Response(200, stream=Unread(_responses_answer(streamed)), headers={"content-type": kind})

    gw = Gateway(tmp_path, handler)
    try:
        account_id, secret = await gw.funded_key()

        async def failing(*args):
            raise failure

        gw.store.record_received_ids = failing
        auth = {"authorization": f"Bearer {secret}"}
        body = {"model": "gpt-4.1-mini", "input": "hi", "stream": stream}
        with caplog.at_level(logging.WARNING):
            response = await gw.http.post("/v1/responses", json=body, headers=auth)
        assert response.status_code == 200
        assert b"resp_up_1" in response.content and (b"response.completed" in response.content or not stream)
        [row] = await gw.usage(account_id)
        assert row["status"] == "ok" and row["cost_nano"] == 10 * 400 + 5 * 1600
        assert "could not record" in caplog.text or "internal error while recording" in caplog.text
        # this instance remembers what it delivered: the same account may continue ...
        again = await gw.http.post("/v1/responses", headers=auth, json={
            "model": "gpt-4.1-mini", "input": "next", "previous_response_id": "resp_up_1",
            "conversation": {"id": "conv_up_1"}})
        assert again.status_code == 200 and seen[-1]["previous_response_id"] == "resp_up_1"
        # ... and no other account can
        _, other = await gw.funded_key()
        refused = await gw.http.post("/v1/responses", headers={"authorization": f"Bearer {other}"}, json={
            "model": "gpt-4.1-mini", "input": "steal", "previous_response_id": "resp_up_1"})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "previous_response_id"
        assert len(seen) == 2
    finally:
        await gw.aclose()
