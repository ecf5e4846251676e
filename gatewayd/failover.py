"""Attempts and failover: one request's routes tried in order until one answers.

``Failover.run`` takes the routes the relay built (the router's order, cut to
``routing.max_attempts``) and the request's tab, and for each route:

    call the provider (a fair share of the connection pool) -> status line ->
    plain answer: read it, translate it, settle the tab, answer 200;
    stream: read to the first bytes for the client, hand the tab to the stream, answer 200

A route that fails before any byte has reached the client (connect failure, no first
byte in time, 429, 5xx, an invalid or broken answer) gives way to the next, up to
``routing.deadline_s``; a 4xx other than 429 is the client's error and is answered at
once. Each outcome is told to the router (route health, stickiness, provider health).
Deadlines run on trio's clock (``trio.current_time``), so a test's ``MockClock`` drives them.
"""

from __future__ import annotations

import math
import time
from typing import Awaitable

import httpx
import trio

from gatewayd import telemetry, trace
from gatewayd.attempt import PROVIDER_FAULTS, AttemptFailed
from gatewayd import tokens
from gatewayd.billing.cut import cut_usage, hidden_output_possible
from gatewayd.billing.estimate import prompt_transcript
from gatewayd.billing.tab import Outcome, Tab
from gatewayd.concurrency import gateway_busy
from gatewayd.config import ModelRoute, RoutingSettings
from gatewayd.drain import Drain
from gatewayd.errors import GatewayError, UpstreamError, our_fault
from gatewayd.formats.usage import Usage
from gatewayd.hangups import Hangups
from gatewayd.providers.base import Call, Route
from gatewayd.providers.upstream import Upstream
from gatewayd.pump import AnswerStream, StreamPump
from gatewayd.received_ids import ReceivedIds
from gatewayd.protocols import finishes_abandoned_answers
from gatewayd.routing import Router


class Failover:
    """The attempts of every request of one relay: what they need, passed in."""

    def __init__(self, settings: RoutingSettings, upstream: Upstream, router: Router, drain: Drain,
                 received_ids: ReceivedIds, hangups: Hangups | None = None) -> None:
        self.settings = settings  # replaced on a config reload
        self.upstream = upstream
        self.router = router
        self.drain = drain
        self.received_ids = received_ids
        self.hangups = hangups or Hangups()  # the daemon's tasks for what a client left behind

    async def run(self, tab: Tab, call: Call, attempts: list[tuple[ModelRoute, Route]], key: str | None):
        """Try the built routes in order until one answers (module doc); settle a plain
        answer, hand a stream its tab, or answer the last failure."""
        model = call.model
        t = trace.get()
        deadline = trio.current_time() + self.settings.deadline_s
        tab.hidden_possible = hidden_output_possible(model, call.body)
        if call.client_format in ("chat", "messages", "responses", "gemini"):
            tab.prompt = (call.body, call.client_format)
        failures: list[tuple[AttemptFailed, Route]] = []
        for n, (target, route) in enumerate(attempts):
            if n and trio.current_time() >= deadline:
                break
            tab.input_estimate = route.input_tokens_estimate
            tab.output_allowance = route.output_tokens
            tab.hold.provider = target.provider.name
            tab.hold.attempts += 1
            if t is not None:
                t.provider = target.provider.name
                t.route = target.name
            last = n == len(attempts) - 1
            self.router.started(target)
            telemetry.attempt_started(n, target, route, call)
            began = trio.current_time()
            try:
                if route.stream:
                    first, pump, source = await self._open_stream(route, tab, target, last, deadline)
                    self.router.succeeded(target, trio.current_time() - began)
                    self.router.remember(model, key, target)
                    telemetry.first_chunk(first)
                    tab.hand_off()  # no checkpoint since the pump started: it settles from here on
                    return 200, {**route.headers, "cache-control": "no-cache"}, AnswerStream(
                        first, telemetry.watch_stream(pump), tab, source)
                body, usage, first_byte_s = await self._whole_answer(route, tab, target, last, deadline)
            except AttemptFailed as failure:
                telemetry.attempt_failed(failure)
                failures.append((failure, route))
                if failure.misconfigured:  # our key, not the request: the next route may serve it
                    self.router.misconfigured(target, failure.reason)
                    continue
                if failure.retryable:
                    self.router.failed(target, failure.reason, failure.retry_after_s)
                    continue
                self.router.succeeded(target)  # it answered: the refusal is about the request
                break
            except BaseException as error:
                self.router.abandoned(target)
                telemetry.attempt_error(error)
                raise
            self.router.succeeded(target, first_byte_s)
            self.router.remember(model, key, target)
            telemetry.answered(body)
            await tab.settle(usage, Outcome.OK, 200)
            if route.received_ids is not None:
                with trio.CancelScope(shield=True):
                    await self.received_ids.record(tab.hold.account.id, route.received_ids(body), tab.hold.request_id)
            return 200, route.headers, body
        return await self._all_failed(tab, model.id, failures)

    async def _all_failed(self, tab: Tab, model_id: str, failures: list[tuple["AttemptFailed", Route]]):
        """No route answered: the last provider error (status and message kept), else, when
        several routes were tried and none could be reached, 503 ``model_not_found``; a lone
        attempt keeps its own 502/504."""
        answered = [(f, r) for f, r in failures if f.upstream is not None]
        if answered:
            last, route = answered[-1]
            upstream = last.upstream
            assert upstream is not None
            # a 401/403 (the provider refused the gateway's key: the route is marked misconfigured)
            # is answered as the provider's errors are, its status and message kept (the spec)
            trace.refused("upstream_error", ("provider refused the gateway's credentials: " if last.misconfigured
                                             else "provider error ") + last.reason)
            status, body, headers = route.upstream_error(upstream)
            await tab.release(Outcome.UPSTREAM_ERROR, status)
            return status, {**route.headers, **headers}, body
        failure, _ = failures[-1]
        if len(failures) > 1 and not any(f.reached for f, _ in failures):
            await tab.release(failure.outcome, 503)
            raise GatewayError(
                503, f"No available channel for model {model_id} right now: none of its {len(failures)} routes "
                     f"could be reached (last: {failure.reason})", "model_not_found", model_step=True)
        assert failure.error is not None  # a failure without the provider's answer carries its own error
        await tab.release(failure.outcome, failure.error.status)
        raise failure.error

    def _cut_off(self, limit: float, last: bool, deadline: float) -> float:
        """How long an attempt may wait: no limit for the last route, nor when no other attempt
        could start after the cut (the deadline would have passed): cutting would gain nothing."""
        if last or not limit or trio.current_time() + limit >= deadline:
            return math.inf
        return limit

    async def _open_stream(self, route: Route, tab: Tab, target: ModelRoute, last: bool, deadline: float):
        """Call the provider and read up to the first bytes for the client, before answering
        200: a stream that fails before it starts (invalid, dropped, silent) can still go to
        another route, or be a plain 502/504. Unless this is the last route, the first bytes
        must come within ``first_byte_timeout_s``."""
        limit = self._cut_off(self.settings.first_byte_timeout_s, last, deadline)
        with trio.move_on_after(limit) as waiting:
            response = await self._call(route, tab)
            source = StreamPump(self, response, route, tab, target)
            pump = source.run()
            try:
                first = await pump.__anext__()
            except StopAsyncIteration:
                first = b""
            return first, pump, source
        assert waiting.cancelled_caught
        raise AttemptFailed(
            GatewayError(504, f"the provider sent nothing within {limit:g} seconds", "upstream_timeout",
                         model_step=True),
            "idle_timeout", reason=f"no first byte within {limit:g} s", reached=False,
        )

    async def _answer(self, route: Route, tab: Tab, last: bool, deadline: float) -> tuple[bytes, Usage, float]:
        """A non-streaming answer, its usage, and the time to its status line (the route's
        latency for ``gatewayctl routes``, as the time to the first event is a stream's).

        The spec puts no cut-off on it, and the last route never has one; while another
        route remains, a provider that sends no status line within
        ``routing.non_stream_first_byte_timeout_s`` (a hung provider looks like that) gives
        way to it, as does one whose whole answer takes longer than
        ``routing.non_stream_timeout_s`` when that is set."""
        settings = self.settings
        first_byte = self._cut_off(settings.non_stream_first_byte_timeout_s, last, deadline)
        limit = self._cut_off(settings.non_stream_timeout_s, last, deadline)
        began = trio.current_time()
        with trio.move_on_after(limit) as waiting:
            with trio.move_on_after(first_byte) as silent:
                response = await self._call(route, tab)
            first_byte_s = trio.current_time() - began
            if silent.cancelled_caught:
                raise AttemptFailed(
                    GatewayError(504, f"the provider did not start answering within {first_byte:g} seconds",
                                 "upstream_timeout", model_step=True),
                    "idle_timeout", reason=f"no status line within {first_byte:g} s", reached=False,
                )
            return (*await self._finish(response, route, tab), first_byte_s)
        assert waiting.cancelled_caught
        raise AttemptFailed(
            GatewayError(504, f"the provider did not answer within {limit:g} seconds", "upstream_timeout",
                         model_step=True),
            "idle_timeout", reason=f"no answer within {limit:g} s", reached=False,
        )

    async def _whole_answer(self, route: Route, tab: Tab, target: ModelRoute, last: bool,
                            deadline: float) -> tuple[bytes, Usage, float]:
        """A non-streamed answer, with each provider's rule for a client that leaves meanwhile
        (docs/billing.md, "A client that hangs up"; ``gatewayd.protocols.finishes_abandoned_answers``).

        A provider that finishes and bills an answer whose client left: the attempt runs in a
        task the daemon owns, which the client's handler waits for; a client that leaves ends
        its handler (its slots free at once) and the task reads the answer on and charges the
        provider's own usage. A provider that stops and bills what it made: the request is
        closed when the client leaves and charged as a cut stream (its input, and the hidden
        reasoning fallback)."""
        if not finishes_abandoned_answers(target.provider.protocol):
            try:
                return await self._answer(route, tab, last, deadline)
            except trio.Cancelled:
                with trio.CancelScope(shield=True):
                    await charge_cut_request(tab)
                raise
        await trio.lowlevel.checkpoint_if_cancelled()  # a client gone already: no provider call at all
        attempt = _OwnedAttempt()
        tab.hand_off()  # the task settles if the client leaves; the relay, if it stays
        self.hangups.start(attempt.run, self._answer(route, tab, last, deadline), tab)
        try:
            await attempt.done.wait()
        except trio.Cancelled:
            if attempt.done.is_set():  # the answer came in the same instant: charged as a hang-up here
                with trio.CancelScope(shield=True):
                    await attempt.settle_abandoned(tab)
            else:
                # the task charges the provider's usage when it has it; a provider silent for the
                # idle timeout from now is closed and the request charged as a cut one
                attempt.abandon(tab, trio.current_time() + self.upstream.stream_idle_timeout_s)
                t = trace.get()
                if t is not None:
                    t.settling = True
            raise
        tab.handed_off = False
        if attempt.error is not None:
            raise attempt.error
        assert attempt.result is not None
        return attempt.result

    async def cut_by_shutdown(self, tab: Tab) -> GatewayError:
        if tab.client_left:  # a hang-up during the shutdown is settled as a hang-up
            await charge_cut_request(tab)
        await tab.release(Outcome.SHUTDOWN, 503)
        return GatewayError(503, "the gateway is shutting down; the provider did not answer in time",
                            "shutting_down", model_step=True)

    async def _call(self, route: Route, tab: Tab) -> httpx.Response:
        t = trace.get()
        provider = tab.hold.provider or tab.model.provider.name
        # a client that left while the hold was taken (a database answering slowly) stops here,
        # before any byte goes to a provider: nothing of it can be billed
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            sent = time.perf_counter()
            with self.drain.read() as reading:
                response = await self.upstream.send(route.request, on_sent=tab.mark_sent,
                                                   account=tab.hold.account.id)
            if reading.cancelled_caught:
                raise await self.cut_by_shutdown(tab)
            if t is not None:
                t.upstream_ttfb_s = time.perf_counter() - sent
            self.router.provider_seen(provider, True)
        except httpx.PoolTimeout:  # every upstream connection of ours is in use: our capacity, not the route's
            await tab.release(Outcome.GATEWAY_BUSY, 503)
            raise gateway_busy() from None
        except httpx.ConnectTimeout:
            self.router.provider_seen(provider, False, "connect timeout")
            raise AttemptFailed(
                GatewayError(504, "the provider did not accept a connection in time", "upstream_timeout",
                             model_step=True),
                "upstream_unreachable", reason="connect timeout", reached=False) from None
        except httpx.ReadTimeout:  # only streams have a read timeout: the idle cut-off
            idle = self.upstream.stream_idle_timeout_s
            raise AttemptFailed(
                GatewayError(504, f"the provider sent nothing for {idle:g} seconds", "upstream_timeout",
                             model_step=True),
                "idle_timeout", reason=f"no status line within {idle:g} s", reached=False) from None
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as e:
            self.router.provider_seen(provider, False, type(e).__name__)
            raise AttemptFailed(
                GatewayError(502, f"the provider could not be reached ({type(e).__name__})", "bad_gateway",
                             model_step=True),
                "upstream_unreachable", reason=f"unreachable ({type(e).__name__})", reached=False) from None
        if response.status_code != 200:
            try:
                body = await response.aread()
            except httpx.HTTPError:
                body = b""
            finally:
                await response.aclose()
            error = UpstreamError(response.status_code, body, dict(response.headers))
            retryable = error.status == 429 or error.status >= 500
            raise AttemptFailed(
                None, "upstream_error", upstream=error, retryable=retryable,
                reason=f"{error.status}: {error.message(for_operator=True)[:200]}",
                retry_after_s=route.retry_after(error) if retryable else None,  # the adapter knows where
            ) from None
        return response

    async def _finish(self, response: httpx.Response, route: Route, tab: Tab) -> tuple[bytes, Usage]:
        try:
            with self.drain.read() as reading:
                raw = await response.aread()
            if reading.cancelled_caught:
                raise await self.cut_by_shutdown(tab)
        except httpx.HTTPError as e:
            raise AttemptFailed(
                GatewayError(502, f"the provider dropped the connection ({type(e).__name__})", "bad_gateway",
                             model_step=True),
                "upstream_broken", reason=f"answer broke off ({type(e).__name__})") from None
        finally:
            await response.aclose()
        try:
            body, usage = route.finish(raw)
        except UpstreamError as e:  # the provider refused inside a 200 (a blocked prompt): nothing charged
            raise AttemptFailed(None, "upstream_error", upstream=e, retryable=False,
                                reason=f"refused: {e.message(for_operator=True)[:200]}") from None
        except PROVIDER_FAULTS as e:
            raise AttemptFailed(
                GatewayError(502, "the provider returned an invalid response", "bad_gateway", model_step=True),
                "upstream_invalid", reason=f"invalid answer ({type(e).__name__})") from None
        except Exception as e:  # our translator failed on an answer it did not expect: nothing is charged
            await tab.release(Outcome.INTERNAL_ERROR, 500)
            raise our_fault(tab.hold.request_id, "while translating the provider's answer", e) from None
        return body, usage if usage is not None else Usage(input_tokens=route.input_tokens_estimate)




class _OwnedAttempt:
    """A non-streamed attempt run by a task the daemon owns (``Failover._whole_answer``): its
    result or failure for the client's handler, or, once the client left, its settlement."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.abandoned = False  # the client left: the task settles
        self.result: tuple[bytes, Usage, float] | None = None
        self.error: Exception | None = None
        self.scope = trio.CancelScope()  # the attempt: bounded once the client left

    def abandon(self, tab: Tab, deadline: float) -> None:
        self.abandoned = True
        tab.client_left = True  # a shutdown cut from now on settles as the hang-up it is
        self.scope.deadline = deadline

    async def run(self, answering: Awaitable[tuple[bytes, Usage, float]], tab: Tab) -> None:
        t = trace.get()
        try:
            with self.scope:
                self.result = await answering
        except Exception as e:  # the handler re-raises it; once the client left, settled below
            self.error = e
        finally:
            with trio.CancelScope(shield=True):
                if self.abandoned:
                    await self.settle_abandoned(tab)
                    trace.settled_later(t)
            self.done.set()

    async def settle_abandoned(self, tab: Tab) -> None:
        """The client left: the provider's usage of the answer it finished; a failure charges
        nothing more than its own path settled (a refusal, a broken answer: nothing)."""
        if self.result is not None:
            await tab.settle(self.result[1], Outcome.CLIENT_DISCONNECTED, 499)
        elif self.error is None:  # no answer within the bound: closed, charged as a cut request
            await charge_cut_request(tab)
        else:
            await tab.release(Outcome.CLIENT_DISCONNECTED, 499)


async def charge_cut_request(tab: Tab) -> None:
    """A non-streamed request closed because its client left, at a provider that stops and
    bills what it made: charged as a cut stream with nothing shown (``cut_usage``): its input
    counted (at most the hold's estimate) if it was sent, and the hidden reasoning fallback."""
    if tab.settled or not tab.sent:
        return
    prompt = tab.input_estimate
    if tab.prompt is not None:
        text, flat = prompt_transcript(*tab.prompt)
        try:
            prompt = min(prompt, await tokens.count_off_loop(text, tab.model.family) + flat)
        except Exception as e:  # noqa: BLE001 - counting is a fallback: the estimate is charged
            our_fault(tab.hold.request_id, "while counting the prompt of a cut request", e)  # logs it
    usage = cut_usage(None, produced=0, prompt=prompt, output_allowance=tab.output_allowance,
                      hidden_possible=tab.hidden_possible)
    await tab.settle(usage, Outcome.CLIENT_DISCONNECTED, 499)
