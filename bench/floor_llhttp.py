"""A measurement for a proposal, not a server to run: what HTTP/1.1 costs on trio when the
parsing is done by llhttp (the C parser node.js uses, through ``httptools``) instead of
h11 (pure Python, under hypercorn and httpcore).

``bench/hot_path.py``'s floors show hypercorn + a bare ASGI app at ~1.3 ms of CPU a
request on our 2-core machines and hypercorn + a bare proxy through httpcore at ~2.6 ms:
the stack's HTTP layers, before any gateway work, cost more than a tenth of LiteLLM's
whole request. This file answers "how much of that is the protocol code?" with two
minimal trio programs that parse with llhttp: ``answer`` (read a request, send a canned
answer: compare with hypercorn + bare ASGI) and ``proxy UPSTREAM`` (forward the body over
a kept-alive upstream connection and send the answer back: compare with the bare proxy).
Keep-alive, Content-Length bodies only; no chunked requests, no pipelining, no TLS, no
limits: the least a real server would do, so the figures are a floor for the proposal.

Usage: ``python bench/floor_llhttp.py answer`` or ``python bench/floor_llhttp.py proxy
http://127.0.0.1:PORT`` (prints its URL); needs ``pip install httptools``.
"""

from __future__ import annotations

import functools
import socket
import sys

import httptools
import trio

CANNED = b'{"id":"bare","object":"chat.completion","choices":[]}'


class _Message:
    """Collects one HTTP message from llhttp's callbacks."""

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.done = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


async def _read_message(stream: trio.SocketStream, parser_type) -> tuple[_Message, object] | None:
    message = _Message()
    parser = parser_type(message)
    while not message.done:
        data = await stream.receive_some(65536)
        if not data:
            return None
        parser.feed_data(data)
    return message, parser


def _response(status: int, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return (b"HTTP/1.1 %d OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n" % (status, content_type, len(body))
            + body)


async def serve_answer(stream: trio.SocketStream) -> None:
    while True:
        got = await _read_message(stream, httptools.HttpRequestParser)
        if got is None:
            return
        await stream.send_all(_response(200, CANNED))


def proxy(upstream_host: str, upstream_port: int):
    async def serve(stream: trio.SocketStream) -> None:
        upstream = await trio.open_tcp_stream(upstream_host, upstream_port)
        try:
            while True:
                got = await _read_message(stream, httptools.HttpRequestParser)
                if got is None:
                    return
                request, _ = got
                body = b"".join(request.body)
                await upstream.send_all(
                    b"POST %s HTTP/1.1\r\nhost: %s:%d\r\ncontent-type: application/json\r\n"
                    b"accept: application/json\r\ncontent-length: %d\r\n\r\n"
                    % (request.url, upstream_host.encode(), upstream_port, len(body)) + body)
                answer = await _read_message(upstream, httptools.HttpResponseParser)
                if answer is None:
                    return
                message, parser = answer
                await stream.send_all(_response(parser.get_status_code(), b"".join(message.body)))
        finally:
            await upstream.aclose()

    return serve


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if sys.argv[1] == "proxy":
        hostport = sys.argv[2].split("//", 1)[1]
        host, upstream_port = hostport.rsplit(":", 1)
        handler = proxy(host, int(upstream_port))
    else:
        handler = serve_answer
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    trio.run(functools.partial(trio.serve_tcp, handler, port, host="127.0.0.1"))


if __name__ == "__main__":
    sys.exit(main())
