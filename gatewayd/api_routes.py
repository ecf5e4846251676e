"""The /v1 API routes as plain ASGI: the hot path, without Quart's request and response objects.

Quart costs about 0.6 ms of CPU a request on the machines we measure on (a bare
quart-trio app against a bare ASGI app on the same hypercorn, ``bench/hot_path.py``'s
floors), a sixth of a whole pass-through request. The API routes need none of what it
offers (templates, sessions, blueprints, signals): they check the key, read the body,
run the request through ``Relay.serve`` with its endpoint spec (``gatewayd.endpoints``) and send
bytes or a stream. So the ``Listener`` hands exactly these method and
path pairs to ``ApiRoutes`` (the paths that name a model, ``GET /v1/models/{id}`` and the
Gemini API's ``GET /v1beta/models[/{model}]``); everything else (the console,
the operator's endpoints, the not-offered APIs, 404s and 405s) still goes to the Quart app.

The key (and the key's IP allowlist) is checked from the headers before any byte of the
body is read, and the body is counted, as it arrives, against the key's account's share of
the API's body budget (``gatewayd.bodies``): a refused request is answered at once and its connection closed
with the body unread (``gatewayd.app.Listener``), so a caller without a valid key can
make the gateway hold nothing. The ``/v1/models`` routes never read a body.

Like quart-trio, a request runs in a nursery beside a task that waits for the client's
``http.disconnect`` (``gatewayd.reply.Reply.watch``): a client that goes away cancels the
handler (and so the upstream call) within a millisecond; a stream already answering is
forwarded by a task the daemon owns, which finishes it within the hang-up grace and settles
it (``gatewayd.reply``, ``gatewayd.hangups``).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import orjson
import trio

from gatewayd import endpoints, trace
from gatewayd.access import Caller, client_address
from gatewayd.bodies import account_owner
from gatewayd.endpoints import ENDPOINTS, LARGE_BODY_BYTES, Ctx, Endpoint
from gatewayd.errors import GatewayError
from gatewayd.relay import Relay
from gatewayd.reply import HttpReply


MODEL_PREFIX = "/v1/models/"
GEMINI_MODEL_PREFIX = endpoints.GEMINI_MODELS + "/"


class Headers:
    """The request's headers as the relay reads them: ``get`` (first value) and ``getlist``,
    by lower-case name (hypercorn hands names over lower-cased)."""

    __slots__ = ("_raw",)

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw

    def get(self, name: str, default: str | None = None) -> str | None:
        wanted = name.lower().encode("latin-1")
        for key, value in self._raw:
            if key == wanted:
                return value.decode("latin-1")
        return default

    def getlist(self, name: str) -> list[str]:
        wanted = name.lower().encode("latin-1")
        return [value.decode("latin-1") for key, value in self._raw if key == wanted]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None


class ApiRoutes:
    """``route(method, path)`` -> an ASGI callable for the API endpoints, or None."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self._routes: dict[tuple[str, str], Callable] = {
            (endpoint.method, endpoint.path): self._relayed(endpoint) for endpoint in ENDPOINTS
            if "{model}" not in endpoint.path}
        self._routes[("GET", "/v1/models")] = self._models
        self._routes[("GET", endpoints.GEMINI_MODELS)] = self._gemini_listing(endpoints.gemini_models_page)
        # paths that name the model: few, tried in order after the fixed ones
        self._patterns = [(endpoint, self._relayed(endpoint)) for endpoint in ENDPOINTS if "{model}" in endpoint.path]
        self._gemini_model = self._gemini_listing(endpoints.gemini_model)
        self.mcp: Callable | None = None  # /mcp and /mcp/{server}: gatewayd.mcp.gateway.McpGateway, once started

    def route(self, method: str, path: str) -> Callable | None:
        found = self._routes.get((method, path))
        if found is not None:
            return found
        if self.mcp is not None and (path == "/mcp" or path.startswith("/mcp/")):
            return self.mcp
        for endpoint, serve in self._patterns:
            if endpoint.method == method and endpoint.path_match(path):
                return serve
        if method == "GET" and path.startswith(MODEL_PREFIX) and len(path) > len(MODEL_PREFIX):
            return self._model
        if method == "GET" and path.startswith(GEMINI_MODEL_PREFIX) and ":" not in path \
                and len(path) > len(GEMINI_MODEL_PREFIX):
            return self._gemini_model
        return None

    # what the MCP endpoints (gatewayd.mcp.gateway, handed this object) share with the API routes:
    # the request's context, the body counted against the key and read, the disconnect watch
    def mcp_context(self, scope: dict) -> Ctx:
        return self._context(scope, Headers(scope["headers"]), "mcp")

    @staticmethod
    def count_body(scope: dict, caller: Caller) -> None:
        _count_body_against(scope, caller)

    @staticmethod
    async def watch_disconnect(receive, scope: trio.CancelScope) -> None:
        await _cancel_on_disconnect(receive, scope)

    @staticmethod
    async def read_body(receive) -> bytes | None:
        return await _read_body(receive)

    def context(self, scope: dict, endpoint: Endpoint) -> Ctx:
        """The context of one request to ``endpoint``; a Responses WebSocket message
        (``gatewayd.responses_ws``) is one too, its scope carrying its own request id."""
        return self._context(scope, Headers(scope["headers"]), endpoint.name, endpoint.envelope)

    def _context(self, scope: dict, headers: Headers, endpoint: str, envelope: str = "openai") -> Ctx:
        client = scope.get("client")
        peer = client[0] if client else None
        # several X-Forwarded-For lines are one list (RFC 9110 5.3): the last line is the proxy's
        forwarded = ", ".join(headers.getlist("x-forwarded-for")) or None
        ctx = Ctx(
            request_id=scope["gateway.request_id"],
            client_ip=client_address(peer, forwarded, self.relay.config.server.trusted_proxies),
            headers=headers,
            endpoint=endpoint,
            envelope=envelope,
            path=scope["path"],
            query=scope.get("query_string", b"").decode("latin-1"),
        )
        t = trace.get()
        if t is not None:
            t.client = ctx.client_ip
            t.endpoint = endpoint
        return ctx

    def _relayed(self, endpoint: Endpoint) -> Callable:
        async def serve(scope, receive, send) -> None:
            ctx = self.context(scope, endpoint)
            free_cap = self.relay.config.server.max_free_body_bytes if endpoint.answer_here is not None else None
            try:
                caller = self.relay.admit(ctx, endpoint=endpoint)
                _count_body_against(scope, caller)
                if free_cap is not None:  # an answer the gateway makes itself: a smaller body (gatewayd.relay)
                    self.relay.refuse_large_free_body(ctx, scope.get("gateway.content_length") or 0)
                raw = await _read_body(receive, free_cap)
            except GatewayError as error:
                await HttpReply(send, self.relay.hangups).error(error, ctx.request_id, ctx.envelope)  # body unread: the listener closes the connection
                return
            if raw is None:
                return  # the client went away, or the listener refuses the body (too large, too slow, over budget)
            reply = HttpReply(send, self.relay.hangups)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(reply.watch, receive, nursery.cancel_scope)
                await reply.answer(ctx.request_id, ctx.envelope, self.relay.serve(endpoint, ctx, raw))
                nursery.cancel_scope.cancel()
            await reply.sends_ended()

        return serve

    async def _models(self, scope, receive, send) -> None:
        ctx = self._context(scope, Headers(scope["headers"]), "models")

        async def listing() -> tuple[int, dict, bytes]:
            caller = self.relay.admit(ctx, key_headers=("x-api-key",))
            return 200, {}, endpoints.models_list(self.relay.config, caller, ctx)

        await self._answer(send, ctx, listing())

    async def _model(self, scope, receive, send) -> None:
        """``GET /v1/models/{id}``: one item of the key's listing (an alias's: its model's), or 404."""
        ctx = self._context(scope, Headers(scope["headers"]), "models")
        model_id = scope["path"][len(MODEL_PREFIX):]

        async def item() -> tuple[int, dict, bytes]:
            caller = self.relay.admit(ctx, key_headers=("x-api-key",))
            config = self.relay.config
            named = config.aliases.get(model_id, model_id)  # an alias: its catalogue model's entry
            for entry in endpoints.model_entries(config, caller, ctx):
                if entry["id"] == named:
                    return 200, {}, orjson.dumps(entry)
            raise GatewayError(404, f"The model {model_id} does not exist", "model_not_found", param="model")

        await self._answer(send, ctx, item())

    async def _answer(self, send, ctx: Ctx, answering: Awaitable[tuple[int, dict, Any]]) -> None:
        await HttpReply(send, self.relay.hangups).answer(ctx.request_id, ctx.envelope, answering)

    def _gemini_listing(self, answer: Callable[[Any, Caller, Ctx], bytes]) -> Callable:
        """``GET /v1beta/models[/{model}]``: the key's chat models, in Google's shape and envelope."""
        async def serve(scope, receive, send) -> None:
            ctx = self._context(scope, Headers(scope["headers"]), "models", "google")

            async def listing() -> tuple[int, dict, bytes]:
                caller = self.relay.admit(ctx, endpoint=endpoints.GEMINI_GENERATE)  # the Gemini API's key places
                return 200, {}, answer(self.relay.config, caller, ctx)

            await self._answer(send, ctx, listing())

        return serve


def _count_body_against(scope: dict, caller: Caller) -> None:
    """From here on the body's bytes count against the caller's account (``gatewayd.bodies``),
    as they arrive: a declared length reserves nothing."""
    lease = scope.get("gateway.body_lease")
    if lease is not None:
        lease.assign(account_owner(caller.account.id))


async def _read_body(receive, cap: int | None = None) -> bytes | None:
    """The whole request body, or None when the client disconnected first; over ``cap``
    bytes (a body sent without its length), the 413 of ``Relay.refuse_large_free_body``."""
    parts = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        parts.append(message.get("body", b""))
        size += len(parts[-1])
        if cap is not None and size > cap:
            raise endpoints.free_body_too_large(cap)
        if not message.get("more_body", False):
            break
    if len(parts) == 1:
        return parts[0]
    body = b"".join(parts)
    if len(body) > LARGE_BODY_BYTES:
        # joining a large body, then parsing it (``parse_body``) each take a millisecond or
        # more on our machines: let other tasks run in between
        await trio.lowlevel.checkpoint()
    return body


async def _cancel_on_disconnect(receive, scope: trio.CancelScope) -> None:
    """The MCP endpoints' disconnect watch (they relay no model answer: ``gatewayd.reply``'s is
    the model routes')."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()
