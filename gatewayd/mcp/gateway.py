"""The gateway's MCP endpoints: ``/mcp/{server}`` and ``/mcp`` (every server the key may use).

A Streamable HTTP MCP server (protocol 2025-11-25, and the versions before it that the
SDKs still speak): each JSON-RPC message is one POST; a request is answered with JSON, or,
for ``tools/call`` when the client accepts it, with an SSE stream that carries the call's
progress and log notifications and then its answer; notifications and responses are
answered 202. There is no GET stream (405, which the transport allows: the gateway sends
no unsolicited messages) and DELETE ends a session.

The request's way, in order: the key (``Authorization: Bearer``), then its IP list, through
:meth:`gatewayd.relay.Relay.admit` as for model requests (so the same 401 and 403); the
body counted against the key's share of the body budget and read through the listener's
cap and deadline (``gatewayd.api_routes``' reader, ``gatewayd.bodies``); the message parsed
(``gatewayd.mcp.protocol``); the session; then the method, with ``tools/list`` and
``tools/call`` in :mod:`gatewayd.mcp.tools`.

Sessions: ``initialize`` issues a signed session id (``protocol.issue_session``) bound to the
key and the endpoint; any instance sharing the store's secret accepts it, so a client whose
requests land on several instances keeps its session, and each instance opens its own
upstream sessions as it needs them. A session ended with DELETE is written to the store's
list of ended sessions (the console's), which every instance reads (at most once a second
per session); a session is over after ``MAX_SESSION_AGE_S`` in any case.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import httpx
import trio
from prometheus_client import CollectorRegistry, Counter

from gatewayd.access import caller_group
from gatewayd.config import Config
from gatewayd.endpoints import Ctx
from gatewayd.errors import GatewayError
from gatewayd.mcp import protocol as p
from gatewayd.mcp.tools import Tools
from gatewayd.store.base import StoreUnavailable

if TYPE_CHECKING:
    from gatewayd.api_routes import ApiRoutes

log = logging.getLogger("gatewayd.mcp")

PREFIX = "/mcp"
MAX_MESSAGE_BYTES = 16 << 20  # one JSON-RPC message: far above any tool call's arguments
MAX_ENDED = 100_000  # sessions ended (and sessions found live) remembered on this instance
MAX_SESSION_AGE_S = 30 * 86400  # a session older than this is over (404: the client starts a new one)
ENDED_CHECK_S = 1.0  # how stale this instance's "not ended elsewhere" may be
SERVER_INFO = {"name": "gatewayd", "version": "0.1.0"}
JSON = (b"content-type", b"application/json")
SSE = (b"content-type", b"text/event-stream")


class HttpAnswer(Exception):
    """An answer at the HTTP level (a status other than 200), with a JSON-RPC error body."""

    def __init__(self, status: int, error: p.RpcError, headers: dict[str, str] | None = None) -> None:
        super().__init__(error.message)
        self.status = status
        self.error = error
        self.headers = headers or {}


def scope_of(path: str) -> str | None:
    """``/mcp`` -> ``*``; ``/mcp/{server}`` -> the server; other paths under /mcp -> None."""
    if path in (PREFIX, PREFIX + "/"):
        return "*"
    rest = path[len(PREFIX) + 1:].rstrip("/")
    return rest if rest and "/" not in rest else None


def is_mcp_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def _same_host(origin: str, host: str | None) -> bool:
    """``Origin: https://gw.example.com`` against ``Host: gw.example.com`` (ports included when sent)."""
    authority = origin.partition("://")[2].rstrip("/") if "://" in origin else ""
    return bool(authority) and host is not None and authority.lower() == host.strip().lower()


def _accepts_sse(accept: str | None) -> bool:
    return accept is not None and "text/event-stream" in accept.lower()


def _refusal(error: GatewayError, id_: Any = None) -> HttpAnswer:
    """A gateway check's refusal (401, 403, 429, 503 ...) at the HTTP level, its message kept."""
    headers = dict(error.headers)
    if error.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="gatewayd"'
    return HttpAnswer(error.status, p.RpcError(p.REFUSED, error.message, id=id_,
                                                data={"status": error.status, "code": error.code}), headers)


class McpGateway:
    """The MCP endpoints of one instance; ``config`` follows reloads (``gatewayd.reload``)."""

    def __init__(self, routes: "ApiRoutes", secret: bytes, *, http: httpx.AsyncClient | None = None,
                 clock: Callable[[], float] = time.time, registry: CollectorRegistry | None = None) -> None:
        """``registry``: where the call counter goes (default: the relay's metrics, /metrics)."""
        self.routes = routes
        relay = routes.relay
        self.relay = relay
        self._session_key = p.session_key(secret)
        self._clock = clock
        self.http = http or httpx.AsyncClient(limits=httpx.Limits(max_connections=1000), follow_redirects=False)
        self.calls = Counter("gateway_mcp_calls", "MCP tool calls, by server and outcome.", ["server", "outcome"],
                             registry=registry or relay.metrics.registry)
        self.tools = Tools(relay.config, relay.ledger, relay.in_flight, http=self.http,
                           on_call=lambda server, outcome: self.calls.labels(server, outcome).inc())
        self.ended: OrderedDict[str, None] = OrderedDict()
        self._live: OrderedDict[str, float] = OrderedDict()  # session -> when the store last said not ended
        self._store = relay.ledger.store
        # requests running on this instance, by (session, request id): what notifications/cancelled stops
        self.cancellable: dict[tuple[str, bytes], trio.CancelScope] = {}

    @property
    def config(self) -> Config:
        return self.tools.config

    @config.setter
    def config(self, config: Config) -> None:
        gone = self.tools.reconfigure(config)
        if gone:
            log.info("MCP servers removed or changed by the reload: %s", ", ".join(gone),
                     extra={"fields": {"mcp_servers": gone}})

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the nursery that stdio servers run in; on the way out stop them and the pool."""
        try:
            async with trio.open_nursery() as nursery:
                self.tools.nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self.tools.nursery = None
            await self.tools.aclose()
            with trio.CancelScope(shield=True):
                await self.http.aclose()

    # -- HTTP --------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                       send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        ctx = self.routes.mcp_context(scope)
        started = False

        async def tracked_send(message: dict[str, Any]) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self._serve(ctx, scope, receive, tracked_send)
        except HttpAnswer as answer:
            await _send_json(send, answer.status, answer.error.doc(), answer.headers)
        except Exception as e:  # a bug of ours: logged with its traceback, a 500 in the protocol's shape
            log.error("internal error while serving MCP: %s", type(e).__name__, exc_info=e,
                      extra={"fields": {"request_id": ctx.request_id}})
            if not started:
                await _send_json(send, 500, p.error_doc(None, p.INTERNAL_ERROR, "internal error in the gateway; "
                                                        f"this is a gateway bug (request id: {ctx.request_id})"), {})

    async def _serve(self, ctx: Ctx, scope: dict[str, Any], receive: Any, send: Any) -> None:
        where = scope_of(ctx.path)
        if where is None:
            raise HttpAnswer(404, p.RpcError(p.INVALID_REQUEST, f"no MCP endpoint at {ctx.path}"))
        method = scope["method"]
        if method not in ("POST", "DELETE"):
            raise HttpAnswer(405, p.RpcError(p.INVALID_REQUEST, f"{method} is not served on {ctx.path}: POST "
                                                                "messages, DELETE to end a session"),
                             {"Allow": "POST, DELETE"})
        origin = ctx.headers.get("origin")
        if origin is not None and not _same_host(origin, ctx.headers.get("host")):
            # the transport's rule against DNS rebinding (a browser page reaching a server by a name
            # it does not own); cross-origin browser clients are not served (no CORS either)
            raise HttpAnswer(403, p.RpcError(p.INVALID_REQUEST, f"Forbidden: Origin {origin[:100]} is not this "
                                                                "server's"))
        try:
            caller = self.relay.admit(ctx)  # key, then IP: the model endpoints' checks
            group = caller_group(self.config, caller)
        except GatewayError as e:
            raise _refusal(e) from None
        if where != "*":
            if where not in self.config.mcp_servers:
                raise HttpAnswer(404, p.RpcError(p.INVALID_REQUEST, f"no MCP server named {where}"))
            if not any(s.name == where for s in self.tools.servers_for(caller, group)):
                raise HttpAnswer(403, p.RpcError(p.REFUSED, f"this key may not use the MCP server {where}",
                                                 data={"status": 403, "code": ""}))
        if method == "DELETE":
            session_id, session = await self._session(ctx, caller.key.id, where)
            await self._end(session_id, session)
            await _send_json(send, 200, None, {})
            return
        declared = scope.get("gateway.content_length")
        if declared is not None and declared > MAX_MESSAGE_BYTES:
            raise HttpAnswer(413, p.RpcError(p.INVALID_REQUEST, f"an MCP message is at most {MAX_MESSAGE_BYTES} "
                                                                "bytes"), {"Connection": "close"})
        content_type = (ctx.headers.get("content-type") or "").split(";")[0].strip().lower()
        if content_type != "application/json":
            raise HttpAnswer(415, p.RpcError(p.INVALID_REQUEST, "an MCP message is sent as application/json"))
        try:
            self.routes.count_body(scope, caller)
        except GatewayError as e:
            raise _refusal(e) from None
        raw = await self.routes.read_body(receive)  # the API routes' reader: the listener's cap, deadline, budget
        if raw is None:
            return  # the client left, or the listener refuses the body (too large, too slow, over budget)
        if len(raw) > MAX_MESSAGE_BYTES:  # sent without a Content-Length
            raise HttpAnswer(413, p.RpcError(p.INVALID_REQUEST, f"an MCP message is at most {MAX_MESSAGE_BYTES} "
                                                                "bytes"))
        try:
            message = p.parse_message(raw)
        except p.RpcError as e:
            raise HttpAnswer(400, e) from None
        if isinstance(message, p.Request) and message.method == "initialize":
            await self._initialize(send, caller.key.id, where, message)
            return
        session_id, _ = await self._session(ctx, caller.key.id, where)
        try:
            p.header_version(ctx.headers.get("mcp-protocol-version"))
        except p.RpcError as e:
            raise HttpAnswer(400, e) from None
        if not isinstance(message, p.Request):  # a notification or a response: accepted, nothing to answer
            if isinstance(message, p.Notification) and message.method == "notifications/cancelled":
                self._cancel(session_id, message)
            await _send_json(send, 202, None, {})
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.routes.watch_disconnect, receive, nursery.cancel_scope)
            await self._request(send, ctx, caller, group, session_id, where, message)
            nursery.cancel_scope.cancel()

    async def _session(self, ctx: Ctx, key_id: str, where: str) -> tuple[str, p.Session]:
        """The request's session, if this key opened it at this endpoint and it has not ended
        (on any instance) or aged out; else the transport's 400 (no id sent) or 404 (unknown,
        ended, too old, or another key's: the client starts a new session)."""
        session_id = ctx.headers.get("mcp-session-id")
        if not session_id:
            raise HttpAnswer(400, p.RpcError(p.INVALID_REQUEST, "Bad Request: no Mcp-Session-Id header; "
                                                                "send initialize first"))
        session = p.open_session(self._session_key, session_id)
        now = self._clock()
        if (session is None or session.key_id != key_id or session.scope != where or session_id in self.ended
                or now - session.issued_at > MAX_SESSION_AGE_S or await self._ended_elsewhere(session_id, session, now)):
            raise HttpAnswer(404, p.RpcError(p.INVALID_REQUEST, "Session not found: initialize a new session"))
        return session_id, session

    async def _ended_elsewhere(self, session_id: str, session: p.Session, now: float) -> bool:
        """Whether another instance ended the session (DELETE): the store's list of ended
        sessions, asked at most once every ``ENDED_CHECK_S`` per session. A store that cannot
        answer lets the session on: it is bound to its key, which was just checked."""
        checked = self._live.get(session_id)
        if checked is not None and now - checked < ENDED_CHECK_S:
            return False
        try:
            ended = await self._store.session_ended(f"mcp:{session.nonce}", now)
        except StoreUnavailable:
            return False
        if ended:
            self._remember_ended(session_id)
            return True
        self._live[session_id] = now
        self._live.move_to_end(session_id)
        while len(self._live) > MAX_ENDED:
            self._live.popitem(last=False)
        return False

    def _remember_ended(self, session_id: str) -> None:
        self._live.pop(session_id, None)
        self.ended[session_id] = None
        while len(self.ended) > MAX_ENDED:
            self.ended.popitem(last=False)

    async def _end(self, session_id: str, session: p.Session) -> None:
        """DELETE: the session ends here at once, everywhere through the store."""
        self._remember_ended(session_id)
        self.tools.end_session(session_id)
        try:
            await self._store.end_session(f"mcp:{session.nonce}", session.issued_at + MAX_SESSION_AGE_S,
                                          self._clock())
        except StoreUnavailable:
            raise HttpAnswer(503, p.RpcError(p.REFUSED, "the session ended here, but the gateway's database is "
                                                        "unavailable to end it on every instance; retry shortly",
                                             data={"status": 503, "code": "store_unavailable"}),
                             {"Retry-After": "2"}) from None

    async def _initialize(self, send: Any, key_id: str, where: str, request: p.Request) -> None:
        requested = request.params.get("protocolVersion")
        if not isinstance(requested, str):
            raise HttpAnswer(400, p.RpcError(p.INVALID_PARAMS, 'Invalid params: initialize needs "protocolVersion"',
                                             id=request.id))
        version = p.negotiate(requested)
        session = p.Session(key_id=key_id, scope=where, protocol_version=version, issued_at=int(self._clock()),
                            nonce=secrets.token_urlsafe(12))
        session_id = p.issue_session(self._session_key, session)
        name = SERVER_INFO["name"] if where == "*" else f"{SERVER_INFO['name']}/{where}"
        result = {"protocolVersion": version, "capabilities": {"tools": {"listChanged": False}},
                  "serverInfo": {**SERVER_INFO, "name": name},
                  "instructions": "Tools of the MCP servers this key may use"
                                  + (", named server__tool." if where == "*" else f", from {where}.")}
        await _send_json(send, 200, p.result_doc(request.id, result), {"Mcp-Session-Id": session_id})

    async def _request(self, send: Any, ctx: Ctx, caller: Any, group: Any, session_id: str, where: str,
                       request: p.Request) -> None:
        """Answer one request; one the client cancels (``notifications/cancelled``, on this
        instance) gets no answer, as the protocol asks: its stream just ends (a JSON answer,
        which the transport cannot leave out, is the error -32800)."""
        key = (session_id, p.encode(request.id))
        answer = _Tracked(send)
        with trio.CancelScope() as scope:
            self.cancellable[key] = scope
            try:
                await self._dispatch(answer.send, ctx, caller, group, session_id, where, request)
            finally:
                if self.cancellable.get(key) is scope:
                    del self.cancellable[key]
        if scope.cancelled_caught:
            if not answer.started:
                await _send_json(send, 200, p.error_doc(request.id, p.REQUEST_CANCELLED, "Request cancelled"), {})
            elif not answer.ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _cancel(self, session_id: str, notification: p.Notification) -> None:
        """``notifications/cancelled``: stop the session's request it names, if it runs here."""
        request_id = notification.params.get("requestId")
        if isinstance(request_id, (str, int)) and not isinstance(request_id, bool):
            scope = self.cancellable.get((session_id, p.encode(request_id)))
            if scope is not None:
                scope.cancel()

    async def _dispatch(self, send: Any, ctx: Ctx, caller: Any, group: Any, session_id: str, where: str,
                        request: p.Request) -> None:
        if request.method == "tools/call" and _accepts_sse(ctx.headers.get("accept")):
            await self._stream(send, lambda on_note: self._call(ctx, caller, group, session_id, where, request,
                                                                on_note))
            return
        if request.method == "tools/call":
            doc = await self._call(ctx, caller, group, session_id, where, request, None)
        elif request.method == "tools/list":
            doc = await self._answer(request, self._list(caller, group, session_id, where, request))
        elif request.method == "ping":
            doc = p.result_doc(request.id, {})
        else:
            doc = p.error_doc(request.id, p.METHOD_NOT_FOUND, f"Method not found: {request.method[:100]}")
        await _send_json(send, 200, doc, {})

    async def _list(self, caller: Any, group: Any, session_id: str, where: str, request: p.Request) -> dict[str, Any]:
        settings = self.config.server
        try:
            ticket = self.relay.in_flight.enter(caller.account, caller.key,
                                                account_default=settings.max_concurrent_per_account,
                                                key_default=settings.max_concurrent_per_key)
        except GatewayError as e:
            from gatewayd.mcp.tools import refused

            raise refused(e, request.id) from None
        try:
            tools = await self.tools.list_tools(caller, group, session_id, where, request.id)
        finally:
            ticket.leave()
        return p.result_doc(request.id, {"tools": tools})

    async def _call(self, ctx: Ctx, caller: Any, group: Any, session_id: str, where: str, request: p.Request,
                    on_note: Any) -> dict[str, Any]:
        return await self._answer(request, self.tools.call_tool(caller, group, session_id, where, request,
                                                           ctx.request_id, on_note))

    async def _answer(self, request: p.Request, answering: Awaitable[dict[str, Any]]) -> dict[str, Any]:
        try:
            return await answering
        except p.RpcError as e:
            return p.error_doc(request.id if e.id is None else e.id, e.code, e.message, e.data)

    async def _stream(self, send: Any, run: Callable[[Any], Awaitable[dict[str, Any]]]) -> None:
        """Answer with an SSE stream: the call's notifications as they come, then its answer."""
        notes_in, notes_out = trio.open_memory_channel[dict[str, Any]](64)

        async def on_note(doc: dict[str, Any]) -> None:
            try:
                notes_in.send_nowait(doc)
            except trio.WouldBlock:
                pass  # a client that reads slower than the server reports: progress is dropped, never the answer

        await send({"type": "http.response.start", "status": 200,
                    "headers": [SSE, (b"cache-control", b"no-cache")]})

        async def forward() -> None:
            async for doc in notes_out:
                await send({"type": "http.response.body", "body": p.sse_event(doc), "more_body": True})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(forward)
            try:
                final = await run(on_note)
            finally:
                notes_in.close()
        await send({"type": "http.response.body", "body": p.sse_event(final), "more_body": False})


class _Tracked:
    """An ASGI ``send`` that remembers whether the answer was begun and ended."""

    def __init__(self, send: Any) -> None:
        self._send = send
        self.started = False
        self.ended = False

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        elif not message.get("more_body", False):
            self.ended = True
        await self._send(message)


async def _send_json(send: Any, status: int, doc: Any, headers: dict[str, str]) -> None:
    body = b"" if doc is None else p.encode(doc)
    header_list = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    if doc is not None:
        header_list.append(JSON)
    header_list.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": header_list})
    await send({"type": "http.response.body", "body": body, "more_body": False})
