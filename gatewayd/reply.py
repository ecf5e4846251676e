"""The way back to one client: one object owns it, whatever the surface.

A :class:`Reply` is made for each request (an HTTP request to an API route, or one
``response.create`` on a Responses WebSocket) and owns:

- the send lock: one message at a time on the client's connection (a refusal, a stream's
  events and its end never interleave, whichever task sends them);
- the disconnect watch: a client that leaves cancels its handler's scope, cuts a send in
  progress, and tells the stream (:meth:`gatewayd.pump.AnswerStream.client_left`), whose
  slots are free from then on;
- a streamed answer's forwarding: after the status line the stream is forwarded by a task
  the daemon owns (:mod:`gatewayd.hangups`), so that a client that leaves ends its handler at
  once while the stream is finished within the hang-up grace and settled there;
- the tab's settlement on every exit: the stream is closed (``AnswerStream.aclose``, which
  settles) on every way out of the forwarding, and the request's log line waits for it
  (``Trace.settling``).

What a surface adds is the framing: :class:`HttpReply` sends the ASGI HTTP messages (a
status line and one JSON body, or the stream's bytes as they come: SSE, or Google's JSON
array); the Responses WebSocket's subclass (``gatewayd.responses_ws``) sends one text message
per event.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

import trio

from gatewayd import telemetry, trace
from gatewayd.errors import GatewayError, error_body, our_fault
from gatewayd.hangups import Hangups
from gatewayd.pump import AnswerStream

log = logging.getLogger("gatewayd.app")

JSON_TYPE = (b"content-type", b"application/json")
SSE_TYPE = (b"content-type", b"text/event-stream")
SENDS_END_S = 1.0  # a send cut by the client's leaving ends within this (it is cancelled)


class Reply:
    """One request's way back (module doc). ``send`` is the transport's (ASGI) send."""

    def __init__(self, send: Callable[[dict], Awaitable[None]], hangups: Hangups) -> None:
        self._send = send
        self.hangups = hangups
        self.lock = trio.Lock()
        self.gone = False  # the client left: nothing more is sent
        self._sending: trio.CancelScope | None = None  # a stream's sends: cancelled when the client leaves
        self._stream: AnswerStream | None = None  # the streamed answer being forwarded
        self._forwarded = trio.Event()  # its forwarding (and so its settlement) is over

    async def send(self, message: dict) -> bool:
        """Send one message, alone on the connection; False (nothing sent) once the client left.
        The lock is taken without a checkpoint when free (the common case: a stream's events
        come one after the other), so a send costs no extra trip through the scheduler."""
        if self.gone:
            return False
        try:
            self.lock.acquire_nowait()
        except trio.WouldBlock:
            await self.lock.acquire()
        try:
            if self.gone:
                return False
            await self._send(message)
        finally:
            self.lock.release()
        return not self.gone

    def client_left(self) -> None:
        """The client hung up: stop sending, free the stream's slots, let it finish in its task."""
        if self.gone:
            return
        self.gone = True
        if self._sending is not None:
            self._sending.cancel()
        stream = self._stream
        if stream is not None and not self._forwarded.is_set():
            stream.client_left(self.hangups.grace_s)
            t = trace.get()
            if t is not None:
                t.settling = True  # the log line waits for the charge

    async def watch(self, receive: Callable[[], Awaitable[dict]], handler: trio.CancelScope,
                    gone: str = "http.disconnect") -> None:
        """Until the client leaves; then end its handler (``handler``) and tell the stream."""
        while (await receive())["type"] != gone:
            pass
        self.client_left()
        handler.cancel()

    async def sends_ended(self) -> None:
        """Wait (bounded, shielded) until no send is in progress: a handler returns to the
        server only once nothing of its writes to the connection is still going."""
        with trio.CancelScope(shield=True), trio.move_on_after(SENDS_END_S):
            async with self.lock:
                pass

    # -- answering ------------------------------------------------------------------------

    async def answer(self, request_id: str, envelope: str,
                     answering: Awaitable[tuple[int, dict, Any]]) -> None:
        """Await the handler and send what it answers; a refusal in its envelope; a bug of ours
        (a request translator, the estimator, anything the relay does not catch itself) as a
        logged 500 ``internal_error``. A stream is forwarded by a task the daemon owns, which
        this waits for while the client stays."""
        try:
            status, headers, body = await answering
        except GatewayError as error:
            await self.error(error, request_id, envelope)
        except Exception as e:
            await self.error(our_fault(request_id, "while handling the request", e), request_id, envelope)
        else:
            if isinstance(body, AnswerStream):
                await self.stream(status, headers, body, request_id)
            else:
                await self.whole(status, headers, body)

    async def error(self, error: GatewayError, request_id: str, envelope: str) -> None:
        trace.refused(error.code, error.log_reason())  # the log line says which refusal and why
        telemetry.refused(error)
        await self.whole(error.status, error.headers, error_body(error, request_id, envelope))

    async def whole(self, status: int, headers: dict, body: bytes) -> None:  # pragma: no cover - per surface
        raise NotImplementedError

    async def stream(self, status: int, headers: dict, answer: AnswerStream, request_id: str) -> None:
        """Forward ``answer`` from a task the daemon owns and wait for it while the client stays."""
        self._stream = answer
        self.hangups.start(self._forward, status, headers, answer, request_id)
        await self._forwarded.wait()

    async def _forward(self, status: int, headers: dict, answer: AnswerStream, request_id: str) -> None:
        t = trace.get()
        try:
            ended = broken = False
            try:  # the stream settles its tab when closed: the status line is inside the try too
                with trio.CancelScope() as self._sending:  # cut by the client's leaving (the reads are shielded)
                    if self.gone:
                        self._sending.cancel()
                    if await self.start(status, headers):
                        ended = await self.events(answer)
            except Exception as e:  # noqa: BLE001 - the pump turns every fault into an error event; this is a bug
                log.error("internal error while streaming the answer: %s", type(e).__name__, exc_info=e,
                          extra={"fields": {"request_id": request_id}})
                broken = True
            finally:
                await answer.aclose()  # settles (shielded): within the grace if the client left
            if ended:
                await self.end()
            elif broken:
                await self.broken()
        finally:
            self._forwarded.set()
            trace.settled_later(t)

    async def events(self, answer: AnswerStream) -> bool:
        """Send the stream's chunks; True if all were sent (the client stayed)."""
        async for chunk in answer:
            if chunk and not await self.send_chunk(chunk):
                return False
        return not self.gone

    async def start(self, status: int, headers: dict) -> bool:  # pragma: no cover - per surface
        raise NotImplementedError

    async def send_chunk(self, chunk: bytes) -> bool:  # pragma: no cover - per surface
        raise NotImplementedError

    async def end(self) -> None:
        """The stream is over and all of it was sent."""

    async def broken(self) -> None:
        """A bug of ours cut the stream: the client must not wait for an end that will not come."""


class HttpReply(Reply):
    """An ASGI HTTP response: a JSON body, or the stream's bytes (SSE, Google's JSON array)."""

    async def whole(self, status: int, headers: dict, body: bytes) -> None:
        if await self.send({"type": "http.response.start", "status": status,
                            "headers": header_list(headers, JSON_TYPE, len(body))}):
            await self.send({"type": "http.response.body", "body": bytes(body), "more_body": False})

    async def start(self, status: int, headers: dict) -> bool:
        return await self.send({"type": "http.response.start", "status": status,
                                "headers": header_list(headers, SSE_TYPE, None)})

    async def send_chunk(self, chunk: bytes) -> bool:
        return await self.send({"type": "http.response.body", "body": chunk, "more_body": True})

    async def end(self) -> None:
        await self.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def broken(self) -> None:
        await self.end()  # the status line is gone: the stream ends without its terminal event (seen cut)


def header_list(headers: dict, content_type: tuple[bytes, bytes], length: int | None) -> list:
    out = [content_type] if "content-type" not in headers else []  # a route may set its own (Gemini's JSON stream)
    if length is not None:
        out.append((b"content-length", str(length).encode()))
    for name, value in headers.items():
        out.append((name.encode("latin-1"), str(value).encode("latin-1")))
    return out

