"""One request's exchange in the simulator, whatever the vendor: the request log's entry,
each vendor's error shape, and the faults before and during a reply (delay, status,
disconnect, cuts mid-stream). The app (:mod:`.app`) and the cloud endpoints
(:mod:`.bedrock`, :mod:`.vertex`) build on these; none of them imports another's routes.

Connection-level faults (``disconnect``, ``drop_after``) need to close the TCP connection
under the app's feet, which ASGI cannot express. :func:`abort_connection` reaches
hypercorn's connection through the ASGI ``send`` callable (captured per request by a tiny
ASGI wrapper in the app, under ``SEND_KEY``) and hands it hypercorn's own ``Closed`` event;
see its docstring.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Protocol

import attrs
import orjson
import trio
from hypercorn.events import Closed
from quart import Response, request

from . import gemini
from .behaviour import CONTENT, FINISH, NO_FAULTS, Faults, Plan
from .operator_ids import operator_id_message

SEND_KEY = "gatewayd.sim.send"
_BATCH_BYTES = 64 * 1024
JSON = "application/json"


class SimulatedConnectionFault(RuntimeError):
    """Raised to break a response when the connection cannot be closed directly."""


# -- the request log -------------------------------------------------------------------


@attrs.define(eq=False)
class Recorded:
    """One request as received. Cheap to make: raw bytes now, decoding on GET."""

    seq: int
    time: float
    method: str
    path: str
    query: bytes
    headers: list
    body: bytes
    status: int | None = None
    stream: bool = False
    cancelled: bool = False  #: the client went away before the reply was complete
    dropped: bool = False  #: the simulator closed the connection on purpose (a fault)
    completed: bool = False  #: the whole answer was written (a stream: up to its last event)
    answer: Callable[[], dict] | None = None  #: renders the whole answer, non-stream shape (lazily)

    def to_json(self) -> dict:
        headers: dict[str, str] = {}
        for name, value in self.headers:
            key, text = name.decode("latin-1").lower(), value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        try:
            parsed = orjson.loads(self.body) if self.body else None
        except orjson.JSONDecodeError:
            parsed = None
        return {
            "seq": self.seq,
            "time": self.time,
            "method": self.method,
            "path": self.path,
            "query": self.query.decode("latin-1"),
            "headers": headers,
            "body": self.body.decode("utf-8", "replace"),
            "json": parsed,
            "status": self.status,
            "stream": self.stream,
            "cancelled": self.cancelled,
            "dropped": self.dropped,
            "completed": self.completed,
            "answer": self.answer() if self.answer is not None else None,
        }


# -- errors in each vendor's shape -----------------------------------------------------

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "requests",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


# Each vendor's error, with its retry hint (``retry_after_s``) where that vendor puts it:
# OpenAI and Anthropic in a ``Retry-After`` header, Google in the body (google.rpc.RetryInfo).


SIMULATED_RETRY_AFTER_S = 7  # what a simulated 429 asks the caller to wait


def _with_retry_after(response: Response, retry_after_s: int | None) -> Response:
    if retry_after_s is not None:
        response.headers["retry-after"] = str(retry_after_s)
    return response


def openai_error(status: int, message: str, *, param: str | None = None, code: str | None = None,
                 retry_after_s: int | None = None) -> Response:
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    if status == 429 and code is None:
        code = "rate_limit_exceeded"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return _with_retry_after(Response(orjson.dumps(body), status, content_type=JSON), retry_after_s)


def anthropic_error(status: int, message: str, *, retry_after_s: int | None = None, **_: object) -> Response:
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return _with_retry_after(Response(orjson.dumps(body), status, content_type=JSON), retry_after_s)


def google_error(status: int, message: str, *, retry_after_s: int | None = None, **_: object) -> Response:
    body = gemini.error_body(status, message, retry_after_s=retry_after_s)
    return Response(orjson.dumps(body), status, content_type=JSON)


def with_prompt_cache(state, reply: Plan, body: dict, protocol: str,
                      count: Callable[[dict], int] | None = None) -> Plan:
    """``reply`` with the part of its input the simulator's prompt cache holds (when the
    setting is on) moved to cache reads; for Anthropic's protocol, by its breakpoints, and
    what they newly mark moved to cache writes (:mod:`.prompt_cache`)."""
    if state.prompt_cache is None:
        return reply
    if protocol == "messages":
        read, written, one_hour = state.prompt_cache.anthropic(body)
        read = min(read, reply.input_tokens)
        written = min(written, reply.input_tokens - read)
        return attrs.evolve(reply, input_tokens=reply.input_tokens - read - written,
                            cache_read=reply.cache_read + read, cache_write=reply.cache_write + written,
                            cache_write_1h=reply.cache_write_1h + (written if one_hour else 0))
    cached = min(state.prompt_cache.cached_tokens(body, protocol, count), reply.input_tokens)
    return attrs.evolve(reply, input_tokens=reply.input_tokens - cached, cache_read=reply.cache_read + cached)


class StreamFaults(Protocol):
    """What :func:`drive` needs of a wire: the bytes of a mid-stream error (Bedrock's
    simulator, which frames its streams differently, gives only this)."""

    def stream_error(self, sent: int) -> bytes: ...


# -- connection faults -----------------------------------------------------------------


async def request_body() -> bytes:
    """The request's body as bytes (Quart types ``get_data`` as bytes only when every argument is given)."""
    return await request.get_data(cache=True, as_text=False, parse_form_data=False)


async def abort_connection(scope: Mapping[str, Any]) -> bool:
    """Close this request's client connection at once; False if the server is not hypercorn.

    The ASGI ``send`` hypercorn gives the app is ``HTTPStream.app_send``; the stream's
    ``send`` is the HTTP/1 (or HTTP/2) protocol's ``stream_send``; the protocol's ``send``
    is ``TCPServer.protocol_send``. Handing that a ``hypercorn.events.Closed`` makes the
    server close the socket (FIN after whatever was already written, no terminating
    chunk), tell the app ``http.disconnect``, and so cancel this handler. Checked with
    hypercorn 0.18; anything else falls back to raising (see callers).
    """
    stream = getattr(scope.get(SEND_KEY), "__self__", None)
    protocol = getattr(getattr(stream, "send", None), "__self__", None)
    protocol_send = getattr(protocol, "send", None)
    if protocol_send is None or getattr(protocol_send, "__name__", "") != "protocol_send":
        return False
    await protocol_send(Closed())
    return True


async def _close_connection(entry: Recorded, scope: Mapping[str, Any]) -> None:
    """Close the connection and wait to be cancelled by the resulting disconnect."""
    entry.dropped = True
    if await abort_connection(scope):
        with trio.move_on_after(10):
            await trio.sleep_forever()
    raise SimulatedConnectionFault("simulated connection drop")


async def before_reply(faults: Faults, entry: Recorded, error: Callable[..., Response]) -> Response | None:
    """Faults that act before the status line: delay, disconnect, status."""
    if faults is NO_FAULTS:
        return None
    try:
        if faults.delay_ms:
            await trio.sleep(faults.delay_ms / 1000)
        if faults.disconnect:
            await _close_connection(entry, request.scope)
    except trio.Cancelled:
        entry.cancelled = not entry.dropped
        raise
    if faults.status:
        message = f"simulated error {faults.status}"
        if faults.operator_ids:
            vendor = "anthropic" if error is anthropic_error else "google" if error is google_error else "openai"
            message = operator_id_message(vendor, faults.status)
        return error(faults.status, message,
                     retry_after_s=SIMULATED_RETRY_AFTER_S if faults.status == 429 else None)
    return None


async def drive(
    events: Iterator[tuple[bytes, int]], faults: Faults, entry: Recorded, wire: StreamFaults, scope: Mapping[str, Any]
) -> AsyncIterator[bytes]:
    """Write a stream's events, applying the mid-stream faults.

    Without pacing faults the events are coalesced into few large writes (no latency, little
    CPU). Otherwise each event is its own write; ``cut`` faults fire just before content
    event N+1, or before the closing event when the reply has N or fewer content events.
    Runs outside Quart's request context (hence ``scope`` passed in). A client that goes
    away shows up here as trio.Cancelled (or GeneratorExit when Quart closes the generator)
    and is recorded as ``cancelled``.
    """
    try:
        if not faults.paced:
            buffer: list[bytes] = []
            size = 0
            for data, _ in events:
                buffer.append(data)
                size += len(data)
                if size >= _BATCH_BYTES:
                    yield b"".join(buffer)
                    buffer, size = [], 0
            if buffer:
                yield b"".join(buffer)
            entry.completed = True
            return
        cut = faults.cut
        delay = faults.chunk_delay_ms / 1000
        sent = content = 0
        for data, kind in events:
            if cut is not None and (kind == FINISH or (kind == CONTENT and content >= cut[1])):
                if cut[0] == "error":
                    yield wire.stream_error(sent)
                    return
                if cut[0] == "stall":
                    await trio.sleep_forever()
                await _close_connection(entry, scope)
            if sent and delay:
                await trio.sleep(delay)
            yield data
            sent += 1
            if kind == CONTENT:
                content += 1
        entry.completed = True
    except (trio.Cancelled, GeneratorExit):
        entry.cancelled = not entry.dropped
        raise


async def single(chunk: bytes) -> AsyncIterator[bytes]:
    yield chunk


def done(entry: Recorded, response: Response) -> Response:
    entry.status = response.status_code
    return response


def load_body(raw: bytes) -> dict | None:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, dict) else None


