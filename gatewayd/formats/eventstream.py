"""AWS's binary event-stream framing (``application/vnd.amazon.eventstream``), as Bedrock
streams it, turned into the SSE events the pipes read.

Sans-I/O. Decoding is botocore's (:class:`botocore.eventstream.EventStreamBuffer`: prelude,
headers and both CRCs checked), fed incrementally with each network chunk; a frame split
across chunks waits in its buffer. Each complete frame becomes one
:class:`~gatewayd.formats.sse.SSEEvent`, so a Bedrock route reuses the pipes of the
Anthropic route unchanged:

- ``InvokeModelWithResponseStream`` (``invoke=True``): a ``chunk`` event's payload is
  ``{"bytes": base64(<one Anthropic stream event as JSON>)}``; the event is the decoded
  JSON, and its raw bytes are that JSON framed as SSE (``event: <type>``), which is what a
  messages client is sent: no JSON re-encode, the provider's bytes after base64.
- ``ConverseStream`` (``invoke=False``): the event's name is its ``:event-type`` header
  (``messageStart``, ``contentBlockDelta``, ``metadata``...), its data the JSON payload.
- An ``exception`` frame (``:message-type: exception``, e.g. ``throttlingException`` or
  ``modelStreamErrorException``) mid-stream becomes an Anthropic-shaped ``error`` event,
  which ends the stream as a provider error. Before any other event it is the provider's
  refusal: :class:`~gatewayd.errors.UpstreamError` with the status Bedrock gives that
  exception over HTTP, so nothing is charged and the client gets that status.

A frame that does not decode (bad CRC, bad lengths) is the provider's invalid answer
(:class:`~gatewayd.formats.errors.InvalidAnswer`, a 502 before the first byte).

:func:`encode_frame` writes frames (the simulator serves Bedrock with it; tests build
streams with it).
"""

from __future__ import annotations

import base64
import binascii
import re
import struct

import orjson
from botocore.eventstream import EventStreamBuffer, ParserError

from gatewayd.errors import UpstreamError
from gatewayd.formats.errors import InvalidAnswer
from gatewayd.formats.sse import SSEEvent

__all__ = ["EXCEPTION_STATUS", "EventStreamSplitter", "encode_frame", "exception_frame", "error_type_of"]

#: Bedrock's exceptions (by their event-stream name, lower camel case, or their HTTP
#: ``x-amzn-ErrorType`` name) -> the HTTP status Bedrock answers them with.
EXCEPTION_STATUS = {
    "throttlingexception": 429,
    "modelnotreadyexception": 429,
    "servicequotaexceededexception": 429,
    "serviceunavailableexception": 503,
    "internalserverexception": 500,
    "modelstreamerrorexception": 424,
    "modelerrorexception": 424,
    "modeltimeoutexception": 408,
    "validationexception": 400,
    "accessdeniedexception": 403,
    "resourcenotfoundexception": 404,
}
#: ... and the Anthropic error type a messages client reads for it.
_MESSAGES_TYPE = {
    429: "rate_limit_error", 503: "overloaded_error", 400: "invalid_request_error", 403: "permission_error",
    404: "not_found_error", 408: "timeout_error",
}

_TYPE = re.compile(rb'^\s*\{\s*"type"\s*:\s*"([a-z_]{1,40})"')


def error_type_of(name: str) -> tuple[int, str]:
    """(HTTP status, Anthropic error type) of a Bedrock exception name."""
    status = EXCEPTION_STATUS.get(name.split(":", 1)[0].strip().lower(), 500)
    return status, _MESSAGES_TYPE.get(status, "api_error")


def _header(headers: dict, name: str) -> str:
    value = headers.get(name)
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


def _message(payload: bytes) -> str:
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return payload.decode("utf-8", "replace")[:500] or "the provider's stream failed"
    if isinstance(doc, dict):
        for key in ("message", "Message"):
            if isinstance(doc.get(key), str):
                return doc[key]
    return "the provider's stream failed"


class EventStreamSplitter:
    """Drop-in for :class:`~gatewayd.formats.sse.SSESplitter` on a Bedrock stream."""

    def __init__(self, *, invoke: bool) -> None:
        self.invoke = invoke
        self._buffer = EventStreamBuffer()
        self._seen = False  # an event (not an exception) came

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self._buffer.add_data(chunk)
        events = []
        try:
            for message in self._buffer:
                event = self._event(message.headers, message.payload)
                if event is not None:
                    events.append(event)
        except ParserError as e:
            raise InvalidAnswer(f"the provider's event stream does not decode ({type(e).__name__})") from None
        return events

    def flush(self) -> list[SSEEvent]:
        """The stream ended: a partial frame left in the buffer is dropped (an incomplete
        answer, which the pump treats as the stream breaking off)."""
        return []

    def pending(self) -> int:
        return len(self._buffer._data)  # noqa: SLF001 - botocore keeps no public count

    def _event(self, headers: dict, payload: bytes) -> SSEEvent | None:
        kind = _header(headers, ":message-type")
        if kind in ("exception", "error"):
            name = _header(headers, ":exception-type") or _header(headers, ":error-code") or "internalServerException"
            message = _message(payload) if kind == "exception" else _header(headers, ":error-message")
            status, error_type = error_type_of(name)
            if not self._seen:
                body = orjson.dumps({"message": message})
                raise UpstreamError(status, body, {"x-amzn-errortype": name[:1].upper() + name[1:]})
            data = orjson.dumps({"type": "error", "error": {"type": error_type, "message": message}})
            return SSEEvent(raw=b"event: error\ndata: " + data + b"\n\n", event="error", data=data)
        event_type = _header(headers, ":event-type")
        self._seen = True
        if not self.invoke:
            return SSEEvent(raw=b"", event=event_type, data=payload)
        if event_type != "chunk":
            return None  # InvokeModel streams only chunks; anything else is not the model's output
        try:
            data = base64.b64decode(orjson.loads(payload)["bytes"], validate=True)
        except (KeyError, TypeError, binascii.Error) as e:
            raise InvalidAnswer(f"a Bedrock chunk without base64 bytes ({type(e).__name__})") from None
        found = _TYPE.match(data)
        name = found.group(1).decode() if found else _type_of(data)
        return SSEEvent(raw=b"event: " + name.encode() + b"\ndata: " + data + b"\n\n", event=name, data=data)


def _type_of(data: bytes) -> str:
    doc = orjson.loads(data)
    kind = doc.get("type") if isinstance(doc, dict) else None
    if not isinstance(kind, str) or not kind.isidentifier():
        raise InvalidAnswer("a Bedrock chunk whose event has no type")
    return kind


# -- writing frames -----------------------------------------------------------------------


def _headers_bytes(headers: dict[str, str]) -> bytes:
    out = []
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        out.append(struct.pack("!B", len(raw_name)) + raw_name + b"\x07" + struct.pack("!H", len(raw_value)) + raw_value)
    return b"".join(out)


def encode_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message: the prelude (total and header lengths, their CRC32), the
    string headers, the payload and the CRC32 of all before it."""
    head = _headers_bytes(headers)
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack("!II", total, len(head))
    prelude += struct.pack("!I", binascii.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack("!I", binascii.crc32(body))


def event_frame(event_type: str, payload: bytes) -> bytes:
    """A ``:message-type: event`` frame (``chunk`` for InvokeModel, Converse's event names)."""
    return encode_frame({":event-type": event_type, ":content-type": "application/json", ":message-type": "event"},
                        payload)


def chunk_frame(event_json: bytes) -> bytes:
    """An InvokeModelWithResponseStream ``chunk``: one Anthropic event, base64 in ``bytes``."""
    return event_frame("chunk", orjson.dumps({"bytes": base64.b64encode(event_json).decode()}))


def exception_frame(exception_type: str, message: str) -> bytes:
    """A mid-stream ``exception`` frame (``throttlingException``, ``modelStreamErrorException``...)."""
    return encode_frame({":exception-type": exception_type, ":content-type": "application/json",
                         ":message-type": "exception"}, orjson.dumps({"message": message}))
