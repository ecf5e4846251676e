"""AWS's binary event-stream framing (``application/vnd.amazon.eventstream``), as Bedrock
streams it, turned into the SSE events the pipes read.

Sans-I/O. :class:`FrameDecoder` is our own incremental decoder (prelude, headers, payload,
both CRC32s checked with :func:`zlib.crc32`), fed with each network chunk; a frame split
across chunks, at any byte, waits in its buffer. We do not use botocore's
``EventStreamBuffer`` here: it re-copies its whole buffer after every frame (quadratic in a
large read) and parses headers byte by byte, 21-29 us an event and about 8 ms for one 64 kB
read on the event loop (``bench/bedrock_signing.py``; the figures are in
docs/operations.md). botocore stays the oracle in the tests (``tests/formats/
test_bedrock_formats.py``: random frames, split at random points, decode as botocore
decodes them). Each complete frame becomes one :class:`~gatewayd.formats.sse.SSEEvent`, so a
Bedrock route reuses the pipes of the Anthropic route unchanged:

- ``InvokeModelWithResponseStream`` (``invoke=True``): a ``chunk`` event's payload is
  ``{"bytes": base64(<one Anthropic stream event as JSON>)}``; the event is the decoded
  JSON, and its raw bytes are that JSON framed as SSE (``event: <type>``), which is what a
  messages client is sent: no JSON re-encode, the provider's bytes after base64.
- ``ConverseStream`` (``invoke=False``): the event's name is its ``:event-type`` header
  (``messageStart``, ``contentBlockDelta``, ``metadata``...), its data the JSON payload.
- An ``exception`` frame (``:message-type: exception``, e.g. ``throttlingException`` or
  ``modelStreamErrorException``) mid-stream becomes an Anthropic-shaped ``error`` event,
  which ends the stream as a provider error. Before any other event it is the provider's
  refusal: :class:`StreamRefused` with the status Bedrock gives that exception over HTTP
  (the adapter makes it an ``UpstreamError``), so nothing is charged and the client gets
  that status.

A frame that does not decode (bad CRC, bad lengths, a bad header) is the provider's invalid
answer (:class:`~gatewayd.formats.errors.InvalidAnswer`, a 502 before the first byte).

:func:`encode_frame` writes frames (the simulator serves Bedrock with it; tests build
streams with it).
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
import zlib
from typing import Union

import orjson

from gatewayd.formats.errors import InvalidAnswer
from gatewayd.formats.sse import SSEEvent

__all__ = ["EXCEPTION_STATUS", "EventStreamSplitter", "FrameDecoder", "FrameError", "HeaderValue", "StreamRefused",
           "encode_frame", "error_type_of", "exception_frame"]

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


# -- reading frames ------------------------------------------------------------------------

#: A header's value as botocore gives it: bool (types 0/1), int (byte, short, integer, long,
#: timestamp in ms), bytes (byte array, uuid), str (string).
HeaderValue = Union[bool, int, bytes, str]

_PRELUDE = struct.Struct("!III")  # total length, headers length, CRC32 of the first 8 bytes
_U32 = struct.Struct("!I")
_U16 = struct.Struct("!H")
_MIN_FRAME = 16  # prelude (12) + message CRC (4): a frame with no headers and no payload
MAX_HEADERS_LENGTH = 128 * 1024  # AWS's limits (and botocore's): larger is not a frame
MAX_PAYLOAD_LENGTH = 24 * 1024 * 1024
#: header value type -> struct of its fixed-size value (types 6 and 7 carry a 2-byte length)
_KEPT_HEADER_SETS = 16  # distinct header sets a decoder keeps parsed (Converse uses about eight)
_FIXED = {2: struct.Struct("!b"), 3: struct.Struct("!h"), 4: struct.Struct("!i"), 5: struct.Struct("!q"),
          8: struct.Struct("!q")}


class FrameError(ValueError):
    """Bytes that are not an event-stream frame (a CRC or a length that does not hold)."""


def _headers(data: bytes, start: int, end: int) -> dict[str, HeaderValue]:
    """The headers in ``data[start:end]``: name length (1 byte), name, type (1 byte), value."""
    out: dict[str, HeaderValue] = {}
    at = start
    try:
        while at < end:
            name_end = at + 1 + data[at]
            name = data[at + 1:name_end].decode("utf-8")
            kind = data[name_end]
            at = name_end + 1
            value: HeaderValue
            if kind == 7 or kind == 6:
                value_end = at + 2 + _U16.unpack_from(data, at)[0]
                raw = data[at + 2:value_end]
                value = raw.decode("utf-8") if kind == 7 else raw
                at = value_end
            elif kind == 0 or kind == 1:
                value = kind == 0
            elif kind == 9:
                value, at = data[at:at + 16], at + 16
            else:
                fixed = _FIXED.get(kind)
                if fixed is None:
                    raise FrameError(f"a header of unknown type {kind}")
                value = fixed.unpack_from(data, at)[0]
                at += fixed.size
            if at > end:
                raise FrameError("a header runs past the headers")
            out[name] = value
    except (IndexError, struct.error, UnicodeDecodeError) as e:
        raise FrameError(f"a header does not decode ({type(e).__name__})") from None
    return out


class FrameDecoder:
    """Event-stream frames from a byte stream fed in chunks of any size.

    :meth:`feed` returns the (headers, payload) of every frame completed by the chunk. The
    unread tail is kept once per feed (no re-copy per frame), and the common case, a read
    that ends on a frame boundary, keeps nothing. The prelude's CRC is checked before its
    lengths are believed, the message CRC (over everything before it) before the frame is
    returned: a corrupt frame is :class:`FrameError`, and the decoder is unusable after it.

    A stream's frames mostly repeat the same header bytes (Bedrock's every ``chunk``), so
    their parse is kept, keyed by those bytes: frames with equal headers share one dict,
    which callers read and do not change.
    """

    def __init__(self) -> None:
        self._tail = b""
        self._parsed: dict[bytes, dict[str, HeaderValue]] = {}

    def pending(self) -> int:
        """Bytes of an incomplete frame waiting for the rest."""
        return len(self._tail)

    def feed(self, chunk: bytes) -> list[tuple[dict[str, HeaderValue], bytes]]:
        data = self._tail + chunk if self._tail else bytes(chunk)
        frames = []
        view = memoryview(data)  # CRCs over slices of it copy nothing
        at, size = 0, len(data)
        while size - at >= 12:
            total, headers_length, prelude_crc = _PRELUDE.unpack_from(data, at)
            if zlib.crc32(view[at:at + 8]) != prelude_crc:
                raise FrameError("the prelude's CRC does not match")
            if total < _MIN_FRAME or headers_length > total - _MIN_FRAME:
                raise FrameError(f"a frame of {total} bytes cannot hold {headers_length} bytes of headers")
            if headers_length > MAX_HEADERS_LENGTH or total - headers_length - _MIN_FRAME > MAX_PAYLOAD_LENGTH:
                raise FrameError("a frame over the event stream's size limits")
            end = at + total
            if end > size:
                break
            if zlib.crc32(view[at:end - 4]) != _U32.unpack_from(data, end - 4)[0]:
                raise FrameError("the message's CRC does not match")
            headers_end = at + 12 + headers_length
            raw_headers = data[at + 12:headers_end]
            headers = self._parsed.get(raw_headers)
            if headers is None:
                headers = _headers(raw_headers, 0, headers_length)
                if len(self._parsed) < _KEPT_HEADER_SETS:
                    self._parsed[raw_headers] = headers
            frames.append((headers, data[headers_end:end - 4]))
            at = end
        self._tail = data[at:] if at < size else b""
        return frames


def _header(headers: dict[str, HeaderValue], name: str) -> str:
    value = headers.get(name, "")
    if isinstance(value, str):
        return value
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _message(payload: bytes) -> str:
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return payload.decode("utf-8", "replace")[:500] or "the provider's stream failed"
    if isinstance(doc, dict):
        for key in ("message", "Message"):
            message = doc.get(key)
            if isinstance(message, str):
                return message
    return "the provider's stream failed"


class StreamRefused(Exception):
    """An exception frame before any event: the provider refused the request, as it would
    have over HTTP with ``status``, ``body`` (``{"message": ...}``) and ``headers``
    (``x-amzn-errortype``)."""

    def __init__(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        super().__init__(f"{status} {headers.get('x-amzn-errortype')}")
        self.status = status
        self.body = body
        self.headers = headers


class EventStreamSplitter:
    """Drop-in for :class:`~gatewayd.formats.sse.SSESplitter` on a Bedrock stream."""

    def __init__(self, *, invoke: bool) -> None:
        self.invoke = invoke
        self._decoder = FrameDecoder()
        self._seen = False  # an event (not an exception) came

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        try:
            frames = self._decoder.feed(chunk)
        except FrameError as e:
            raise InvalidAnswer(f"the provider's event stream does not decode ({e})") from None
        events = []
        for headers, payload in frames:
            event = self._event(headers, payload)
            if event is not None:
                events.append(event)
        return events

    def flush(self) -> list[SSEEvent]:
        """The stream ended: a partial frame left in the buffer is dropped (an incomplete
        answer, which the pump treats as the stream breaking off)."""
        return []

    def pending(self) -> int:
        return self._decoder.pending()

    def _event(self, headers: dict[str, HeaderValue], payload: bytes) -> SSEEvent | None:
        kind = _header(headers, ":message-type")
        if kind in ("exception", "error"):
            name = _header(headers, ":exception-type") or _header(headers, ":error-code") or "internalServerException"
            message = _message(payload) if kind == "exception" else _header(headers, ":error-message")
            status, error_type = error_type_of(name)
            if not self._seen:
                body = orjson.dumps({"message": message})
                raise StreamRefused(status, body, {"x-amzn-errortype": name[:1].upper() + name[1:]})
            data = orjson.dumps({"type": "error", "error": {"type": error_type, "message": message}})
            return SSEEvent(raw=b"event: error\ndata: " + data + b"\n\n", event="error", data=data)
        event_type = _header(headers, ":event-type")
        self._seen = True
        if not self.invoke:
            return SSEEvent(raw=b"", event=event_type, data=payload)
        if event_type != "chunk":
            return None  # InvokeModel streams only chunks; anything else is not the model's output
        try:
            data = binascii.a2b_base64(orjson.loads(payload)["bytes"], strict_mode=True)
        except (KeyError, TypeError, binascii.Error, orjson.JSONDecodeError) as e:
            raise InvalidAnswer(f"a Bedrock chunk without base64 bytes ({type(e).__name__})") from None
        found = _TYPE.match(data)
        name = found.group(1).decode() if found else _type_of(data)
        return SSEEvent(raw=b"event: " + name.encode() + b"\ndata: " + data + b"\n\n", event=name, data=data)


def _type_of(data: bytes) -> str:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise InvalidAnswer("a Bedrock chunk whose event is not JSON") from None
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
    prelude += struct.pack("!I", zlib.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack("!I", zlib.crc32(body))


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
