"""The request path, in one place: the order of the steps and what happens on each failure.

    authenticate (key) -> IP -> parse body -> authorize (model list, group, availability,
    price) -> rate limit -> requests in flight (key, account) -> reserve (estimate, hold) ->
    route -> provider call (a fair share of the connection pool) ->
    respond / stream -> settle (charge, release hold, usage row)

Endpoint handlers (``gatewayd.endpoints``, which parse the body and check the few fields the
gateway reads) call ``Relay.admit`` and ``authorize``, then ``run`` a ``Call``; the
adapter table (``gatewayd.providers``) builds the ``Route`` for it: the upstream request
and the pipe that turns the upstream answer into the client's format. The request's money
has one owner, its :class:`~gatewayd.billing.tab.Tab`: settled exactly once, shielded from
cancellation, before the client receives the last byte; a stream's life is
:class:`gatewayd.pump.StreamPump`'s.
"""

from __future__ import annotations

import math
import time
from typing import Any, AsyncIterator

import attrs
import httpx
import orjson
import trio

from gatewayd import logs, tokens, trace
from gatewayd.access import Caller, Grant, authenticate, authorize_model, check_ip
from gatewayd.billing.cut import hidden_output_possible
from gatewayd.billing.estimate import route_hold
from gatewayd.billing.ledger import Ledger
from gatewayd.billing.pricing import Bill
from gatewayd.billing.tab import Outcome, Tab
from gatewayd.concurrency import InFlight, Ticket, gateway_busy
from gatewayd.config import Config, ModelRoute
from gatewayd.directory import Directory
from gatewayd.drain import Drain
from gatewayd.errors import BodyError, GatewayError, UpstreamError, model_not_found, our_fault
from gatewayd.formats.errors import InvalidAnswer
from gatewayd.formats.usage import Usage
from gatewayd.metrics import Metrics
from gatewayd import providers
from gatewayd.providers.base import Call, Route
from gatewayd.providers.upstream import Upstream
from gatewayd.pump import StreamPump
from gatewayd.ratelimit import MemoryWindows, RateLimiter
from gatewayd.received_ids import ReceivedIds
from gatewayd.routing import Router, sticky_key

# What counts as the provider's bad answer (a 502): JSON that does not parse (or a body that
# is not SSE, whose first event then does not parse), and the few shape checks made on
# purpose (InvalidAnswer). Every other exception from a route's callbacks or a pipe is a
# bug in gatewayd: a 500 ``internal_error``, logged with its traceback.
PROVIDER_FAULTS = (orjson.JSONDecodeError, InvalidAnswer)
LARGE_BODY_BYTES = 256 * 1024  # bodies over this get checkpoints between parsing, routing and building


@attrs.define
class Ctx:
    """One request as the listener saw it."""

    request_id: str
    client_ip: str | None
    headers: Any  # case-insensitive mapping
    endpoint: str  # "chat" | "messages" | "responses" | "embeddings" | "models"
    caller: Caller | None = None  # set by ``Relay.admit``: the API routes admit before reading the body


class AttemptFailed(Exception):
    """One route failed before any byte reached the client: another route may serve the request.

    ``error`` is what the client gets if this was the last attempt (``upstream`` instead
    when the provider answered with an error status); ``usage_status`` names the fault in
    the usage row; ``reached`` says whether the provider answered at all.
    """

    def __init__(self, error: GatewayError | None, usage_status: str, *, reason: str,
                 upstream: UpstreamError | None = None, retryable: bool = True,
                 retry_after_s: float | None = None, reached: bool = True) -> None:
        super().__init__(reason)
        self.error = error
        self.outcome = Outcome(usage_status)
        self.reason = reason
        self.upstream = upstream
        self.retryable = retryable
        self.retry_after_s = retry_after_s
        self.reached = reached or upstream is not None


class Relay:
    def __init__(self, config: Config, directory: Directory, ledger: Ledger, upstream: Upstream,
                 limiter: RateLimiter | None = None, router: Router | None = None) -> None:
        self._config = config
        self.directory = directory
        self.ledger = ledger
        self.upstream = upstream
        self.router = router or Router(config.routing)
        self.limiter = limiter or RateLimiter(MemoryWindows())
        self.drain = Drain()  # cuts upstream reads when a shutdown's grace period ends
        self.draining = False  # set when shutdown starts: /readyz answers 503 from then on
        self.readiness: Any = None  # gatewayd.ops.Readiness: the store check /readyz and the daemon share
        self.metrics = Metrics()
        self.in_flight = InFlight()  # requests in flight per key and account (the fair-share caps)
        self.received_ids = ReceivedIds(ledger.store)  # response ids each account may name again
        self.metrics.watch_holds(lambda: ledger.open_holds, lambda: ledger.held_nano)
        self._provider_up: dict[str, bool] = {}
        self.router.on_change = self._route_changed
        self._publish_routes()

    @property
    def config(self) -> Config:
        return self._config

    @config.setter
    def config(self, config: Config) -> None:
        """A reloaded config (gatewayd.reload) brings its ``[routing]`` settings with it."""
        self._config = config
        self.router.settings = config.routing
        self._publish_routes()

    def _publish_routes(self) -> None:
        """``gateway_route_up`` exists for every route from the start (1: nothing failed yet)."""
        for model in self._config.models.values():
            for route in model.routes:
                if route.name not in self.router.health:
                    self.metrics.route_up.labels(route.name).set(1)

    def _route_changed(self, route: ModelRoute, up: bool, reason: str) -> None:
        """A route was first used, cooled down, or answers again: ``gateway_route_up`` and a log line."""
        self.metrics.route_up.labels(route.name).set(1 if up else 0)
        logs.event(f"route {route.name} is {'healthy again' if up else 'cooling down'}", 20 if up else 30,
                       route=route.name, provider=route.provider.name, reason=reason)

    def provider_seen(self, name: str, up: bool, reason: str = "") -> None:
        """Passive provider health: down when it cannot be reached, up when it answers.
        Logged on each change; ``gateway_provider_up`` follows it."""
        if self._provider_up.get(name) == up:
            return
        before = self._provider_up.get(name)
        self._provider_up[name] = up
        self.metrics.provider_up.labels(name).set(1 if up else 0)
        if before is not None or not up:
            logs.event(f"provider {name} is {'up' if up else 'down'}", 20 if up else 30, provider=name,
                       up=up, reason=reason or None)

    # -- the checks ------------------------------------------------------------------

    def admit(self, ctx: Ctx, *, accepts_x_api_key: bool = False) -> Caller:
        """Key, then IP; once a request: ``api_routes`` admits it from its headers before
        reading its body (nothing is read for a refused request), and the endpoint handler's
        own call then finds the caller already admitted."""
        if ctx.caller is not None:
            return ctx.caller
        caller = authenticate(self.directory, ctx.headers, accepts_x_api_key=accepts_x_api_key)
        t = trace.get()
        if t is not None:
            t.account_id = caller.account.id
            t.key_id = caller.key.id
        check_ip(caller.key, ctx.client_ip)
        ctx.caller = caller
        return caller

    async def authorize(self, caller: Caller, model_id: str, *, kind: str, endpoint: str) -> Grant:
        """Model list, group, availability, price, then the per-model rate limit."""
        grant = authorize_model(self.config, caller, model_id, kind=kind, endpoint=endpoint)
        t = trace.get()
        if t is not None:
            t.model = grant.model.id
        await self.limiter.check(caller.account.id, grant.model)
        return grant

    # -- running a call over the model's routes --------------------------------------

    def _build(self, call: Call, target: ModelRoute) -> Route:
        build = providers.builder(call.client_format, target.provider.protocol)
        assert build is not None  # Router.plan only lists routes that serve the client's format
        return build(call, target, self.upstream)

    async def run(self, ctx: Ctx, caller: Caller, grant: Grant, call: Call):
        """``_run`` while the request counts against its key's and account's caps
        (:mod:`gatewayd.concurrency`): a 429 over a cap, before anything is held; the count
        is left when the answer is settled (a stream: when it is closed)."""
        server = self.config.server
        ticket = self.in_flight.enter(caller.account, caller.key, account_default=server.max_concurrent_per_account,
                                      key_default=server.max_concurrent_per_key)
        try:
            status, headers, body = await self._run(ctx, caller, grant, call)
        except BaseException:
            ticket.leave()
            raise
        if isinstance(body, AnswerStream):
            body.ticket = ticket
        else:
            ticket.leave()
        return status, headers, body

    async def _run(self, ctx: Ctx, caller: Caller, grant: Grant, call: Call):
        """Hold, try the routes in the router's order, answer, settle.

        One hold, one settlement, one usage row per client request whatever the attempts:
        the request's :class:`~gatewayd.billing.tab.Tab` owns the money, and every way out
        of this method (the client gone at any await included) settles it, or hands it to
        the stream that will. A route that fails before any byte has reached the client
        (connect failure, no first byte in time, 429, 5xx, an invalid or broken answer)
        gives way to the next, up to ``routing.max_attempts`` and ``routing.deadline_s``;
        a 4xx other than 429 is the client's error and is answered at once. Returns
        (status, headers, body or :class:`AnswerStream`).
        """
        if len(call.raw) > LARGE_BODY_BYTES:
            # on a large body, parsing it (before this), the sticky key and building its upstream
            # request (estimate, translation, model swap) can each take a millisecond or more:
            # other tasks run in between
            await trio.lowlevel.checkpoint()
        model = call.model
        sticky = len(model.routes) > 1 and self.config.routing.sticky_ttl_s > 0
        key = sticky_key(call.client_format, call.body) if sticky else None
        plan = self.router.plan(model, call.client_format, key)
        if not plan:
            raise model_not_found(model.id)  # authorize() checked some route serves this format
        attempts = await self._build_plan(call, plan[:self.config.routing.max_attempts])
        # all that any route of the plan can bill for the body it sends: the charge never
        # escapes the hold, whichever route serves
        estimate = max(route_hold(grant.model, route, grant.price_ratio) for _, route in attempts)
        route = attempts[0][1]
        t = trace.get()
        if t is not None:
            t.stream = route.stream
        async with self.ledger.open_tab(
            caller.account, caller.key, estimate, request_id=ctx.request_id, model=grant.model,
            endpoint=ctx.endpoint, stream=route.stream, price_ratio=grant.price_ratio,
            input_estimate=route.input_tokens_estimate, on_settled=self._settled,
        ) as tab:
            try:
                return await self._attempts(tab, call, attempts, key)
            except GatewayError:
                raise
            except Exception as e:  # a route callback or the store failed: ours, not the provider's
                await tab.release(Outcome.INTERNAL_ERROR, 500)
                raise our_fault(ctx.request_id, "while relaying the request", e) from None

    async def _build_plan(self, call: Call, plan: list[ModelRoute]) -> list[tuple[ModelRoute, Route]]:
        """Each route of the plan with its upstream request. A body the first route's
        translation refuses is the client's 400 before any hold; a later route that cannot
        carry it is left out (another route may serve the request)."""
        built = [(plan[0], self._build(call, plan[0]))]
        for target in plan[1:]:
            try:
                built.append((target, self._build(call, target)))
            except BodyError:
                continue
        if len(call.raw) > LARGE_BODY_BYTES:
            await trio.lowlevel.checkpoint()  # each build walked the whole body
        return built

    async def _attempts(self, tab: Tab, call: Call, attempts: list[tuple[ModelRoute, Route]], key: str | None):
        model = call.model
        t = trace.get()
        deadline = time.monotonic() + self.config.routing.deadline_s
        tab.hidden_possible = hidden_output_possible(model, call.body)
        if call.client_format in ("chat", "messages", "responses", "gemini"):
            tab.prompt = (call.body, call.client_format)
        failures: list[tuple[AttemptFailed, Route]] = []
        for n, (target, route) in enumerate(attempts):
            if n and time.monotonic() >= deadline:
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
            began = time.monotonic()
            try:
                if route.stream:
                    first, pump = await self._open_stream(route, tab, target, last, deadline)
                    self.router.succeeded(target, time.monotonic() - began)
                    self.router.remember(model, key, target)
                    tab.hand_off()  # no checkpoint since the pump started: it settles from here on
                    return 200, {**route.headers, "cache-control": "no-cache"}, AnswerStream(first, pump, tab)
                body, usage, first_byte_s = await self._answer(route, tab, last, deadline)
            except AttemptFailed as failure:
                failures.append((failure, route))
                if failure.retryable:
                    self.router.failed(target, failure.reason, failure.retry_after_s)
                    continue
                self.router.succeeded(target)  # it answered: the refusal is about the request
                break
            except BaseException:
                self.router.abandoned(target)
                raise
            self.router.succeeded(target, first_byte_s)
            self.router.remember(model, key, target)
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
            failure, route = answered[-1]
            status, body, headers = route.upstream_error(failure.upstream)
            await tab.release(Outcome.UPSTREAM_ERROR, status)
            return status, {**route.headers, **headers}, body
        failure, _ = failures[-1]
        if len(failures) > 1 and not any(f.reached for f, _ in failures):
            await tab.release(failure.outcome, 503)
            raise GatewayError(
                503, f"No available channel for model {model_id} right now: none of its {len(failures)} routes "
                     f"could be reached (last: {failure.reason})", "model_not_found", model_step=True)
        await tab.release(failure.outcome, failure.error.status)
        raise failure.error

    def _cut_off(self, limit: float, last: bool, deadline: float) -> float:
        """How long an attempt may wait: no limit for the last route, nor when no other attempt
        could start after the cut (the deadline would have passed): cutting would gain nothing."""
        if last or not limit or time.monotonic() + limit >= deadline:
            return math.inf
        return limit

    async def _open_stream(self, route: Route, tab: Tab, target: ModelRoute, last: bool, deadline: float):
        """Call the provider and read up to the first bytes for the client, before answering
        200: a stream that fails before it starts (invalid, dropped, silent) can still go to
        another route, or be a plain 502/504. Unless this is the last route, the first bytes
        must come within ``first_byte_timeout_s``."""
        limit = self._cut_off(self.config.routing.first_byte_timeout_s, last, deadline)
        with trio.move_on_after(limit) as waiting:
            response = await self._call(route, tab)
            pump = StreamPump(self, response, route, tab, target).run()
            try:
                first = await pump.__anext__()
            except StopAsyncIteration:
                first = b""
            return first, pump
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
        settings = self.config.routing
        first_byte = self._cut_off(settings.non_stream_first_byte_timeout_s, last, deadline)
        limit = self._cut_off(settings.non_stream_timeout_s, last, deadline)
        began = time.monotonic()
        with trio.move_on_after(limit) as waiting:
            with trio.move_on_after(first_byte) as silent:
                response = await self._call(route, tab)
            first_byte_s = time.monotonic() - began
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

    def _settled(self, usage: Usage, outcome: Outcome, bill: Bill, store_s: float) -> None:
        """A tab settled: the store's latency metric, and the request's trace (log line) says
        what it was charged."""
        self.metrics.store_latency.observe(store_s)
        t = trace.get()
        if t is not None:
            t.usage_status = outcome.value
            t.input_tokens = usage.input_tokens
            t.output_tokens = usage.output_tokens
            t.cached_tokens = usage.cached_tokens
            t.cache_write_tokens = usage.cache_write_tokens
            t.cost_nano = bill.total_nano

    async def cut_by_shutdown(self, tab: Tab) -> GatewayError:
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
            self.provider_seen(provider, True)
        except httpx.PoolTimeout:  # every upstream connection of ours is in use: our capacity, not the route's
            await tab.release(Outcome.GATEWAY_BUSY, 503)
            raise gateway_busy() from None
        except httpx.ConnectTimeout:
            self.provider_seen(provider, False, "connect timeout")
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
            self.provider_seen(provider, False, type(e).__name__)
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


class AnswerStream:
    """A streamed answer as the client gets it: the bytes ``run`` read ahead, then the pump.

    Whoever sends it must ``aclose`` it whatever happens (``api_routes`` does, in a
    ``finally`` that also covers sending the status line): closing closes the pump, whose
    own shielded ``finally`` settles the tab; should the pump never have run to a
    settlement, the tab is settled here. So a stream's money never waits for a garbage
    collector's finalizer."""

    def __init__(self, first: bytes, pump: AsyncIterator[bytes], tab: Tab) -> None:
        self._first = first
        self._pump = pump
        self.tab = tab
        self.ticket: Ticket | None = None  # the request's place in the in-flight count, left once closed

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
