"""The public HTTP app: the listener (request id, body cap) and the Quart app behind it.

The ``Listener`` is plain ASGI in front of everything, because these rules must hold for
every response, even ones Quart produces itself: each carries ``X-Request-Id``; a
body over ``max_body_bytes`` is refused with 413 without being read into memory,
whether or not the client sent a Content-Length; a body not all in within
``body_timeout_s`` is refused with 408; the bytes of bodies held are counted, as they
arrive, in the budget of the path's pool (``gatewayd.bodies``; 503 over it); and a request answered before
its body was read is closed without reading the rest. It hands the /v1 API routes to
``gatewayd.api_routes`` (plain ASGI, the hot path) and the rest to the Quart app made by
``create_app``: the console, the operator's endpoints, and the answers for paths and
methods the gateway does not serve.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import logging
import math
import time
from typing import Any

import trio
from quart import Response, has_request_context, request
from quart_trio import QuartTrio

from gatewayd import logs, responses_ws, telemetry, trace
from gatewayd.api_routes import ApiRoutes
from gatewayd.access import client_address
from gatewayd.bodies import BodyPools
from gatewayd.errors import GatewayError, error_body, not_found_path, not_implemented
from gatewayd.metrics import Metrics
from gatewayd.socket_limits import SocketCounts
from gatewayd.trace import Trace, new_request_id
from gatewayd.upgrades import refuse_websocket, websocket_refusal

if TYPE_CHECKING:
    from gatewayd.ops import Readiness
    from gatewayd.telemetry.otel import Telemetry

JSON = "application/json"
# Served over TLS (``[server] tls_cert``): browsers keep to HTTPS for a year. Behind a proxy that
# ends TLS, the proxy sends it (docs/deploy/nginx.conf).
HSTS = (b"strict-transport-security", b"max-age=31536000")
ADMIN_API_PREFIX = "/admin/v1/"  # the admin API over HTTP, behind its gate (gatewayd.admin.gate)


ENDPOINTS = {
    "/v1/chat/completions": "chat",
    "/v1/messages": "messages",
    "/v1/responses": "responses",
    "/v1/responses/compact": "responses",
    "/v1/embeddings": "embeddings",
    "/v1/models": "models",
    "/healthz": "ops",
    "/readyz": "ops",
    "/metrics": "ops",
    "/webhooks/stripe": "webhooks",
}


def endpoint_of(path: str) -> str:
    """A bounded name for the metrics label; the handlers refine it (``Ctx.endpoint``)."""
    found = ENDPOINTS.get(path)
    if found:
        return found
    if path.startswith("/v1/models/"):
        return "models"
    if path.startswith("/console"):
        return "console"
    if path == "/mcp" or path.startswith("/mcp/"):
        return "mcp"
    return "other"


class Listener:
    """ASGI middleware: request id (and HSTS under TLS) on every response, the request body
    cap, and, once the last byte is sent, the request's log line and metrics (``gatewayd.trace``)."""

    def __init__(self, app: Any, max_body_bytes: int, metrics: Metrics | None = None,
                 api: ApiRoutes | None = None, *, bodies: BodyPools | None = None,
                 body_timeout_s: float | None = None, telemetry: "Telemetry | None" = None,
                 admin: Any = None) -> None:
        self.app = app
        # the admin API over HTTP and the operator console (gatewayd.admin.gate.AdminDoor): their
        # own body cap, budget and throttle
        self.admin = admin
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics
        self.api = api  # the /v1 API routes, served without Quart (gatewayd.api_routes)
        self.bodies = bodies  # None: bodies are not counted (the ops listener's GETs)
        self.body_timeout_s = body_timeout_s  # None: no deadline
        self.sockets = SocketCounts()  # Responses WebSockets open, by key and account (gatewayd.socket_limits)
        self.telemetry = telemetry  # OpenTelemetry (gatewayd.telemetry); None: off

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)  # lifespan
        request_id = new_request_id()
        scope["gateway.request_id"] = request_id
        client = scope.get("client")
        t = Trace(request_id, scope.get("method", "GET"), scope.get("path", ""), client[0] if client else None)
        t.endpoint = endpoint_of(t.path)
        # scrapes and probes make no traces; a WebSocket's responses each have theirs (gatewayd.responses_ws)
        if self.telemetry is not None and t.endpoint != "ops" and scope["type"] == "http":
            t.spans = self.telemetry.begin(scope, t)
        token = trace.current.set(t)
        try:
            if scope["type"] == "websocket":
                path = t.path
                if path == responses_ws.PATH and self.api is not None:  # Responses over WebSocket
                    otel = self.telemetry
                    spans = (lambda message: otel.begin(scope, message)) if otel is not None else None
                    socket = responses_ws.ResponsesSocket(
                        self.api, scope, receive, send, self._finished, new_request_id, sockets=self.sockets,
                        pool=self.bodies.api if self.bodies is not None else None, spans=spans)
                    return await socket.serve(t)
                # every other path refuses the upgrade (gatewayd.upgrades)
                error = websocket_refusal(path, endpoint_of(path) != "other", not_offered(path))
                t.status = error.status
                await refuse_websocket(scope, send, error, request_id)
                return
            await self._serve(scope, receive, send, t)
        finally:
            trace.current.reset(token)
            self._finished(t)

    def _finished(self, t: Trace) -> None:
        if not t.duration_s:
            t.duration_s = time.perf_counter() - t.started
        if not t.status:
            t.status = 499  # the client went away before any answer (nginx's number for it)
        if t.settling:  # the client left; the daemon settles the request: the line says the charge
            t.finish = self._finished
            return
        logs.request_line(t.fields(), logging.DEBUG if t.endpoint == "ops" else logging.INFO)
        if self.metrics is not None:
            self.metrics.observe(t)
        if self.telemetry is not None:
            self.telemetry.finish(t)

    async def _serve(self, scope, receive, send, t: Trace):
        request_id = t.request_id
        id_header = (b"x-request-id", request_id.encode())
        own_headers = [id_header, HSTS] if scope.get("scheme") == "https" else [id_header]
        started = False
        streaming = False
        metrics = self.metrics

        async def send_with_id(message):
            nonlocal started, streaming
            if message["type"] == "http.response.start":
                started = True
                t.status = message["status"]
                headers = message.get("headers", [])
                if metrics is not None and t.stream and message["status"] == 200:
                    streaming = True
                    metrics.open_streams.inc()
                if has_body and not body_done and (b"connection", b"close") not in headers:
                    # Answered before the whole body arrived (a 404/501 that never needed it):
                    # hypercorn closes such a connection after the response instead of
                    # recycling it, so say so, or a keep-alive client sends its next request
                    # into a socket that is closing and gets no answer.
                    headers = [*headers, (b"connection", b"close")]
                message = {**message, "headers": [*headers, *own_headers]}
            elif t.first_byte_s is None and message.get("body"):
                t.first_byte_s = time.perf_counter() - t.started
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                # The last body message makes hypercorn recycle or close the connection inside
                # this call. quart-trio cancels the handler's nursery as soon as it sees the
                # disconnect that hypercorn posts on the way, so unshielded the close is cut
                # short when a handler answered before the request body arrived: the socket stays
                # open, unanswered, and the client's next keep-alive request hangs.
                with trio.CancelScope(shield=True):
                    if has_body and not body_done:
                        await _send_closing(send, message, receive)
                    else:
                        await send(message)
                return
            await send(message)

        has_body = body_done = False  # read by send_with_id: the request's body is not all in yet
        declared = None
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                has_body = declared > 0
                if declared > self.max_body_bytes:
                    return await self._refuse(send_with_id, request_id, self._too_large())
            elif name == b"transfer-encoding":
                has_body = True
        scope["gateway.content_length"] = declared
        app = self.api.route(scope["method"], scope["path"]) if self.api is not None else None
        # the admin API and the operator console: bodies under the admin door's own cap and budget
        admin = self.admin is not None and (t.path == "/admin" or t.path.startswith("/admin/"))
        if admin:
            t.endpoint = "admin"
            app = self.admin.api if t.path.startswith(ADMIN_API_PREFIX) else self.admin.console(self.app)
        lease = None if admin else self._lease(scope, api=app is not None)
        scope["gateway.body_lease"] = lease  # the API routes name its owner (the key's account) once known
        deadline = trio.current_time() + self.body_timeout_s if self.body_timeout_s else math.inf
        received = 0
        refusal: GatewayError | None = None  # set while the body comes: the app stops, we answer below

        async def capped_receive():
            nonlocal received, refusal, body_done
            if refusal is not None:
                return {"type": "http.disconnect"}
            if body_done:  # (HTTP/2 may send a body without Content-Length: not has_body alone)
                return await receive()
            with trio.move_on_at(deadline) as waiting:
                message = await receive()
            if waiting.cancelled_caught:
                refusal = self._too_slow()
                return {"type": "http.disconnect"}
            if message["type"] == "http.request":
                body_done = not message.get("more_body", False)
                size = len(message.get("body", b""))
                received += size
                if received > self.max_body_bytes:
                    refusal = self._too_large()
                    return {"type": "http.disconnect"}
                if lease is not None:
                    refusal = lease.receive(size)
                    if refusal is not None:
                        return {"type": "http.disconnect"}
            return message

        try:
            await (app or self.app)(scope, capped_receive, send_with_id)
            if refusal is not None and not started:
                await self._refuse(send_with_id, request_id, refusal)
        finally:
            if lease is not None:
                lease.close()
            if streaming and metrics is not None:
                metrics.open_streams.dec()

    def _lease(self, scope: dict, *, api: bool):
        """The request's lease in its pool (``gatewayd.bodies``): an API route's is owned by the
        key's account once the key is checked; the rest of the app's by the client's address."""
        if self.bodies is None:
            return None
        if api:
            return self.bodies.api.lease()
        peer = scope.get("client")
        trusted = self.api.relay.config.server.trusted_proxies if self.api is not None else ()
        forwarded = b", ".join(v for k, v in scope.get("headers", ()) if k == b"x-forwarded-for").decode("latin-1")
        address = client_address(peer[0] if peer else None, forwarded or None, trusted)
        return self.bodies.for_app_path(scope.get("path", "")).lease(f"address:{address}")

    def _too_large(self) -> GatewayError:
        return GatewayError(413, f"the request body is larger than {self.max_body_bytes} bytes", "request_too_large")

    def _too_slow(self) -> GatewayError:
        return GatewayError(408, f"the request body did not arrive within {self.body_timeout_s:g} seconds",
                            "request_timeout")

    async def _refuse(self, send, request_id: str, error: GatewayError) -> None:
        """A refusal made while the body was (or would be) coming, in the chat envelope; the
        connection is closed after it, the rest of the body unread."""
        trace.refused(error.code, error.log_reason())
        telemetry.refused(error)
        body = error.chat_body(request_id)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        headers += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in error.headers.items()]
        await send({"type": "http.response.start", "status": error.status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


CLOSING_DRAIN_S = 5.0  # a bound on the wait below; hypercorn posts the disconnect within milliseconds


async def _send_closing(send, message: dict, receive) -> None:
    """Send the last message of an answer given before the request body was all read.

    Hypercorn then closes the connection, but first posts ``http.disconnect`` to the
    app's queue of received messages; that queue holds up to ``max_app_queue_size`` body
    chunks and, when a client keeps sending, it is full: the post would wait forever
    (and with it this send, the connection and its socket). So the queued chunks are
    taken off and dropped meanwhile: at most that queue's worth of the body (10 chunks of
    64 KiB) is ever read, and none of it kept."""
    async def discard() -> None:
        with trio.move_on_after(CLOSING_DRAIN_S):
            while (await receive())["type"] != "http.disconnect":
                pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(discard)
        await send(message)
        nursery.cancel_scope.cancel()


NOT_OFFERED = (
    ("/v1/files", "the Files API"),
    ("/v1/uploads", "the Uploads API"),
    ("/v1/fine_tuning", "fine-tuning"),
    ("/v1/fine-tunes", "fine-tuning"),
    ("/v1/images/variations", "image variations"),
    ("/v1/assistants", "the Assistants API"),
    ("/v1/threads", "the Threads API"),
    ("/v1/batches", "the Batch API"),
    ("/v1/messages/count_tokens", "/v1/messages/count_tokens"),
    ("/v1/messages/batches", "Message Batches"),
    ("/v1/vector_stores", "vector stores"),
)


def not_offered(path: str) -> GatewayError | None:
    """The 501 for a path under an API the spec does not offer, else None."""
    for prefix, what in NOT_OFFERED:
        if path == prefix or path.startswith(prefix + "/"):
            return not_implemented(what)
    return None


def create_app(readiness: "Readiness | None" = None) -> QuartTrio:
    """The public app; with ``readiness``, ``/metrics``, ``/healthz`` and ``/readyz`` too
    (left out when they have their own listener, ``[server] metrics_listen``)."""
    app = QuartTrio(__name__)
    app.config.update(RESPONSE_TIMEOUT=None, BODY_TIMEOUT=None, MAX_CONTENT_LENGTH=None)
    if readiness is not None:
        from gatewayd.ops import add_ops_routes

        add_ops_routes(app, readiness)

    def error_response(error: GatewayError) -> Response:
        trace.refused(error.code, error.log_reason())
        body = error_body(error, str(request.scope.get("gateway.request_id", "")))  # none is a messages route
        return Response(body, status=error.status, content_type=JSON, headers=error.headers)

    @app.delete("/v1/models/<path:model_id>")
    async def delete_model(model_id: str):
        return error_response(not_implemented("deleting models"))

    @app.route("/v1/responses/<path:response_id>", methods=["GET", "DELETE", "POST", "PUT", "PATCH"])
    async def stored_response(response_id: str):
        return error_response(not_implemented("stored responses (responses are not stored)"))

    @app.errorhandler(404)
    async def not_found(_error):
        offered = not_offered(request.path)
        return error_response(offered or not_found_path(request.path))

    @app.errorhandler(405)
    async def method_not_allowed(_error):
        path = request.path
        offered = not_offered(path)
        if offered is not None:
            return error_response(offered)
        return error_response(
            GatewayError(405, f"{request.method} is not allowed on {path}", "method_not_allowed")
        )

    def log_exception(exc_info) -> None:
        """Quart's own log line for an exception no handler caught, with the request id added
        (when there is a request: Quart calls this for WebSocket and background errors too)."""
        fields = {"request_id": request.scope.get("gateway.request_id"), "path": request.path} \
            if has_request_context() else {}
        logging.getLogger("gatewayd.app").error("internal error while handling the request", exc_info=exc_info,
                                                extra={"fields": fields})

    app.log_exception = log_exception  # type: ignore[assignment]  # replaces Quart's method on this app

    @app.errorhandler(500)
    async def internal(_error):
        return error_response(GatewayError(500, "internal error in the gateway; this is a gateway bug",
                                           "internal_error"))

    return app
