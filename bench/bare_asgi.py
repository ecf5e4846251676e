"""The framework floor for the benchmarks: hypercorn (trio worker) with a bare ASGI app.

It reads the request body and answers a fixed JSON body, as a gateway that did nothing
else would: what is left of the gateway's CPU per request above this is Quart, the relay,
the upstream call and the store. Usage: ``python bench/bare_asgi.py`` (prints its URL).
"""

from __future__ import annotations

import socket
import sys

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

BODY = b'{"id":"bare","object":"chat.completion","choices":[]}'


async def lifespan(receive, send) -> None:
    """hypercorn's start-up and shutdown messages, answered."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifespan(receive, send)
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]})
    await send({"type": "http.response.body", "body": BODY})


def serve_on_loopback(asgi_app) -> None:
    """Serve ``asgi_app`` with hypercorn on a free loopback port, printing its URL first."""
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
    trio.run(serve, asgi_app, config)


def main() -> None:
    serve_on_loopback(app)


if __name__ == "__main__":
    sys.exit(main())
