"""WebSocket upgrades: refused cleanly, in the JSON envelope, on every path but one.

``/v1/responses`` serves the Responses API's WebSocket mode (``gatewayd.responses_ws``) on
the public listener. Every other upgrade is refused here. Handed to Quart, an upgrade
found no route and its error path ran Quart's HTTP-only hooks outside a request context:
a bare 500 and a traceback in the log, for a request that needs no key. So the
``Listener`` answers every ``websocket`` scope here, before any app sees it.

The answer is an HTTP response to the handshake (the ASGI "WebSocket Denial Response"
extension, which hypercorn offers): the same envelope, ``X-Request-Id`` and log line as
any other refusal. On ``/v1/responses`` where it is not served (a listener without the
API routes) it is 426: Codex, configured with ``supports_websockets``, falls back to
plain HTTP only on 426 (any other status is an error it reports). Elsewhere: 404 for a
path the gateway does not serve, 501 for an API it does not offer, 400 for a path that
exists but speaks plain HTTP. A server without the extension gets ``websocket.close``
before accepting (1008 with the refusal's message as its reason), which it turns into a 403.
"""

from __future__ import annotations

from gatewayd.errors import GatewayError, not_found_path

WEBSOCKET_FALLBACK_PATHS = frozenset({"/v1/responses"})  # where clients fall back to HTTP on 426


def websocket_refusal(path: str, known_path: bool, not_offered: GatewayError | None) -> GatewayError:
    """The refusal for a WebSocket handshake on ``path``."""
    if path in WEBSOCKET_FALLBACK_PATHS:
        return GatewayError(426, f"WebSocket is not served on {path}; send the request over HTTP (POST {path})",
                            "websocket_not_supported")
    if not_offered is not None:
        return not_offered
    if not known_path:
        return not_found_path(path)
    return GatewayError(400, f"WebSocket is not served on {path}; this path speaks plain HTTP",
                        "websocket_not_supported")


async def refuse_websocket(scope, send, error: GatewayError, request_id: str) -> None:
    """Answer the handshake with ``error`` as an HTTP response (or a close, without the extension)."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        # 1008 (policy violation) with the reason, cut to the 123 bytes a close frame has room for
        reason = error.message.encode()[:123].decode("utf-8", "ignore")
        await send({"type": "websocket.close", "code": 1008, "reason": reason})
        return
    body = error.chat_body(request_id)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"x-request-id", request_id.encode())]
    if scope.get("http_version", "1.1").startswith("1"):
        headers.append((b"connection", b"close"))  # HTTP/2 forbids the header (RFC 9113 8.2.2)
    headers += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in error.headers.items()]
    await send({"type": "websocket.http.response.start", "status": error.status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body, "more_body": False})
