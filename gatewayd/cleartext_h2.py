"""HTTP/2 without TLS (h2c) only when the operator asks for it: ``[server] h2c = true``.

Hypercorn always serves h2c on a plain listener, two ways: a connection that opens with
HTTP/2's preface (``PRI * HTTP/2.0``, "prior knowledge"), and an HTTP/1.1 request with
``Upgrade: h2c``; it has no setting to turn either off. On the internet it is an
attacker's tool more than a client's (no SDK and no browser speaks it; a proxy in front
speaks HTTP/1.1 to its upstream): one connection carries up to 100 streams, each with
its own request body. So ``install`` patches hypercorn's HTTP/1.1 protocol: on a listener
whose hypercorn Config has ``gatewayd_h2c = False`` (``gatewayd.server`` sets it from the
config), the preface is answered 505 in the chat envelope (``gatewayd.protocol_errors``)
and the connection closed, and ``Upgrade: h2c`` is ignored (the request is answered in
HTTP/1.1, which RFC 9110 section 7.8 allows). HTTP/2 over TLS, chosen by ALPN, does not
pass through here and stays on. A Config without the attribute (the simulator's, a
test's) keeps hypercorn's behaviour. Checked with hypercorn 0.17-0.18; without these
methods nothing is patched and ``install`` returns False.
"""

from __future__ import annotations

ATTRIBUTE = "gatewayd_h2c"
PREFACE_REFUSED = 505


class CleartextH2Refused(Exception):
    """Raised from the HTTP/1.1 protocol after answering a preface; ends the connection."""


def _is_preface(request) -> bool:
    return request.method == b"PRI" and request.target == b"*" and request.http_version == b"2.0"


def install() -> bool:
    """Patch hypercorn once; True if it was (or already is) patched."""
    try:
        from hypercorn.events import Closed
        from hypercorn.protocol import ProtocolWrapper
        from hypercorn.protocol.h11 import H11Protocol
    except ImportError:  # pragma: no cover
        return False
    check_protocol = getattr(H11Protocol, "_check_protocol", None)
    handle = getattr(ProtocolWrapper, "handle", None)
    if check_protocol is None or handle is None:
        return False
    if getattr(check_protocol, "_gatewayd", False):
        return True

    async def _check_protocol(self, event) -> None:
        if getattr(self.config, ATTRIBUTE, True):
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

    _check_protocol._gatewayd = True  # type: ignore[attr-defined]
    H11Protocol._check_protocol = _check_protocol  # type: ignore[method-assign]
    ProtocolWrapper.handle = guarded_handle  # type: ignore[method-assign]
    return True
