"""The stack's proxy floor for the benchmarks: hypercorn (trio worker) with a bare ASGI app
that forwards each request through gatewayd's upstream pool (httpcore's HTTP/1.1
connections) and sends the answer back, and nothing else: no key, no hold, no usage row,
no log line, no metrics.

A gateway request is one HTTP exchange on each side; this is what those two exchanges
cost in this stack before any of the gateway's own work. Usage: ``python
bench/bare_proxy.py UPSTREAM_URL`` (prints its URL).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bare_asgi import lifespan, serve_on_loopback  # noqa: E402
from gatewayd.providers.upstream import Upstream  # noqa: E402

UPSTREAM = Upstream(connect_timeout_s=5, stream_idle_timeout_s=300)


def make_app(upstream_url: str):
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            return await lifespan(receive, send)
        parts, more = [], True
        while more:
            message = await receive()
            parts.append(message.get("body", b""))
            more = message.get("more_body", False)
        stream = any(k == b"accept" and v == b"text/event-stream" for k, v in scope["headers"])
        request = UPSTREAM.post(upstream_url + scope["path"], b"".join(parts),
                                {"content-type": "application/json",
                                 "accept": "text/event-stream" if stream else "application/json"}, stream=stream)
        response = await UPSTREAM.send(request)
        try:
            if stream:
                await send({"type": "http.response.start", "status": response.status_code,
                            "headers": [(b"content-type", b"text/event-stream")]})
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                body = await response.aread()
                await send({"type": "http.response.start", "status": response.status_code,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
        finally:
            await response.aclose()

    return app


def main() -> None:
    serve_on_loopback(make_app(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
