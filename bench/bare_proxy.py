"""The stack's proxy floor for the benchmarks: hypercorn (trio worker) with a bare ASGI app
that forwards each request through gatewayd's upstream pool (httpcore's HTTP/1.1
connections) and sends the answer back, and nothing else: no key, no hold, no usage row,
no log line, no metrics.

A gateway request is one HTTP exchange on each side; this is what those two exchanges
cost in this stack before any of the gateway's own work. Usage: ``python
bench/bare_proxy.py UPSTREAM_URL`` (prints its URL).
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gatewayd.providers.upstream import Upstream  # noqa: E402

UPSTREAM = Upstream(connect_timeout_s=5, stream_idle_timeout_s=300)


def make_app(upstream_url: str):
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.errorlog = "-"
    config.loglevel = "WARNING"
    config.keep_alive_timeout = 75
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    trio.run(serve, make_app(sys.argv[1]), config)


if __name__ == "__main__":
    sys.exit(main())
