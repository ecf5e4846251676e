"""A client that leaves a non-streamed request (issue 30, point 1), in process.

Each provider's own rule (docs/billing.md, "A client that hangs up"): one that finishes and
bills an answer whose client left is read on by a task the daemon owns, the client's handler
and slots gone at once, and charged at the provider's usage; one that stops and bills what it
made is closed when the client leaves and charged as a cut request. The provider here is an
``httpx.MockTransport`` that answers only when the test lets it.
"""

from __future__ import annotations

import httpx
import orjson
import pytest
import trio

from tests.inproc import Gateway, body_then_disconnect, post_scope

ANSWER = {"id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-4.1-mini",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi there"}, "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}
BODY = {"model": "gpt-4.1-mini", "max_tokens": 50, "messages": [{"role": "user", "content": "hello there"}]}


class SlowProvider:
    """Answers once ``go`` is set; records whether its request was cut meanwhile."""

    def __init__(self) -> None:
        self.called = trio.Event()
        self.go = trio.Event()
        self.cut = False
        self.answered = False

    async def handle(self, request: httpx.Request) -> httpx.Response:
        async for _ in request.stream:  # type: ignore[union-attr]  # the bytes reached the provider: it can bill the input
            pass
        self.called.set()
        try:
            await self.go.wait()
        except trio.Cancelled:
            self.cut = True
            raise
        self.answered = True
        return httpx.Response(200, json=ANSWER)


async def leave_mid_request(gw: Gateway, provider: SlowProvider, secret: str) -> None:
    """The client posts, and leaves once the provider is generating; returns when its handler did."""
    raw = orjson.dumps(BODY)
    leave = trio.Event()

    async def send(message):
        raise AssertionError(f"nothing is sent to a client that left: {message}")

    async def leave_when_called() -> None:
        await provider.called.wait()
        leave.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(leave_when_called)
        with trio.fail_after(10):
            await gw.app(post_scope("/v1/chat/completions", secret, raw), body_then_disconnect(raw, leave), send)


async def test_a_provider_that_finishes_the_answer_is_read_on_by_the_daemon_and_its_usage_charged(tmp_path):
    provider = SlowProvider()
    gw = Gateway(tmp_path, provider.handle)
    try:
        account_id, secret = await gw.funded_key()
        await leave_mid_request(gw, provider, secret)
        # the handler is gone and its slots are free, while the provider is still generating
        assert gw.relay.in_flight.by_account == {} and gw.relay.in_flight.by_key == {}
        assert gw.relay.hangups.open == 1 and not provider.answered and not provider.cut
        provider.go.set()
        [row] = await gw.usage(account_id)  # waits for the daemon's task
        assert provider.answered and not provider.cut
        assert (row["status"], row["input_tokens"], row["output_tokens"]) == ("client_disconnected", 9, 2)
        account = gw.directory.accounts[account_id]
        assert account.held_nano == 0 and account.balance_nano == 10 * 10**9 - row["cost_nano"] > 0
    finally:
        await gw.aclose()


async def test_a_provider_that_stops_is_closed_and_charged_as_a_cut_request(tmp_path, monkeypatch):
    from gatewayd import failover

    monkeypatch.setattr(failover, "finishes_abandoned_answers", lambda protocol: False)
    provider = SlowProvider()
    gw = Gateway(tmp_path, provider.handle)
    try:
        account_id, secret = await gw.funded_key()
        await leave_mid_request(gw, provider, secret)
        assert provider.cut and not provider.answered  # closed with the client
        assert gw.relay.in_flight.by_account == {}
        [row] = await gw.usage(account_id)
        # its input, counted; nothing was shown, and gpt-4.1-mini reasons in no hidden way
        assert (row["status"], row["output_tokens"]) == ("client_disconnected", 0)
        assert 0 < row["input_tokens"] <= 20
        assert gw.directory.accounts[account_id].held_nano == 0
    finally:
        await gw.aclose()


@pytest.mark.parametrize("finishes", [True, False], ids=["finishes", "stops"])
async def test_the_request_log_line_says_what_was_charged(tmp_path, monkeypatch, finishes):
    """The line of a request whose client left is written once it is settled, with the charge."""
    from gatewayd import failover, logs

    monkeypatch.setattr(failover, "finishes_abandoned_answers", lambda protocol: finishes)
    lines: list[dict] = []
    monkeypatch.setattr(logs, "request_line", lambda fields, level: lines.append(fields))
    provider = SlowProvider()
    gw = Gateway(tmp_path, provider.handle)
    try:
        account_id, secret = await gw.funded_key()
        await leave_mid_request(gw, provider, secret)
        provider.go.set()
        [row] = await gw.usage(account_id)
        [line] = lines
        assert line["usage_status"] == "client_disconnected" and line["status"] == 499
        assert line["cost_nano"] == row["cost_nano"] > 0
    finally:
        await gw.aclose()
