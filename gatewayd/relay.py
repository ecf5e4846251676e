"""The request path, in one place: :meth:`Relay.serve` holds the order of the steps.

    admit (key, then IP) -> parse the body -> [large body: the checks that need only its
    model] -> the endpoint's body reader (fields, caps, stored objects) -> stored responses
    the account may name -> authorize (model list, group, availability, price, rate limit)
    -> requests in flight (key, account) -> [an answer the gateway makes itself: the answer,
    in threads of its own; no route, no hold] -> route plan, non-ASCII text counted, upstream
    requests -> hold (the
    tab) -> attempts and failover -> respond / stream -> settle (charge, release, usage row)

A free answer (Gemini's ``countTokens``, a Responses WebSocket warm-up) is no cheaper to
abuse than a paid one (issue 31, N3: countTokens ran the tokenizer over 128 MB bodies with
no rate limit and no in-flight cap, and console sign-in went from 0.6 s to 20.7 s): it
takes the same rate limit and in-flight caps, its body is at most ``[server]
max_free_body_bytes``, and its tokenizer runs in ``free_threads`` (``[server]
free_answer_threads``), a thread pool of its own that billable requests never wait behind.

What differs between endpoints is data (:class:`gatewayd.endpoints.Endpoint`: path, body
reader, client format, error envelope); ``serve`` is the same for all of them, so the
order lives here and nowhere else. Adding an endpoint is adding a spec and its reader
(``gatewayd.endpoints``' module doc says how). :meth:`Relay.check` is the same order up to
the hold, for a request the gateway answers itself (a Responses WebSocket warm-up). The
parts ``serve`` delegates to:

- :mod:`gatewayd.failover`: the attempts over the routes the router orders;
- :mod:`gatewayd.pump`: a stream's life and its settlement;
- :class:`gatewayd.billing.tab.Tab`: the one owner of a request's money, settled exactly
  once, shielded from cancellation, before the client receives the last byte;
- :class:`gatewayd.routing.Router`: route and provider health, stickiness;
- the adapter table (``gatewayd.providers``): the ``Route`` for each (client format,
  upstream protocol) -- the upstream request and the pipe back.

The relay is given what it needs (the drain, the metrics) by the server that builds it; it
does not hand out the daemon's parts (readiness and /metrics are ``gatewayd.ops``').

Errors: a refusal is a :class:`~gatewayd.errors.GatewayError` in the endpoint's envelope;
the provider's bad bytes are ``InvalidAnswer`` (a 502, raised where they are parsed); a
store that cannot take a hold or a settlement is a 503 ``store_unavailable``; anything else
raised on the way is ours: logged with its traceback, 500 ``internal_error``, nothing
charged.
"""

from __future__ import annotations

from typing import Any

import trio

from gatewayd import logs, telemetry, tokens, trace
from gatewayd.access import Caller, Grant, authenticate, authorize_model, check_ip
from gatewayd.attempt import AttemptFailed
from gatewayd.billing.estimate import route_hold
from gatewayd.billing.foreign_text import ForeignText, counted_text
from gatewayd.billing.ledger import Ledger, refusal_error, store_unavailable
from gatewayd.billing.pricing import Bill
from gatewayd.billing.tab import Outcome, store_failed_while_settling
from gatewayd.concurrency import InFlight
from gatewayd.config import Config, ModelRoute
from gatewayd.directory import Directory
from gatewayd.drain import Drain
from gatewayd.endpoints import (
    LARGE_BODY_BYTES, Asked, Ctx, Endpoint, free_body_too_large, query_value, read_body, read_canonical,
)
from gatewayd.errors import BodyError, GatewayError, model_not_found, our_fault
from gatewayd.failover import Failover
from gatewayd.formats.usage import Usage
from gatewayd.hangups import Hangups
from gatewayd.metrics import Metrics
from gatewayd import providers
from gatewayd.providers.base import Call, Route
from gatewayd.providers.upstream import Upstream
from gatewayd.pump import AnswerStream
from gatewayd.ratelimit import MemoryWindows, RateLimiter
from gatewayd.received_ids import ReceivedIds
from gatewayd.routing import Router, sticky_key
from gatewayd.store.base import Refusal, StoreUnavailable

__all__ = ["Relay", "Ctx", "AnswerStream", "AttemptFailed", "LARGE_BODY_BYTES"]


class Relay:
    def __init__(self, config: Config, directory: Directory, ledger: Ledger, upstream: Upstream,
                 limiter: RateLimiter | None = None, router: Router | None = None, *,
                 drain: Drain | None = None, metrics: Metrics | None = None) -> None:
        self._config = config
        self.directory = directory
        self.ledger = ledger
        self.upstream = upstream
        self.router = router or Router(config.routing, clock=trio.current_time)  # cool-downs on trio's clock
        self.limiter = limiter or RateLimiter(MemoryWindows())
        self.drain = drain or Drain()  # the server's: cuts upstream reads when a shutdown's grace period ends
        if metrics is None:  # a relay on its own (tests): its own registry
            metrics = Metrics()
            metrics.watch_holds(lambda: ledger.open_holds, lambda: ledger.held_nano)
        self.metrics = metrics  # the server's: the relay records into it
        self.in_flight = InFlight()  # requests in flight per key and account (the fair-share caps)
        self.received_ids = ReceivedIds(ledger.store)  # response ids each account may name again
        self.hangups = Hangups(config.server.hangup_grace_s)  # the server runs its nursery (gatewayd.hangups)
        self.failover = Failover(config.routing, upstream, self.router, self.drain, self.received_ids, self.hangups)
        self.free_threads = trio.CapacityLimiter(config.server.free_answer_threads)  # free answers' own threads
        watch_health(self.router, self.metrics, config)

    @property
    def config(self) -> Config:
        return self._config

    @config.setter
    def config(self, config: Config) -> None:
        """A reloaded config (gatewayd.reload) brings its ``[routing]`` settings with it."""
        self._config = config
        self.free_threads.total_tokens = config.server.free_answer_threads
        self.router.settings = config.routing
        self.failover.settings = config.routing
        self.hangups.grace_s = config.server.hangup_grace_s
        publish_routes(self.router, self.metrics, config)

    # -- the order of a request ------------------------------------------------------

    async def serve(self, endpoint: Endpoint, ctx: Ctx, raw: bytes):
        """One request to a model endpoint, every step in its order (module doc). Returns
        (status, headers, body bytes or :class:`AnswerStream`), or raises the refusal."""
        if endpoint.answer_here is not None:
            self.refuse_large_free_body(ctx, raw)
        caller, body, raw, asked = await self._read(endpoint, ctx, raw)
        grant = await self.authorize(caller, asked.model_id, kind=endpoint.kind, endpoint=endpoint.name)
        # in flight: a 429 over the key's or account's cap, before anything is held; the count
        # is left when the answer is settled (a stream: when it is closed)
        server = self.config.server
        ticket = self.in_flight.enter(caller.account, caller.key, account_default=server.max_concurrent_per_account,
                                      key_default=server.max_concurrent_per_key)
        if endpoint.answer_here is not None:  # counted here (countTokens): nothing consumed, nothing held
            try:
                return 200, {}, await endpoint.answer_here(body, grant, self.free_threads)
            finally:
                ticket.leave()
        call = Call(client_format=endpoint.client_format, model=grant.model, body=body, raw=raw,
                    stream=asked.stream, headers=ctx.headers, sse=asked.sse)
        try:
            status, headers, answer = await self._hold_and_attempt(ctx, caller, grant, call)
        except BaseException:
            ticket.leave()
            raise
        if isinstance(answer, AnswerStream):
            answer.ticket = ticket
        else:
            ticket.leave()
        return status, headers, answer

    async def check(self, endpoint: Endpoint, ctx: Ctx, raw: bytes) -> tuple[Caller, dict[str, Any], Asked, Grant]:
        """The steps before anything is held, in their order: admit, parse, read, the stored
        responses named, authorize. :meth:`serve` takes the same steps; a request the gateway
        answers itself, asking the provider nothing and charging nothing (a Responses
        WebSocket warm-up, ``gatewayd.responses_ws``), stops here, refused exactly as it
        would be on its way to a provider."""
        self.refuse_large_free_body(ctx, raw)
        caller, body, _, asked = await self._read(endpoint, ctx, raw)
        grant = await self.authorize(caller, asked.model_id, kind=endpoint.kind, endpoint=endpoint.name)
        return caller, body, asked, grant

    def refuse_large_free_body(self, ctx: Ctx, raw: bytes | int) -> None:
        """The 413 for a body (or a declared length) over ``max_free_body_bytes``, for a
        request the gateway answers itself (``api_routes`` asks before reading the body)."""
        limit = self.config.server.max_free_body_bytes
        size = raw if isinstance(raw, int) else len(raw)
        if size > limit:
            raise free_body_too_large(limit)

    async def _read(self, endpoint: Endpoint, ctx: Ctx,
                    raw: bytes) -> tuple[Caller, dict[str, Any], bytes, Asked]:
        """Admit, parse, read: the first steps of every request, in their order. The body and
        bytes returned are the canonical ones every later step reads and sends upstream: the
        client's, or, when the reader rewrote the body (``Asked.canonical``), its re-encoding
        (never the client's bytes when they say something else)."""
        caller = self.admit(ctx, endpoint=endpoint)  # key, then IP
        body = await read_body(raw)  # JSON object, each key once in every object
        trace.asked_for(body.get("model"))
        if len(raw) > LARGE_BODY_BYTES:
            self._refuse_early(caller, body, endpoint)  # spare a refused large body the walks
        body, raw, asked = read_canonical(endpoint, body, raw, ctx)  # the fields the gateway reads, caps...
        trace.asked_for(asked.model_id)
        if asked.response_ids:
            await self.received_ids.check(caller.account.id, list(asked.response_ids))
        return caller, body, raw, asked

    def admit(self, ctx: Ctx, *, endpoint: Endpoint | None = None, key_headers: tuple[str, ...] = ()) -> Caller:
        """Key, then IP; once a request: ``api_routes`` admits it from its headers before
        reading its body (nothing is read for a refused request), and the endpoint handler's
        own call then finds the caller already admitted. The key is read where ``endpoint``
        takes it, or from ``key_headers`` for a route that is no endpoint spec (the model
        listing); ``Authorization: Bearer`` always."""
        if ctx.caller is not None:
            return ctx.caller
        query_key = None
        if endpoint is not None:
            key_headers = endpoint.key_headers
            query_key = query_value(ctx, endpoint.key_query) if endpoint.key_query else None
        caller = authenticate(self.directory, ctx.headers, key_headers=key_headers, query_key=query_key)
        t = trace.get()
        if t is not None:
            t.account_id = caller.account.id
            t.key_id = caller.key.id
        check_ip(caller.key, ctx.client_ip)
        ctx.caller = caller
        return caller

    def _refuse_early(self, caller: Caller, body: dict, endpoint: Endpoint) -> None:
        """For a large body, the checks that need only its model, before anything walks the
        rest of it: the key's model list and group, the model's visibility and price, and a
        balance with nothing left. Parsing is the cheap part (orjson: about 0.35 ms a MB
        here, less than a byte search for the model would cost); the walks after it (the body
        checks, the stored-object check, the estimate, a translation) are not, and a refused
        request is spared them (issue 20). The same checks run again later, in order."""
        model_id = body.get("model")
        if isinstance(model_id, str):
            authorize_model(self.config, caller, model_id, kind=endpoint.kind, endpoint=endpoint.name)
            if caller.account.balance_nano <= 0:
                raise refusal_error(Refusal("account", caller.account.balance_nano), 1)

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

    async def _hold_and_attempt(self, ctx: Ctx, caller: Caller, grant: Grant, call: Call):
        """Plan the routes, build their upstream requests, hold, try them, answer, settle.

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
            raise model_not_found(model.id, f"none of its routes serves the {call.client_format} format; the "
                                  "gateway's operator configures a provider that does",
                                  reason=f"no route serves the {call.client_format} format")
        attempts = await self._build_counted(call, plan[:self.config.routing.max_attempts])
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
            input_estimate=route.input_tokens_estimate, on_settled=self._settled, requested_model=grant.alias,
        ) as tab:
            telemetry.held(tab)
            try:
                return await self.failover.run(tab, call, attempts, key)
            except GatewayError:
                raise
            except StoreUnavailable:  # the settlement could not be written: the store's 503, not a bug
                store_failed_while_settling(tab)
                raise store_unavailable() from None
            except Exception as e:  # a route callback or a translator failed: ours, not the provider's
                await tab.release(Outcome.INTERNAL_ERROR, 500)
                raise our_fault(ctx.request_id, "while relaying the request", e) from None

    async def _build_counted(self, call: Call, plan: list[ModelRoute]) -> list[tuple[ModelRoute, Route]]:
        """:meth:`_build_plan`, with the body's non-ASCII text held at its worst case (a token a
        byte), or, when that would weigh on the hold, counted by the model family's tokenizer
        (off the event loop when large) and the plan built again on the counts (docs/billing.md,
        "Text outside ASCII"). The estimates record the parts as they read them: ASCII text
        pays nothing."""
        foreign = ForeignText()
        with counted_text(foreign):
            attempts = await self._build_plan(call, plan)
        if not foreign.weighs(len(call.raw)):
            return attempts
        if foreign.chars <= tokens.INLINE_CHARS:
            foreign.count(call.model.family)
        else:
            await trio.to_thread.run_sync(foreign.count, call.model.family)
        with counted_text(foreign):
            return await self._build_plan(call, plan)

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

    def _settled(self, usage: Usage, outcome: Outcome, bill: Bill, store_s: float) -> None:
        """A tab settled: the store's latency metric, and the request's trace (log line) says
        what it was charged."""
        self.metrics.store_latency.observe(store_s)
        telemetry.settled(usage, outcome, bill)
        t = trace.get()
        if t is not None:
            t.usage_status = outcome.value
            t.input_tokens = usage.input_tokens
            t.output_tokens = usage.output_tokens
            t.cached_tokens = usage.cached_tokens
            t.cache_write_tokens = usage.cache_write_tokens
            t.cost_nano = bill.total_nano


def publish_routes(router: Router, metrics: Metrics, config: Config) -> None:
    """``gateway_route_up`` exists for every route from the start (1: nothing failed yet)."""
    for model in config.models.values():
        for route in model.routes:
            if route.name not in router.health:
                metrics.route_up.labels(route.name).set(1)


def watch_health(router: Router, metrics: Metrics, config: Config) -> None:
    """The router's health changes, told to the metrics and the log."""

    def route_changed(route: ModelRoute, up: bool, reason: str) -> None:
        metrics.route_up.labels(route.name).set(1 if up else 0)
        logs.event(f"route {route.name} is {'healthy again' if up else 'cooling down'}", 20 if up else 30,
                   route=route.name, provider=route.provider.name, reason=reason)

    def provider_changed(name: str, up: bool, was: bool | None, reason: str) -> None:
        metrics.provider_up.labels(name).set(1 if up else 0)
        if was is not None or not up:
            logs.event(f"provider {name} is {'up' if up else 'down'}", 20 if up else 30, provider=name,
                       up=up, reason=reason or None)

    def route_misconfigured(route: ModelRoute, reason: str) -> None:
        metrics.route_misconfigured.labels(route.name).set(1)
        logs.event(f"route {route.name} is misconfigured: its provider refused the gateway's credentials", 40,
                   route=route.name, provider=route.provider.name, reason=reason)

    def route_changed_and_configured(route: ModelRoute, up: bool, reason: str) -> None:
        route_changed(route, up, reason)
        if up:
            metrics.route_misconfigured.labels(route.name).set(0)

    router.on_change = route_changed_and_configured
    router.on_provider_change = provider_changed
    router.on_misconfigured = route_misconfigured
    publish_routes(router, metrics, config)
