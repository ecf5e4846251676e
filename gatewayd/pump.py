"""One streamed answer's life: forward the provider's events, settle, and never lose the bill.

Stream settlement. The attempts loop (:mod:`gatewayd.failover`) opens the provider's stream
and hands it to a :class:`StreamPump`, which

- forwards events through the route's pipe as they arrive (1:1, pass-through bytes
  untouched), and settles the request's tab *before* the terminal event goes out;
- turns every failure after the first byte into an error event in the client's format
  (and every failure before it into ``AttemptFailed`` for the relay's next route);
- when the client leaves mid-stream (:meth:`StreamPump.client_left`), reads the provider's
  stream on for at most the hang-up grace (``[server] hangup_grace_s``), only to catch a
  terminal event already on its way, then closes it, so the provider stops generating. The
  charge is the provider's usage if it came within the grace, else
  :func:`gatewayd.billing.cut.cut_usage` (input, output produced so far, and the hidden
  reasoning fallback), never more than the hold (docs/billing.md, "A client that hangs up").

After the first byte the stream is forwarded by a task the daemon owns
(:mod:`gatewayd.reply`, :mod:`gatewayd.hangups`), not the client's handler, so the handler
ends at once when the client leaves while this finishes the stream within the grace. Reads
are shielded from the cancellation of a send to the client (cancelling a read in the middle
closes the provider connection); the grace is the read's own deadline. :class:`AnswerStream`
is the stream as the client gets it, whose ``aclose`` settles whatever the pump did not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, AsyncIterator

import math

import httpx
import trio

from gatewayd import tokens
from gatewayd.attempt import PROVIDER_FAULTS, AttemptFailed
from gatewayd.billing.cut import cut_usage
from gatewayd.billing.estimate import prompt_transcript
from gatewayd.billing.ledger import store_unavailable
from gatewayd.billing.tab import Outcome, Tab, store_failed_while_settling
from gatewayd.catalogue import ModelRoute
from gatewayd.concurrency import Ticket
from gatewayd.errors import GatewayError, UpstreamError, our_fault
from gatewayd.formats.errors import InvalidAnswer, provider_json
from gatewayd.providers.base import Route
from gatewayd.store.base import StoreUnavailable

if TYPE_CHECKING:
    from gatewayd.failover import Failover

# After the client left, within the grace: read at most this many bytes of provider events per
# token the hold covers (an SSE event carrying one text delta is 100-250 bytes; usage events are
# small), plus a floor. A provider that sends more than that is ignoring the cap we sent.
BYTES_PER_ALLOWED_TOKEN = 512
MIN_READ_AFTER_LEAVING = 1 << 20

DRAIN_S = 0.05
DRAIN_BYTES = 65536


class StreamPump:
    def __init__(self, attempts: Failover, response: httpx.Response, route: Route, tab: Tab,
                 target: ModelRoute) -> None:
        self.attempts = attempts  # its drain, router, received ids and idle timeout
        self.response = response
        self.route = route
        self.tab = tab
        self.target = target
        self.pipe = route.make_pipe()
        self.splitter = route.make_splitter()  # SSE, or Bedrock's event stream
        self.chunks = response.aiter_raw()
        self.started = False  # bytes reached (were yielded towards) the client
        self.left = False  # the client hung up (client_left): read on only within the grace
        self.read_deadline = math.inf  # the grace's end, once the client left
        self._reading: trio.CancelScope | None = None  # the read in progress, if any

    def client_left(self, grace_s: float) -> None:
        """The client hung up: the read in progress and any later one end at the grace's end
        (module doc). Called from the client's handler; the stream's own task finishes."""
        if self.left:
            return
        self.left = True
        self.read_deadline = trio.current_time() + grace_s
        if self._reading is not None:
            self._reading.deadline = min(self._reading.deadline, self.read_deadline)

    async def _read(self) -> tuple[bytes | None, bool]:
        """The next raw chunk (None at the end), and whether the read was cut: by a shutdown,
        or by the hang-up grace's end once the client left. After the first byte the read is
        shielded from the cancellation of a send (module doc). Silence for the idle timeout is
        the connection's read timeout (``httpx.ReadTimeout``), which httpcore keeps on trio's
        clock: no scope of ours per chunk but this one (7 us each)."""
        chunk = None
        with trio.CancelScope(shield=self.started, deadline=self.read_deadline) as grace:
            self._reading = grace
            with self.attempts.drain.read() as reading:
                chunk = await anext(self.chunks, None)
        self._reading = None
        return chunk, reading.cancelled_caught or grace.cancelled_caught

    async def run(self) -> AsyncIterator[bytes]:
        """Forward the stream as it arrives; settle before the terminal event is sent.

        Until the first bytes are yielded nothing has reached the client (``run`` reads
        that far before answering 200), so a failure there raises ``AttemptFailed`` and
        leaves the tab to the relay (another route may serve the request); after that,
        failures become an error event in the client's format and what was produced is
        charged. Every way out is inside the handlers, and the shielded ``finally``
        settles whatever is still held.
        """
        pipe, tab = self.pipe, self.tab
        status = Outcome.CLIENT_DISCONNECTED
        try:
            try:
                while True:
                    chunk, cut = await self._read()
                    if cut and self.left:
                        return  # the grace after the hang-up ran out (or a shutdown came in it)
                    if cut:
                        status = Outcome.SHUTDOWN
                        if not self.started:
                            raise GatewayError(503, "the gateway is shutting down", "shutting_down",
                                               model_step=True)
                        await self._settle(status)
                        yield pipe.error_event("the gateway is shutting down; the stream was cut and is incomplete")
                        return
                    if chunk is None:
                        out = pipe.feed(self.splitter.flush())
                        if out:
                            self.started = True
                            yield out
                        break
                    events = self.splitter.feed(chunk)
                    if not self.started and events and events[0].data != b"[DONE]":
                        provider_json(events[0].data)  # a body that is not SSE JSON fails before any byte
                    out = pipe.feed(events)
                    if pipe.failed and out:  # the provider's error event ends the stream: settle first
                        status = Outcome.UPSTREAM_ERROR
                        await self._settle(status)
                    if out:
                        self.started = True
                        yield out
                    if pipe.complete or pipe.failed:
                        break
                if pipe.complete and not pipe.failed:
                    closing = pipe.closing()  # made before settling: if it fails, the row says so
                    status = Outcome.OK
                    await self._settle(status)
                    if pipe.received_ids:
                        with trio.CancelScope(shield=True):
                            await self.attempts.received_ids.record(tab.hold.account.id, pipe.received_ids,
                                                                    tab.hold.request_id)
                    yield closing
                    return
                if pipe.failed:
                    status = Outcome.UPSTREAM_ERROR
                    await self._settle(status)
                    if pipe.complete:
                        yield pipe.closing()
                    return
                status = Outcome.UPSTREAM_BROKEN
                if not self.started:
                    raise AttemptFailed(
                        GatewayError(502, "the provider ended the stream before sending anything", "bad_gateway",
                                     model_step=True),
                        status.value, reason="stream ended before its first event")
                await self._settle(status)
                yield pipe.error_event("the provider ended the stream early; the output is incomplete")
            except (AttemptFailed, GatewayError):
                raise  # decided above (a refusal before any byte, or the shutdown cut): not a fault
            except UpstreamError as e:
                # a pipe or splitter raises it only for a refusal in the first event (a blocked
                # prompt; Bedrock's exception frame), before any byte reached the client: answered as
                # the provider's error, nothing charged; a 429 or 5xx gives way to the next route,
                # as that status on the status line would
                status = Outcome.UPSTREAM_ERROR
                retryable = e.status == 429 or e.status >= 500
                raise AttemptFailed(None, status.value, upstream=e, retryable=retryable,
                                    retry_after_s=self.route.retry_after(e) if retryable else None,
                                    reason=f"refused: {e.message(for_operator=True)[:200]}") from None
            except httpx.ReadTimeout:
                status = Outcome.IDLE_TIMEOUT
                idle = f"the provider sent nothing for {self.attempts.upstream.stream_idle_timeout_s:g} seconds"
                if not self.started:
                    raise AttemptFailed(GatewayError(504, idle, "upstream_timeout", model_step=True), status.value,
                                        reason="no first event within the idle time") from None
                await self._settle(status)
                yield pipe.error_event(f"{idle}; the stream was closed and is incomplete", "timeout_error")
                return
            except (httpx.HTTPError, *PROVIDER_FAULTS) as e:
                if not self.started:
                    status = Outcome.UPSTREAM_INVALID
                    raise AttemptFailed(
                        GatewayError(502, f"the provider returned an invalid response ({type(e).__name__})",
                                     "bad_gateway", model_step=True),
                        status.value, reason=f"invalid stream ({type(e).__name__})") from None
                status = Outcome.UPSTREAM_BROKEN
                await self._settle(status)
                yield pipe.error_event(f"the provider stream broke off ({type(e).__name__}); the output is incomplete")
                return
            except StoreUnavailable:  # the settlement could not be written: not a bug, and not the provider's
                status = Outcome.INTERNAL_ERROR
                store_failed_while_settling(tab)
                if not self.started:
                    raise store_unavailable() from None
                yield pipe.error_event("the gateway's database is unavailable; the stream was closed")
                return
            except Exception as e:  # a pipe or translator of ours failed: the gateway's fault, said so
                status = Outcome.INTERNAL_ERROR
                error = our_fault(tab.hold.request_id, "while translating the provider's stream", e)
                if not self.started:
                    raise error from None
                await self._settle(status)
                yield pipe.error_event(f"{error.message}; the output is incomplete")
                return
        finally:
            with trio.CancelScope(shield=True):
                await self._close(status)

    async def _close(self, status: Outcome) -> None:
        """The shielded end of every stream: within the grace, catch a terminal event already
        on its way if the client left; give the connection back (or close it), settle what is
        still held."""
        pipe, tab = self.pipe, self.tab
        try:
            if self.started and not tab.settled and status is Outcome.CLIENT_DISCONNECTED:
                await self._read_within_grace()
            if pipe.complete:
                await _drain(self.chunks)
            await self.chunks.aclose()  # type: ignore[attr-defined]
            await self.response.aclose()
            if self.started and status in (Outcome.IDLE_TIMEOUT, Outcome.UPSTREAM_BROKEN, Outcome.UPSTREAM_ERROR):
                self.attempts.router.failed(self.target,
                                            f"stream {status.value.replace('_', ' ')} after its first byte")
        finally:
            if not tab.settled:
                if self.started:
                    await self._settle(status)
                elif status in (Outcome.SHUTDOWN, Outcome.INTERNAL_ERROR):  # refused: the client got nothing
                    await tab.release(status, 503 if status is Outcome.SHUTDOWN else 500)
                # otherwise nothing reached the client: the relay settles (or tries another route)

    async def _count_prompt(self, body: dict, fmt: str) -> int:
        """The prompt counted with the model family's tokenizer (in a worker thread when long),
        plus the flat allowances for what is not text: a cut stream's input is counted, not
        estimated."""
        text, flat = prompt_transcript(body, fmt)
        return await tokens.count_off_loop(text, self.tab.model.family) + flat

    async def _read_within_grace(self) -> None:
        """The client left: read the provider's stream on (output discarded) until its terminal
        event, its end, the grace's end, the idle timeout, a shutdown or the byte budget, so
        that a usage already on its way is the charge; then the caller closes the stream."""
        if not self.left:  # closed for another reason than a hang-up seen by the reply: the same grace
            self.client_left(self.attempts.hangups.grace_s)
        budget = max(MIN_READ_AFTER_LEAVING, self.tab.output_allowance * BYTES_PER_ALLOWED_TOKEN)
        try:
            while not (self.pipe.complete or self.pipe.failed) and budget > 0:
                chunk, cut = await self._read()
                if cut or chunk is None:
                    self.pipe.feed(self.splitter.flush())
                    return
                budget -= len(chunk)
                self.pipe.feed(self.splitter.feed(chunk))
        except (httpx.HTTPError, UpstreamError, InvalidAnswer):
            return  # the provider broke off or timed out: the usage seen so far, then the fallback

    async def _settle(self, status: Outcome) -> None:
        """Charge the stream: the provider's final usage when its terminal event came, else
        :func:`gatewayd.billing.cut.cut_usage` (what was reported, what was streamed counted
        offline, and the hold's output allowance when hidden reasoning may have been billed).

        Never skipped: should counting fail, the fault is logged with the request id and the
        usage seen so far is charged, so the hold is released and the usage row written."""
        tab, pipe, route = self.tab, self.pipe, self.route
        if tab.settled:
            return
        with trio.CancelScope(shield=True):
            usage = pipe.usage
            # a pipe may report tool calls without token counts: count then, too
            if usage is None or not pipe.complete or not (usage.input_tokens or usage.output_tokens):
                try:
                    produced = await tokens.count_off_loop(pipe.produced_text(), tab.model.family)
                    prompt = route.input_tokens_estimate
                    if not (usage and usage.input_tokens) and tab.prompt is not None:
                        # counted, and never more than the hold's estimate (the hold bounds a charge)
                        prompt = min(await self._count_prompt(*tab.prompt), max(tab.input_estimate, prompt))
                except Exception as e:
                    our_fault(tab.hold.request_id, "while counting what the stream produced", e)  # logs it
                    produced, prompt = 0, route.input_tokens_estimate
                usage = cut_usage(usage, produced=produced, prompt=prompt, output_allowance=route.output_tokens,
                                  hidden_possible=tab.hidden_possible)
            await tab.settle(usage, status, 200)


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """After the terminal event, read what is left of the upstream body (the chunked-encoding
    end, a trailing newline) so the connection goes back to the pool instead of being closed:
    a stream that stops reading at the terminal event costs the next request a new TCP (and
    TLS) connection to the provider. Bounded in time and bytes; a failure here only means
    the connection is not reused."""
    left = DRAIN_BYTES
    with trio.move_on_after(DRAIN_S):
        try:
            async for chunk in chunks:
                left -= len(chunk)
                if left < 0:
                    return
        except httpx.HTTPError:
            return


class AnswerStream:
    """A streamed answer as the client gets it: the bytes ``run`` read ahead, then the pump.

    Whoever sends it must ``aclose`` it whatever happens (``api_routes`` does, in a
    ``finally`` that also covers sending the status line): closing closes the pump, whose
    own shielded ``finally`` settles the tab; should the pump never have run to a
    settlement, the tab is settled here. So a stream's money never waits for a garbage
    collector's finalizer."""

    def __init__(self, first: bytes, pump: AsyncIterator[bytes], tab: Tab, source: StreamPump | None = None) -> None:
        self._first = first
        self._pump = pump
        self.tab = tab
        self.source = source  # the pump behind ``pump``: told when the client leaves
        self.ticket: Ticket | None = None  # the request's place in the in-flight count, left once closed

    def client_left(self, grace_s: float) -> None:
        """The client hung up: its slots are free now; the stream is finished within the
        grace by whoever forwards it (a task the daemon owns, ``gatewayd.reply``)."""
        if self.source is not None:
            self.source.client_left(grace_s)
        if self.ticket is not None:
            self.ticket.leave()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._first:
            yield self._first
        async for out in self._pump:
            yield out

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            try:
                await self._pump.aclose()  # type: ignore[attr-defined]
            finally:
                try:
                    if not self.tab.settled:
                        await self.tab.abandon(Outcome.CLIENT_DISCONNECTED, 499)
                finally:
                    if self.ticket is not None:
                        self.ticket.leave()
