"""A client that hangs up (issue 30, point 1), in process: streams and non-streamed answers.

A stream whose client left is read on for the hang-up grace only, to catch a usage already on
its way, then closed; a shutdown meanwhile settles it as the hang-up it is. For a non-streamed
answer, each provider's own rule (docs/billing.md, "A client that hangs up"): one that finishes and
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
import trio.testing

from gatewayd import tokens
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


# -- streams ----------------------------------------------------------------------------------


def chunk(doc: dict) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\n\n"


def delta(text: str) -> bytes:
    return chunk({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1-mini",
                  "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})


PRODUCED = tokens.count("w0 w1 w2 ")  # the first three deltas, counted as the cut rule counts them
USAGE_EVENTS = [chunk({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1-mini",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                chunk({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1-mini",
                       "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 40, "total_tokens": 49}}),
                b"data: [DONE]\n\n"]


class SlowStream:
    """Streams ``first`` deltas, then waits for ``more`` before the rest (``rest`` deltas and,
    if ``usage``, the usage events); records whether it was closed before its end."""

    def __init__(self, first: int = 3, rest: int = 37) -> None:
        self.first, self.rest = first, rest
        self.more = trio.Event()
        self.closed_early = False
        self.finished = False

    async def handle(self, request: httpx.Request) -> httpx.Response:
        async def events():
            try:
                for i in range(self.first):
                    yield delta(f"w{i} ")
                await self.more.wait()
                for i in range(self.rest):
                    yield delta(f"x{i} ")
                for event in USAGE_EVENTS:
                    yield event
                self.finished = True
            except BaseException:
                self.closed_early = True
                raise

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=events())


async def stream_then_leave(gw: Gateway, secret: str, events_wanted: int = 2) -> list[bytes]:
    """A streaming client that reads ``events_wanted`` chunks and leaves; returns when its handler did."""
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    raw = orjson.dumps(body)
    leave = trio.Event()
    got: list[bytes] = []

    async def send(message):
        if message.get("body"):
            got.append(message["body"])
            if len(got) >= events_wanted:
                leave.set()
        await trio.sleep(0)

    with trio.fail_after(10):
        await gw.app(post_scope("/v1/chat/completions", secret, raw), body_then_disconnect(raw, leave), send)
    return got


@pytest.fixture
def jumping_clock():
    """Trio's clock jumps ahead when every task waits longer than 50 ms of real time (store
    threads finish first): the grace is measured on it, not on the wall."""
    return trio.testing.MockClock(autojump_threshold=0.05)


async def test_a_stream_whose_client_left_frees_its_slots_and_is_closed_at_the_grace(tmp_path, jumping_clock):
    provider = SlowStream()
    gw = Gateway(tmp_path, provider.handle)
    try:
        account_id, secret = await gw.funded_key()
        await stream_then_leave(gw, secret)
        assert gw.relay.in_flight.by_account == {} and gw.relay.hangups.open == 1  # slots free; the stream not yet
        began = trio.current_time()
        await gw.relay.hangups.wait_idle()
        assert trio.current_time() - began == pytest.approx(gw.relay.hangups.grace_s, abs=0.1)  # trio's mock clock
        assert provider.closed_early and not provider.finished
        [row] = await gw.usage(account_id)
        # what was produced, counted: the three deltas; not the provider's 40
        assert (row["status"], row["output_tokens"]) == ("client_disconnected", PRODUCED)
        assert gw.directory.accounts[account_id].held_nano == 0
    finally:
        await gw.aclose()


async def test_a_usage_already_on_its_way_within_the_grace_is_the_charge(tmp_path):
    provider = SlowStream()
    gw = Gateway(tmp_path, provider.handle)
    try:
        account_id, secret = await gw.funded_key()
        await stream_then_leave(gw, secret)
        provider.more.set()  # the rest, usage included, comes within the grace
        [row] = await gw.usage(account_id)
        assert provider.finished and not provider.closed_early
        assert (row["status"], row["input_tokens"], row["output_tokens"]) == ("client_disconnected", 9, 40)
    finally:
        await gw.aclose()


async def test_a_hang_up_during_a_shutdown_is_settled_as_a_hang_up(tmp_path):
    provider = SlowStream()
    gw = Gateway(tmp_path, provider.handle)
    try:
        account_id, secret = await gw.funded_key()
        await stream_then_leave(gw, secret)
        gw.relay.drain.begin(0)  # the shutdown's grace ends now: the read within the hang-up's grace is cut
        [row] = await gw.usage(account_id)
        assert provider.closed_early
        assert (row["status"], row["output_tokens"]) == ("client_disconnected", PRODUCED)
    finally:
        await gw.aclose()
