"""Every change gatewayd makes to hypercorn, in one place, checked before the daemon starts.

Hypercorn has no hooks for four things the gateway needs, so gatewayd replaces a few of
its private methods (each fix is written up for upstream in ``docs/hypercorn-upstream.md``):

``hangups``
    Close a connection as soon as its client has gone, not ``keep_alive_timeout`` later.
    Hypercorn's trio ``TCPServer`` runs a connection's request tasks and its keep-alive
    idle timer in one task group and closes the socket only when that group ends. When a
    client closes a kept-alive connection (every HTTP client's pool does so with idle
    connections), the read loop ends but the idle timer keeps waiting out
    ``keep_alive_timeout`` (75 s here): a soak found 600 file descriptors and ~10 MB held
    after two minutes of traffic with hang-ups; at a few hundred new connections a second
    they reach the process's file limit and the listener stops accepting. Once the read
    side has ended no request can arrive, so the patch stops the idle timer there, and a
    timer started after that (an answer finished after a reset begins a new keep-alive
    cycle) closes the connection at once.

``protocol_errors``
    Requests h11 refuses before any ASGI call (oversized headers, broken HTTP/1.1) are
    answered by hypercorn with an empty 400 or 431 that tells a client nothing. The patch
    sends the chat-format error body and an ``X-Request-Id`` like every other response.

``cleartext_h2``
    Hypercorn always serves HTTP/2 without TLS on a plain listener (the ``PRI *`` preface,
    or ``Upgrade: h2c``) and has no setting to turn it off; no SDK or browser speaks it, and
    one connection carries up to 100 streams. On a listener whose hypercorn Config has
    ``gatewayd_h2c = False`` (``gatewayd.server`` sets it from ``[server] h2c``), the
    preface is answered 505 in the chat envelope and the connection closed, and
    ``Upgrade: h2c`` is ignored (answered in HTTP/1.1, which RFC 9110 section 7.8 allows).
    A Config without the attribute (the simulator's, a test's) keeps hypercorn's behaviour.

``websocket_limits``
    Hypercorn accepts permessage-deflate on every WebSocket a client offers it on, and
    wsproto inflates each frame whole, before hypercorn's ``websocket_max_message_size``
    is checked: about 1 MiB sent became about 1 GiB held (issue 31, N2). And it buffers a
    message until its last frame, uncounted by the app. gatewayd has one WebSocket path
    (``gatewayd.responses_ws``) whose messages are request bodies counted in the body
    budget, so the patch (1) declines the extension: the handshake is answered as if the
    client had offered none (RFC 7692 lets a server decline), and every message is as large
    in memory as on the wire; and (2) when the app put a body lease in the scope
    (``SCOPE_LEASE``, ``gatewayd.socket_limits``), counts each frame's data against it as it
    is buffered, so a message is counted from its first byte, and a message that would take
    its account over its share is refused mid-way like one over the size cap (close 1009).
    The app gives the bytes back once it is done with the message.

Every private name a patch reads, replaces or relies on being called is listed in its
``needs`` and checked by :func:`refusal` (``gatewayd serve`` calls it before anything else)
and by :func:`install_all`. Whether the daemon may start without a patch is decided per
patch (``required``):

- ``hangups``: required. Without it the daemon leaks a file descriptor per departed
  client for 75 s and, under load, stops accepting: an outage that arrives later and
  slowly, worse than refusing to start.
- ``cleartext_h2``: required. Without it ``h2c = false`` would be silently ignored,
  opening the multiplexed attack surface the operator closed.
- ``websocket_limits``: required. Without it one socket's message could hold a thousand
  times its size before anything counted it.
- ``protocol_errors``: optional. Without it the same statuses are answered, only with
  hypercorn's empty bodies; the request never reached the app, so no money or row is at
  stake. The daemon starts and logs an error naming what is missing.

A release of hypercorn outside ``TESTED_RANGE`` (the range ``pyproject.toml`` pins) is not
refused on that ground alone: the checks say whether the patches still fit.
"""

from __future__ import annotations

import logging
from importlib.metadata import version
from itertools import chain
from typing import Callable

import attrs
import h11
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.events import Closed
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.ws_stream import FrameTooLargeError, Handshake, WebsocketBuffer, WSStream
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import TrioSingleTask

from gatewayd.errors import GatewayError
from gatewayd.trace import new_request_id

log = logging.getLogger("gatewayd")

TESTED_RANGE = ">=0.18,<0.19"  # keep in step with pyproject.toml

MARK = "_gatewayd_original"  # set on each replacement: the method it replaced


class PatchRefused(Exception):
    """A required patch cannot apply to the installed hypercorn; the daemon must not start."""


# -- what a patch relies on -----------------------------------------------------------------


def _code_names(function) -> frozenset[str]:
    """The attribute and global names ``function``'s own code mentions (the unpatched one)."""
    function = getattr(function, MARK, function)
    code = getattr(function, "__code__", None)
    return frozenset(code.co_names) if code is not None else frozenset()


@attrs.frozen
class Needs:
    """One private name a patch relies on, and how: ``kind`` is ``method`` (the class has it),
    ``set_in_init`` (``__init__`` assigns it on the instance), or ``called_by`` (the method
    ``by`` mentions it, so replacing it changes what hypercorn does)."""

    owner: type
    name: str
    kind: str = "method"
    by: str = ""

    def problem(self) -> str | None:
        where = f"{self.owner.__module__}.{self.owner.__qualname__}"
        if self.kind == "method":
            return None if callable(getattr(self.owner, self.name, None)) else f"{where}.{self.name} is gone"
        if self.kind == "set_in_init":
            if self.name in _code_names(getattr(self.owner, "__init__", None)):
                return None
            return f"{where}.__init__ no longer sets self.{self.name}"
        if self.kind == "called_by":
            method = getattr(self.owner, self.by, None)
            if method is not None and self.name in _code_names(method):
                return None
            return f"{where}.{self.by} no longer uses {self.name}"
        raise ValueError(f"unknown kind {self.kind!r}")


@attrs.frozen
class Patch:
    name: str
    required: bool
    needs: tuple[Needs, ...]
    replaces: tuple[tuple[type, str], ...]  # the methods ``apply`` swaps
    apply: Callable[[], None]
    without: str  # what the daemon does without it (said in the log when an optional one is skipped)

    def problems(self) -> list[str]:
        return [p for p in (need.problem() for need in self.needs) if p is not None]

    def applied(self) -> bool:
        return all(hasattr(getattr(owner, name, None), MARK) for owner, name in self.replaces)


def _replace(owner: type, name: str, replacement) -> None:
    setattr(replacement, MARK, getattr(owner, name))
    setattr(owner, name, replacement)


def original(owner: type, name: str):
    """The method as hypercorn wrote it, patched or not (tests build unpatched subclasses with it)."""
    method = getattr(owner, name)
    return getattr(method, MARK, method)


# -- hangups ------------------------------------------------------------------------------------


def _apply_hangups() -> None:
    read_data = original(TCPServer, "_read_data")
    idle_timeout = original(TCPServer, "_idle_timeout")

    async def _read_data(self) -> None:
        await read_data(self)  # returns once the client closed (or the stream broke)
        self.gatewayd_peer_gone = True
        await self.idle_task.stop()

    async def _idle_timeout(self) -> None:
        if not getattr(self, "gatewayd_peer_gone", False):
            await idle_timeout(self)
            return
        # a keep-alive cycle begun after the client left (its answer finished after a reset)
        with trio.CancelScope(shield=True):
            await self._initiate_server_close()

    _replace(TCPServer, "_read_data", _read_data)
    _replace(TCPServer, "_idle_timeout", _idle_timeout)


HANGUPS = Patch(
    name="hangups",
    required=True,
    needs=(
        Needs(TCPServer, "_read_data"),
        Needs(TCPServer, "_read_data", "called_by", by="run"),
        Needs(TCPServer, "_idle_timeout"),
        Needs(TCPServer, "_idle_timeout", "called_by", by="protocol_send"),
        Needs(TCPServer, "_initiate_server_close"),
        Needs(TCPServer, "idle_task", "set_in_init"),
        Needs(TrioSingleTask, "stop"),
    ),
    replaces=((TCPServer, "_read_data"), (TCPServer, "_idle_timeout")),
    apply=_apply_hangups,
    without="a departed client's connection would stay open for keep_alive_timeout",
)


# -- protocol_errors ----------------------------------------------------------------------------

PROTOCOL_ERROR_MESSAGES = {
    431: ("the request headers are too large (at most {limit} bytes of request line and headers)",
          "request_header_too_large"),
    400: ("the request is not valid HTTP/1.1", "invalid_http_request"),
    505: ("HTTP/2 without TLS (h2c) is not served here; use HTTP/1.1, or HTTP/2 over TLS", "h2c_not_served"),
}


def protocol_error_body(status: int, request_id: str, limit: int) -> bytes:
    """The chat-envelope body for a request hypercorn refused itself."""
    message, code = PROTOCOL_ERROR_MESSAGES.get(status, ("the request could not be read", "invalid_http_request"))
    return GatewayError(status, message.format(limit=limit), code).chat_body(request_id)


def _apply_protocol_errors() -> None:
    async def _send_error_response(self, status_code: int) -> None:
        request_id = new_request_id()
        body = protocol_error_body(status_code, request_id, self.config.h11_max_incomplete_size)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            (b"x-request-id", request_id.encode()),
        ]
        await self._send_h11_event(
            h11.Response(status_code=status_code, headers=list(chain(headers, self.config.response_headers("h11"))))
        )
        await self._send_h11_event(h11.Data(data=body))
        await self._send_h11_event(h11.EndOfMessage())

    _replace(H11Protocol, "_send_error_response", _send_error_response)


PROTOCOL_ERRORS = Patch(
    name="protocol_errors",
    required=False,
    needs=(
        Needs(H11Protocol, "_send_error_response"),
        Needs(H11Protocol, "_send_error_response", "called_by", by="_handle_events"),
        Needs(H11Protocol, "_send_h11_event"),
        Needs(H11Protocol, "config", "set_in_init"),
        Needs(HypercornConfig, "response_headers"),
    ),
    replaces=((H11Protocol, "_send_error_response"),),
    apply=_apply_protocol_errors,
    without="hypercorn's own 400/431 answers (empty bodies, no X-Request-Id) stay",
)


# -- cleartext_h2 -------------------------------------------------------------------------------

H2C_ATTRIBUTE = "gatewayd_h2c"  # on a hypercorn Config: False refuses h2c on that listener
PREFACE_REFUSED = 505


class CleartextH2Refused(Exception):
    """Raised from the HTTP/1.1 protocol after answering a preface; ends the connection."""


def _is_preface(request) -> bool:
    return request.method == b"PRI" and request.target == b"*" and request.http_version == b"2.0"


def _apply_cleartext_h2() -> None:
    check_protocol = original(H11Protocol, "_check_protocol")
    handle = original(ProtocolWrapper, "handle")

    async def _check_protocol(self, event) -> None:
        if getattr(self.config, H2C_ATTRIBUTE, True):
            await check_protocol(self, event)
        elif _is_preface(event):
            await self._send_error_response(PREFACE_REFUSED)
            raise CleartextH2Refused()
        # else: an ``Upgrade: h2c`` header is left unanswered; the request is served in HTTP/1.1

    async def guarded_handle(self, event):
        try:
            return await handle(self, event)
        except CleartextH2Refused:
            await self.send(Closed())

    _replace(H11Protocol, "_check_protocol", _check_protocol)
    _replace(ProtocolWrapper, "handle", guarded_handle)


CLEARTEXT_H2 = Patch(
    name="cleartext_h2",
    required=True,
    needs=(
        Needs(H11Protocol, "_check_protocol"),
        Needs(H11Protocol, "_check_protocol", "called_by", by="_handle_events"),
        Needs(H11Protocol, "_send_error_response"),
        Needs(H11Protocol, "config", "set_in_init"),
        Needs(ProtocolWrapper, "handle"),
        Needs(ProtocolWrapper, "send", "set_in_init"),
    ),
    replaces=((H11Protocol, "_check_protocol"), (ProtocolWrapper, "handle")),
    apply=_apply_cleartext_h2,
    without="HTTP/2 without TLS would be served although [server] h2c is false",
)

# -- websocket_limits ----------------------------------------------------------------------------

SCOPE_LEASE = "gateway.websocket_lease"  # in a websocket scope: the body lease its frames count against
SCOPE_COUNTED = "gateway.websocket_counted"  # set by the patch: the frames are being counted


class CountingBuffer(WebsocketBuffer):
    """Hypercorn's message buffer, counting each frame's data against ``lease`` as it comes
    (its ``receive(n)`` returns None, or a refusal: then the message is too large now)."""

    def __init__(self, max_length: int, lease) -> None:
        super().__init__(max_length)
        self.lease = lease

    def extend(self, event) -> None:
        if self.lease.receive(len(event.data)) is not None:
            raise FrameTooLargeError()  # hypercorn closes with 1009 (message too big)
        super().extend(event)


def _apply_websocket_limits() -> None:
    accept = original(WSStream, "_accept")

    async def _accept(self, message) -> None:
        self.handshake.extensions = None  # the client's offer of permessage-deflate, declined
        lease = self.scope.get(SCOPE_LEASE)
        if lease is not None:
            self.buffer = CountingBuffer(self.buffer.max_length, lease)
            self.scope[SCOPE_COUNTED] = True  # the app's scope: it counts the messages no more
        await accept(self, message)

    _replace(WSStream, "_accept", _accept)


WEBSOCKET_LIMITS = Patch(
    name="websocket_limits",
    required=True,
    needs=(
        Needs(WSStream, "_accept"),
        Needs(WSStream, "handshake", "called_by", by="_accept"),
        Needs(WSStream, "buffer", "set_in_init"),
        Needs(WSStream, "buffer", "called_by", by="_handle_events"),
        Needs(WSStream, "scope", "called_by", by="handle"),
        Needs(WebsocketBuffer, "extend"),
        Needs(WebsocketBuffer, "max_length", "set_in_init"),
        Needs(Handshake, "accept"),
        Needs(Handshake, "extensions", "set_in_init"),
        Needs(Handshake, "extensions", "called_by", by="accept"),
    ),
    replaces=((WSStream, "_accept"),),
    apply=_apply_websocket_limits,
    without="a compressed WebSocket message would be inflated whole before any cap applies",
)

PATCHES = (HANGUPS, PROTOCOL_ERRORS, CLEARTEXT_H2, WEBSOCKET_LIMITS)


# -- start-up -----------------------------------------------------------------------------------


def _refusal_line(patch: Patch, problems: list[str]) -> str:
    return (f"hypercorn {version('hypercorn')} does not fit gatewayd's '{patch.name}' patch "
            f"({'; '.join(problems)}); install a tested release: pip install 'hypercorn{TESTED_RANGE}'")


def refusal(patches=PATCHES) -> str | None:
    """The one line ``gatewayd serve`` exits 2 with when a required patch cannot apply, else None."""
    for patch in patches:
        problems = patch.problems()
        if problems and patch.required:
            return _refusal_line(patch, problems)
    return None


def install_all(patches=PATCHES) -> list[str]:
    """Apply every patch not yet applied; the names of optional ones left out (each logged as an
    error). Raises :class:`PatchRefused` before changing anything if a required one cannot apply."""
    line = refusal(patches)
    if line is not None:
        raise PatchRefused(line)
    skipped = []
    for patch in patches:
        if patch.applied():
            continue
        problems = patch.problems()
        if problems:
            log.error("gatewayd: hypercorn patch '%s' not applied (%s): %s; tested with hypercorn%s",
                      patch.name, "; ".join(problems), patch.without, TESTED_RANGE)
            skipped.append(patch.name)
            continue
        patch.apply()
    return skipped
