"""Clear answers for requests that never reach the app: oversized headers, broken HTTP/1.1.

Hypercorn answers these itself (h11 refuses the request before any ASGI call) with an
empty body: a bare 431 or 400 that tells a client nothing. The rule is "bad input gets
a clear error in the right envelope", so the daemon swaps hypercorn's
``H11Protocol._send_error_response`` for one that sends the chat-format error body and
an ``X-Request-Id`` like every other response. Checked with hypercorn 0.17-0.18; if the
method is not there, hypercorn's own bare answer stays (never a 500 either way).
"""

from __future__ import annotations

from itertools import chain

from gatewayd.errors import GatewayError

MESSAGES = {
    431: ("the request headers are too large (at most {limit} bytes of request line and headers)",
          "request_header_too_large"),
    400: ("the request is not valid HTTP/1.1", "invalid_http_request"),
    505: ("HTTP/2 without TLS (h2c) is not served here; use HTTP/1.1, or HTTP/2 over TLS", "h2c_not_served"),
}


def error_body(status: int, request_id: str, limit: int) -> bytes:
    message, code = MESSAGES.get(status, ("the request could not be read", "invalid_http_request"))
    return GatewayError(status, message.format(limit=limit), code).chat_body(request_id)


def install() -> bool:
    """Patch hypercorn's HTTP/1.1 protocol once; True if it was (or already is) patched."""
    try:
        import h11
        from hypercorn.protocol.h11 import H11Protocol
    except ImportError:  # pragma: no cover
        return False
    original = getattr(H11Protocol, "_send_error_response", None)
    if original is None:
        return False
    if getattr(original, "_gatewayd", False):
        return True

    async def _send_error_response(self, status_code: int) -> None:
        from gatewayd.app import new_request_id

        request_id = new_request_id()
        body = error_body(status_code, request_id, self.config.h11_max_incomplete_size)
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

    _send_error_response._gatewayd = True  # type: ignore[attr-defined]
    H11Protocol._send_error_response = _send_error_response  # type: ignore[method-assign]
    return True
