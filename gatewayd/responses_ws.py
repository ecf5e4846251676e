"""Responses over WebSocket: ``GET /v1/responses`` upgraded, one response at a time.

Codex (``supports_websockets = true`` on a provider) and other Responses clients can run a
session over one socket: ``response.create`` events in, the Responses stream events out,
each as one text message. The protocol part (what an event means, the socket's memory of
its last response) is :mod:`gatewayd.formats.responses_socket`; this module is the I/O.

- The handshake is authenticated like ``POST /v1/responses`` (the key, its IP allowlist);
  a refusal is an HTTP answer to the handshake in the JSON envelope (``gatewayd.upgrades``).
- Each ``response.create`` is one request of its own, run by ``Relay.serve`` with the
  Responses endpoint's spec (``gatewayd.endpoints.RESPONSES``), as ``POST /v1/responses``
  is: its own request id, key check (a key revoked while the socket is open stops the next
  response), hold, settlement, usage row and log line. This module holds none of those
  steps; it is the transport. The events go out as the SSE stream's ``data`` bytes, one
  message per event, unchanged.
- A ``generate: false`` warm-up asks the model nothing: it goes through the relay's checks
  (``Relay.check``, the steps before the hold) and is answered here, free.
- A refusal of one event (a bad body, no balance, a second ``response.create`` while one
  runs, an unknown event type) is an ``error`` event carrying the HTTP status the same
  request would have got and the error object of the body ``gatewayd.errors.error_body``
  writes for it; the socket stays open and a running response is not disturbed.
- A client that closes the socket mid-response cancels the response as a dropped HTTP
  client does: the relay reads on to the provider's usage and bills it as a disconnect.
- A socket with no response running and no message for ``stream_idle_timeout_s`` is closed
  (1000, "idle"): it holds nothing, and a client opens a new one for its next turn. A
  message over ``max_body_bytes`` is refused by the server before the gateway sees it: the
  socket is closed with 1009 (message too big), as the WebSocket protocol defines it.
- What a socket may hold and how many may be open (messages counted in the account's body
  budget, the remembered history capped, sockets per key and per account, no
  permessage-deflate): :mod:`gatewayd.socket_limits`.

Plain ASGI like the HTTP API routes (``gatewayd.api_routes``): hypercorn's trio worker
serves the ``websocket`` scope directly, and nothing here needs Quart.
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any, Callable

import orjson
import trio

from gatewayd import trace
from gatewayd.api_routes import ApiRoutes
from gatewayd.bodies import BodyBudget
from gatewayd.endpoints import RESPONSES
from gatewayd.errors import GatewayError, error_body, our_fault
from gatewayd.formats.responses_socket import (
    CREATE, LastResponse, create_body, error_event, event_type, finished_response, is_warmup, remembered,
    socket_event, warmup_events,
)
from gatewayd.formats.sse import SSESplitter
from gatewayd.providers.base import translate
from gatewayd.pump import AnswerStream
from gatewayd.socket_limits import SocketBudget, SocketCounts
from gatewayd.trace import Trace
from gatewayd.upgrades import refuse_websocket

log = logging.getLogger("gatewayd.app")

PATH = RESPONSES.path
SOCKET_ENDPOINT = "responses_socket"
IDLE_CLOSE = 1000  # normal closure: the socket was idle; nothing was cut
INTERNAL_ERROR_CLOSE = 1011  # a bug of ours cut a response mid-stream (logged with its traceback)


class ResponsesSocket:
    """One client's socket, from the handshake to the close."""

    def __init__(self, routes: ApiRoutes, scope: dict, receive, send, finished: Callable[[Trace], None],
                 new_request_id: Callable[[], str], *, sockets: SocketCounts | None = None,
                 pool: BodyBudget | None = None, spans: Callable[[Trace], Any] | None = None) -> None:
        self.routes = routes
        self.relay = routes.relay
        self.scope = scope
        self.receive = receive
        self.send = send
        self.finished = finished  # the listener's end of a request: its log line and metrics
        self.new_request_id = new_request_id
        self.spans = spans  # the listener's telemetry: a response's spans (gatewayd.telemetry); None: off
        self.last: LastResponse | None = None  # what a previous_response_id may name
        self.running: trio.CancelScope | None = None  # the response in progress, if any
        self.running_id = ""  # its request id
        self.idle: trio.CancelScope | None = None  # the wait for the client's next message
        self.send_lock = trio.Lock()  # the reader's error events and the running response share the socket
        self.sockets = sockets if sockets is not None else SocketCounts()  # open sockets, shared by the listener
        self.pool = pool  # the API body pool its messages count in (gatewayd.socket_limits)
        self.budget: SocketBudget | None = None

    async def serve(self, t: Trace) -> None:
        """Authenticate the handshake, accept, then read events until the client leaves."""
        ctx = self.routes.context(self.scope, RESPONSES)
        # the socket's own line: not a model request (its duration is the socket's life, kept
        # out of the request latency histograms); each response has its own "responses" line
        t.endpoint = SOCKET_ENDPOINT
        server = self.relay.config.server
        try:
            caller = self.relay.admit(ctx, endpoint=RESPONSES)
            too_many = self.sockets.open(caller, server.max_sockets_per_key, server.max_sockets_per_account)
            if too_many is not None:
                raise too_many
        except GatewayError as error:
            t.status = error.status
            await refuse_websocket(self.scope, self.send, error, ctx.request_id)
            return
        self.budget = SocketBudget(self.pool, caller, server.max_body_bytes, self.scope)
        try:
            if (await self.receive())["type"] != "websocket.connect":
                return
            await self.send({"type": "websocket.accept", "headers": [(b"x-request-id", ctx.request_id.encode())]})
            t.status = 101
            async with trio.open_nursery() as nursery:
                await self._read(nursery)
                nursery.cancel_scope.cancel()
        finally:
            self.last = None  # the remembered history goes with the socket
            self.budget.close()
            self.sockets.close(caller)

    def _idle_deadline(self) -> float:
        return trio.current_time() + self.relay.config.server.stream_idle_timeout_s

    async def _read(self, nursery: trio.Nursery) -> None:
        while True:
            with trio.CancelScope(deadline=math.inf if self.running else self._idle_deadline()) as self.idle:
                message = await self.receive()
            if self.idle.cancelled_caught:
                await self.send({"type": "websocket.close", "code": IDLE_CLOSE, "reason": "idle"})
                return
            if message["type"] == "websocket.disconnect":
                if self.running is not None:
                    self.running.cancel()  # billed as a disconnect, as over HTTP
                return
            text = message.get("text")
            size = len(text if text is not None else message.get("bytes") or b"")
            assert self.budget is not None
            over = self.budget.message(size)  # counted while it is handled (gatewayd.socket_limits)
            if over is not None:  # dropped at once: the account holds too many bodies now
                await self._refuse(over, self.new_request_id())
                continue
            if not await self._handle(nursery, text, size):
                self.budget.handled(size)  # refused: held no longer

    async def _handle(self, nursery: trio.Nursery, text: str | None, size: int) -> bool:
        """One message; True when it started a response (which gives its bytes back when it ends)."""
        if text is None:
            await self._refuse(GatewayError(400, "send each event as a text message of JSON", "invalid_message"),
                               self.new_request_id())
            return False
        try:
            event = translate(socket_event, text)
        except GatewayError as error:
            await self._refuse(error, self.new_request_id())
            return False
        if event["type"] != CREATE:
            await self._refuse(GatewayError(
                400, f"unsupported event type {event['type']!r}; send 'response.create'", "unsupported_event",
                param="type"), self.new_request_id())
            return False
        if self.running is not None:
            await self._refuse(GatewayError(
                409, "a response is already in progress on this socket; send the next response.create once it "
                "has completed (one response at a time)", "response_in_progress"), self.new_request_id())
            return False
        await nursery.start(self._respond, event, size)
        return True

    async def _refuse(self, error: GatewayError, request_id: str) -> None:
        await self._send_text(error_event(error.status, error_body(error, request_id, RESPONSES.envelope)))

    async def _send_text(self, data: bytes) -> None:
        async with self.send_lock:
            await self.send({"type": "websocket.send", "text": data.decode("utf-8")})

    async def _respond(self, event: dict, size: int = 0, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """One ``response.create``: a request of its own, with its own trace and log line."""
        client = self.scope.get("client")
        t = Trace(self.new_request_id(), "GET", PATH, client[0] if client else None)
        t.endpoint = RESPONSES.name
        if self.spans is not None:
            t.spans = self.spans(t)
        self.running_id = t.request_id
        token = trace.current.set(t)
        try:
            with trio.CancelScope() as self.running:
                task_status.started()
                await self._run(event, t)
        finally:
            if self.budget is not None:
                self.budget.handled(size)
            self._done(t)
            trace.current.reset(token)
            self.finished(t)

    def _done(self, t: Trace) -> None:
        """The socket takes the next ``response.create`` from now on: the client has the last
        event of this response (its settlement may still be under way; it needs the socket no more)."""
        if self.running is not None and self.running_id == t.request_id:
            self.running = None
            if self.idle is not None:
                self.idle.deadline = self._idle_deadline()

    async def _run(self, event: dict, t: Trace) -> None:
        request_id = t.request_id
        ctx = self.routes.context({**self.scope, "gateway.request_id": request_id}, RESPONSES)
        last, self.last = self.last, None  # a response replaces it once finished
        try:
            if self.budget is not None:
                self.budget.check_continuation(event)  # (the history stays counted until replaced or closed)
            body = translate(create_body, event, last)
            raw = orjson.dumps(body)
            if is_warmup(body):
                await self.relay.check(RESPONSES, ctx, raw)  # refused as the same request would be
                await self._warm_up(body, t)
                return
            status, _headers, answer = await self.relay.serve(RESPONSES, ctx, raw)
        except Exception as e:  # a refusal; or a bug of ours, answered as over HTTP: logged, a 500, nothing charged
            error = e if isinstance(e, GatewayError) else our_fault(request_id, "while handling the request", e)
            t.status = error.status
            self._done(t)
            await self._refuse(error, request_id)
            return
        t.status = status
        if not isinstance(answer, AnswerStream):  # the provider's own error answer, passed through
            self._done(t)
            await self._send_text(error_event(status, answer) if status >= 400 else bytes(answer))
            return
        await self._stream(answer, body, t)

    async def _warm_up(self, body: dict, t: Trace) -> None:
        """``generate: false``, past the relay's checks, answered here: nothing goes to the
        provider and nothing is charged (no hold, no usage row; the log line says status 200
        with no usage). The socket remembers the request's input, so the next
        ``response.create`` naming this response carries it to the provider."""
        t.status = 200
        response_id = "resp_" + os.urandom(12).hex()
        self.last = self._remember(remembered(body, {"id": response_id, "output": []}))
        self._done(t)
        for event in warmup_events(body, response_id, int(time.time())):
            await self._send_text(event)

    async def _stream(self, answer: AnswerStream, body: dict, t: Trace) -> None:
        """The stream's events, one message each: the ``data`` bytes as the SSE stream has them."""
        splitter = SSESplitter()
        broken = False
        try:
            async for chunk in answer:
                for sse in splitter.feed(chunk):
                    await self._forward(sse.event, sse.data, body, t)
            for sse in splitter.flush():
                await self._forward(sse.event, sse.data, body, t)
        except Exception as e:  # noqa: BLE001 - the pump turns every fault into an error event; this is a bug
            log.error("internal error while streaming the answer: %s", type(e).__name__, exc_info=e,
                      extra={"fields": {"request_id": t.request_id}})
            broken = True
        finally:
            await answer.aclose()  # settles the tab (shielded): read on to the usage when cut
        if broken:  # as an HTTP stream is cut: the client must not wait for an end that will not come
            async with self.send_lock:
                await self.send({"type": "websocket.close", "code": INTERNAL_ERROR_CLOSE, "reason": "internal error"})

    def _remember(self, last: LastResponse | None) -> LastResponse | None:
        return self.budget.remember(last) if self.budget is not None else last

    async def _forward(self, name: str | None, data: bytes, body: dict, t: Trace) -> None:
        if t.first_byte_s is None:
            t.first_byte_s = time.perf_counter() - t.started
        response = finished_response(name, data)
        if response is not None:
            self.last = self._remember(remembered(body, response))
        last = event_type(name, data) is not None
        if last:
            self._done(t)  # before the client can answer it with the next response.create
        await self._send_text(data)
