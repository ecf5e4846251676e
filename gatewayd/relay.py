"""The request path, in one place: the order of the steps and what happens on each failure.

    authenticate (key) -> IP -> parse body -> authorize (model list, group, availability,
    price) -> rate limit -> reserve (estimate, hold) -> route -> provider call ->
    respond / stream -> settle (charge, release hold, usage row)

Endpoint handlers (``gatewayd.endpoints``, which parse the body and check the few fields the
gateway reads) call ``Relay.admit`` and ``authorize``, then ``run`` a ``Call``; the
adapter table (``gatewayd.providers``) builds the ``Route`` for it: the upstream request
and the pipe that turns the upstream answer into the client's format. Settlement happens exactly once per hold, shielded from cancellation, before
the client receives the last byte.
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
from gatewayd.billing import pricing
from gatewayd.billing.estimate import estimate_cost
from gatewayd.billing.ledger import Hold, Ledger
from gatewayd.config import Config, ModelRoute
from gatewayd.directory import Directory
from gatewayd.drain import Drain
from gatewayd.errors import BodyError, GatewayError, UpstreamError, model_not_found, our_fault
from gatewayd.formats.errors import InvalidAnswer
from gatewayd.formats.pipes import Pipe
from gatewayd.formats.sse import SSESplitter
from gatewayd.formats.usage import Usage
from gatewayd.metrics import Metrics
from gatewayd import providers
from gatewayd.providers.base import Call, Route
from gatewayd.providers.upstream import Upstream
from gatewayd.ratelimit import MemoryWindows, RateLimiter
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
        self.usage_status = usage_status
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
        """Key, then IP."""
        caller = authenticate(self.directory, ctx.headers, accepts_x_api_key=accepts_x_api_key)
        t = trace.get()
        if t is not None:
            t.account_id = caller.account.id
            t.key_id = caller.key.id
        check_ip(caller.key, ctx.client_ip)
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
        """Hold, try the routes in the router's order, answer, settle.

        One hold, one settlement, one usage row per client request whatever the attempts.
        A route that fails before any byte has reached the client (connect failure, no
        first byte in time, 429, 5xx, an invalid or broken answer) gives way to the next,
        up to ``routing.max_attempts`` and ``routing.deadline_s``; a 4xx other than 429
        is the client's error and is answered at once. Returns (status, headers,
        body-or-async-iterator).
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
        settings = self.config.routing
        plan = plan[:settings.max_attempts]
        route = self._build(call, plan[0])  # a body the translation refuses is a 400 before any hold
        if len(call.raw) > LARGE_BODY_BYTES:
            await trio.lowlevel.checkpoint()  # the build walked the whole body
        estimate = estimate_cost(grant.model, route.input_tokens_estimate, route.output_tokens, grant.price_ratio)
        t = trace.get()
        if t is not None:
            t.stream = route.stream
        hold = await self.ledger.reserve(
            caller.account, caller.key, estimate, request_id=ctx.request_id, model=grant.model.id,
            endpoint=ctx.endpoint, stream=route.stream,
        )
        handed_to_stream = False
        deadline = time.monotonic() + settings.deadline_s
        failures: list[tuple[AttemptFailed, Route]] = []
        try:
            for n, target in enumerate(plan):
                if n:
                    if time.monotonic() >= deadline:
                        break
                    try:
                        route = self._build(call, target)
                    except BodyError:  # this route's translation cannot carry the request
                        continue
                hold.provider = target.provider.name
                hold.attempts += 1
                if t is not None:
                    t.provider = target.provider.name
                    t.route = target.name
                last = n == len(plan) - 1
                self.router.started(target)
                began = time.monotonic()
                try:
                    if route.stream:
                        first, pump = await self._open_stream(route, hold, grant, target, last, deadline)
                        self.router.succeeded(target, time.monotonic() - began)
                        self.router.remember(model, key, target)
                        handed_to_stream = True
                        return 200, {**route.headers, "cache-control": "no-cache"}, _prepend(first, pump)
                    body, usage, first_byte_s = await self._answer(route, hold, grant, last, deadline)
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
                with trio.CancelScope(shield=True):
                    await self._settle(hold, grant, usage, status="ok", http_status=200)
                return 200, route.headers, body
            return await self._all_failed(hold, grant, model.id, failures)
        except GatewayError:
            raise
        except Exception as e:  # a route callback or the store failed: ours, not the provider's
            if not hold.settled:
                await self._release(hold, grant, "internal_error", 500)
            raise our_fault(ctx.request_id, "while relaying the request", e) from None
        finally:
            if not handed_to_stream and not hold.settled:
                # cancelled (client went away) or an unexpected error: input was sent upstream
                usage = Usage(input_tokens=route.input_tokens_estimate)
                with trio.CancelScope(shield=True):
                    await self._settle(hold, grant, usage, status="client_disconnected", http_status=499)

    async def _all_failed(self, hold: Hold, grant: Grant, model_id: str,
                          failures: list[tuple["AttemptFailed", Route]]):
        """No route answered: the last provider error (status and message kept), else, when
        several routes were tried and none could be reached, 503 ``model_not_found``; a lone
        attempt keeps its own 502/504."""
        answered = [(f, r) for f, r in failures if f.upstream is not None]
        if answered:
            failure, route = answered[-1]
            status, body, headers = route.upstream_error(failure.upstream)
            await self._release(hold, grant, "upstream_error", status)
            return status, {**route.headers, **headers}, body
        failure, _ = failures[-1]
        if len(failures) > 1 and not any(f.reached for f, _ in failures):
            await self._release(hold, grant, failure.usage_status, 503)
            raise GatewayError(
                503, f"No available channel for model {model_id} right now: none of its {len(failures)} routes "
                     f"could be reached (last: {failure.reason})", "model_not_found", model_step=True)
        await self._release(hold, grant, failure.usage_status, failure.error.status)
        raise failure.error

    def _cut_off(self, limit: float, last: bool, deadline: float) -> float:
        """How long an attempt may wait: no limit for the last route, nor when no other attempt
        could start after the cut (the deadline would have passed): cutting would gain nothing."""
        if last or not limit or time.monotonic() + limit >= deadline:
            return math.inf
        return limit

    async def _open_stream(self, route: Route, hold: Hold, grant: Grant, target: ModelRoute, last: bool,
                           deadline: float):
        """Call the provider and read up to the first bytes for the client, before answering
        200: a stream that fails before it starts (invalid, dropped, silent) can still go to
        another route, or be a plain 502/504. Unless this is the last route, the first bytes
        must come within ``first_byte_timeout_s``."""
        limit = self._cut_off(self.config.routing.first_byte_timeout_s, last, deadline)
        with trio.move_on_after(limit) as waiting:
            response = await self._call(route, hold, grant)
            pump = self._pump(response, route, hold, grant, target)
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

    async def _answer(self, route: Route, hold: Hold, grant: Grant, last: bool,
                      deadline: float) -> tuple[bytes, Usage, float]:
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
                response = await self._call(route, hold, grant)
            first_byte_s = time.monotonic() - began
            if silent.cancelled_caught:
                raise AttemptFailed(
                    GatewayError(504, f"the provider did not start answering within {first_byte:g} seconds",
                                 "upstream_timeout", model_step=True),
                    "idle_timeout", reason=f"no status line within {first_byte:g} s", reached=False,
                )
            return (*await self._finish(response, route, hold, grant), first_byte_s)
        assert waiting.cancelled_caught
        raise AttemptFailed(
            GatewayError(504, f"the provider did not answer within {limit:g} seconds", "upstream_timeout",
                         model_step=True),
            "idle_timeout", reason=f"no answer within {limit:g} s", reached=False,
        )

    async def _settle(self, hold: Hold, grant: Grant, usage: Usage, *, status: str, http_status: int) -> None:
        if hold.settled:
            return
        bill = pricing.bill(grant.model, usage, grant.price_ratio)
        cost = bill.total_nano
        started = time.perf_counter()
        await self.ledger.settle(hold, usage, bill, status=status, http_status=http_status)
        self.metrics.store_latency.observe(time.perf_counter() - started)
        t = trace.get()
        if t is not None:
            t.usage_status = status
            t.input_tokens = usage.input_tokens
            t.output_tokens = usage.output_tokens
            t.cached_tokens = usage.cached_tokens
            t.cache_write_tokens = usage.cache_write_tokens
            t.cost_nano = cost

    async def _release(self, hold: Hold, grant: Grant, status: str, http_status: int) -> None:
        with trio.CancelScope(shield=True):
            await self._settle(hold, grant, Usage(), status=status, http_status=http_status)

    async def _cut_by_shutdown(self, hold: Hold, grant: Grant) -> GatewayError:
        await self._release(hold, grant, "shutdown", 503)
        return GatewayError(503, "the gateway is shutting down; the provider did not answer in time",
                            "shutting_down", model_step=True)

    async def _call(self, route: Route, hold: Hold, grant: Grant) -> httpx.Response:
        t = trace.get()
        provider = hold.provider or grant.model.provider.name
        try:
            sent = time.perf_counter()
            with self.drain.read() as reading:
                response = await self.upstream.send(route.request)
            if reading.cancelled_caught:
                raise await self._cut_by_shutdown(hold, grant)
            if t is not None:
                t.upstream_ttfb_s = time.perf_counter() - sent
            self.provider_seen(provider, True)
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
                reason=f"{error.status}: {error.message()[:200]}",
                retry_after_s=route.retry_after(error) if retryable else None,  # the adapter knows where
            ) from None
        return response

    async def _finish(self, response: httpx.Response, route: Route, hold: Hold, grant: Grant) -> tuple[bytes, Usage]:
        try:
            with self.drain.read() as reading:
                raw = await response.aread()
            if reading.cancelled_caught:
                raise await self._cut_by_shutdown(hold, grant)
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
                                reason=f"refused: {e.message()[:200]}") from None
        except PROVIDER_FAULTS as e:
            raise AttemptFailed(
                GatewayError(502, "the provider returned an invalid response", "bad_gateway", model_step=True),
                "upstream_invalid", reason=f"invalid answer ({type(e).__name__})") from None
        except Exception as e:  # our translator failed on an answer it did not expect: nothing is charged
            await self._release(hold, grant, "internal_error", 500)
            raise our_fault(hold.request_id, "while translating the provider's answer", e) from None
        return body, usage if usage is not None else Usage(input_tokens=route.input_tokens_estimate)

    async def _pump(self, response: httpx.Response, route: Route, hold: Hold, grant: Grant,
                    target: ModelRoute) -> AsyncIterator[bytes]:
        """Forward the stream as it arrives; settle before the terminal event is sent.

        Until the first bytes are yielded nothing has reached the client (``run`` reads
        that far before answering 200), so a failure there raises ``AttemptFailed`` and
        leaves the hold to ``run`` (another route may serve the request); after that,
        failures become an error event in the client's format and what was streamed is
        charged. Every way out, the end of the stream included, is inside the handlers:
        an exception of ours anywhere becomes the error event saying the gateway failed,
        and the shielded ``finally`` settles whatever is still held, so no path leaves a
        hold open or writes no usage row.
        """
        pipe = route.make_pipe()
        splitter = SSESplitter()
        status = "client_disconnected"
        started = False
        chunks = response.aiter_raw()
        try:
            try:
                while True:
                    with self.drain.read() as reading:
                        chunk = await anext(chunks, None)
                    if reading.cancelled_caught:
                        status = "shutdown"
                        if not started:
                            raise GatewayError(503, "the gateway is shutting down", "shutting_down",
                                               model_step=True)
                        await self._settle_stream(hold, grant, pipe, route, status)
                        yield pipe.error_event("the gateway is shutting down; the stream was cut and is incomplete")
                        return
                    if chunk is None:
                        out = pipe.feed(splitter.flush())
                        if out:
                            started = True
                            yield out
                        break
                    events = splitter.feed(chunk)
                    if not started and events and events[0].data != b"[DONE]":
                        orjson.loads(events[0].data)  # a body that is not SSE JSON fails before any byte
                    out = pipe.feed(events)
                    if pipe.failed and out:  # the provider's error event ends the stream: settle first
                        status = "upstream_error"
                        await self._settle_stream(hold, grant, pipe, route, status)
                    if out:
                        started = True
                        yield out
                    if pipe.complete or pipe.failed:
                        break
                if pipe.complete and not pipe.failed:
                    closing = pipe.closing()  # made before settling: if it fails, the row says so
                    status = "ok"
                    await self._settle_stream(hold, grant, pipe, route, status)
                    yield closing
                    return
                if pipe.failed:
                    status = "upstream_error"
                    await self._settle_stream(hold, grant, pipe, route, status)
                    if pipe.complete:
                        yield pipe.closing()
                    return
                status = "upstream_broken"
                if not started:
                    raise AttemptFailed(
                        GatewayError(502, "the provider ended the stream before sending anything", "bad_gateway",
                                     model_step=True),
                        status, reason="stream ended before its first event")
                await self._settle_stream(hold, grant, pipe, route, status)
                yield pipe.error_event("the provider ended the stream early; the output is incomplete")
            except (AttemptFailed, GatewayError):
                raise  # decided above (a refusal before any byte, or the shutdown cut): not a fault
            except UpstreamError as e:
                # a pipe raises it only for a refusal in the first event (a blocked prompt), before
                # any byte reached the client: answered as the provider's error, nothing charged
                status = "upstream_error"
                raise AttemptFailed(None, status, upstream=e, retryable=False,
                                    reason=f"refused: {e.message()[:200]}") from None
            except httpx.ReadTimeout:
                status = "idle_timeout"
                idle = f"the provider sent nothing for {self.upstream.stream_idle_timeout_s:g} seconds"
                if not started:
                    raise AttemptFailed(GatewayError(504, idle, "upstream_timeout", model_step=True), status,
                                        reason="no first event within the idle time") from None
                await self._settle_stream(hold, grant, pipe, route, status)
                yield pipe.error_event(f"{idle}; the stream was closed and is incomplete", "timeout_error")
                return
            except (httpx.HTTPError, *PROVIDER_FAULTS) as e:
                if not started:
                    status = "upstream_invalid"
                    raise AttemptFailed(
                        GatewayError(502, f"the provider returned an invalid response ({type(e).__name__})",
                                     "bad_gateway", model_step=True),
                        status, reason=f"invalid stream ({type(e).__name__})") from None
                status = "upstream_broken"
                await self._settle_stream(hold, grant, pipe, route, status)
                yield pipe.error_event(f"the provider stream broke off ({type(e).__name__}); the output is incomplete")
                return
            except Exception as e:  # a pipe or translator of ours failed: the gateway's fault, said so
                status = "internal_error"
                error = our_fault(hold.request_id, "while translating the provider's stream", e)
                if not started:
                    raise error from None
                await self._settle_stream(hold, grant, pipe, route, status)
                yield pipe.error_event(f"{error.message}; the output is incomplete")
                return
        finally:
            with trio.CancelScope(shield=True):
                try:
                    if pipe.complete:
                        await _drain(chunks)
                    await chunks.aclose()
                    await response.aclose()
                    if started and status in ("idle_timeout", "upstream_broken", "upstream_error"):
                        self.router.failed(target, f"stream {status.replace('_', ' ')} after its first byte")
                finally:
                    if not hold.settled:
                        if started:
                            await self._settle_stream(hold, grant, pipe, route, status)
                        elif status in ("shutdown", "internal_error"):  # refused: the client got nothing
                            http_status = {"shutdown": 503, "internal_error": 500}[status]
                            await self._settle(hold, grant, Usage(), status=status, http_status=http_status)
                        # otherwise nothing reached the client: ``run`` settles (or tries another route)

    async def _settle_stream(self, hold: Hold, grant: Grant, pipe: Pipe, route: Route, status: str) -> None:
        """Charge a stream: its reported usage, or (cut short, or no usage) what was streamed.

        Never skipped: counting reads the provider's events, and should it fail anyway the
        fault is logged with the request id and the input estimate is charged, so the hold
        is released and the usage row written whatever the events held."""
        if hold.settled:
            return
        with trio.CancelScope(shield=True):
            usage = pipe.usage
            # A cut stream's reported output can be a placeholder (Anthropic's message_start says
            # output_tokens 1): count what was streamed and charge the larger of the two.
            if usage is None or status != "ok":
                try:
                    produced = await tokens.count_off_loop(pipe.produced_text())
                except Exception as e:
                    our_fault(hold.request_id, "while counting what the stream produced", e)  # logs it
                    produced = 0
                base = usage or Usage(input_tokens=route.input_tokens_estimate)
                usage = attrs.evolve(base, output_tokens=max(base.output_tokens, produced))
                if not usage.input_tokens:
                    usage = attrs.evolve(usage, input_tokens=route.input_tokens_estimate)
            await self._settle(hold, grant, usage, status=status, http_status=200)


DRAIN_S = 0.05
DRAIN_BYTES = 65536


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


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The stream as the client gets it: the bytes ``run`` read ahead, then the rest."""
    try:
        if first:
            yield first
        async for out in rest:
            yield out
    finally:
        await rest.aclose()  # the pump settles in its own shielded finally
