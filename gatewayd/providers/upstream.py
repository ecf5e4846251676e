"""Talking to providers over HTTP: one connection pool for every adapter.

The relay calls the pool directly (``handle_async_request``, httpx's transport interface)
rather than ``AsyncClient.send``: we use none of the client's redirects, cookies, auth or
event hooks, and skipping them saves about 0.1 ms of CPU a request here. The pool is ours
(``providers/pool.py``): httpx's own walks every connection on every request, which made
the gateway's CPU per request grow with the number of requests in flight.

HTTP/1.1 on purpose: closing an HTTP/1.1 response closes its connection, which stops
the provider generating (httpcore sends no RST_STREAM on HTTP/2). A streaming read
times out after ``stream_idle_timeout_s`` of silence: that is the spec's idle cut-off;
a non-streaming request has no read cut-off at all.
"""

from __future__ import annotations

from typing import AsyncIterator, Callable

import httpx

from gatewayd.providers.pool import ACCOUNT_EXTENSION, ConnectionPool

# a request extension: ``async (request) -> None`` that sets the request's credentials just
# before it is sent (Vertex AI's OAuth tokens: fetched, in a thread, only when they expire;
# Bedrock's SigV4: a large body hashed in a thread)
AUTHORIZE_EXTENSION = "gatewayd.authorize"


class Upstream:
    def __init__(self, *, connect_timeout_s: float, stream_idle_timeout_s: float, max_connections: int = 1000) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.stream_idle_timeout_s = stream_idle_timeout_s
        self.transport = ConnectionPool(max_connections=max_connections, keepalive_expiry=30)
        self._timeouts = {stream: self.timeout(stream).as_dict() for stream in (False, True)}

    def timeout(self, stream: bool) -> httpx.Timeout:
        return httpx.Timeout(
            connect=self.connect_timeout_s,
            read=self.stream_idle_timeout_s if stream else None,
            write=60,
            pool=self.connect_timeout_s,
        )

    def post(self, url: str, body: bytes, headers: dict[str, str], *, stream: bool) -> httpx.Request:
        """A POST to a provider with this transport's timeouts; adapters add their own headers."""
        return httpx.Request("POST", url, content=body, headers=headers, extensions={"timeout": self._timeouts[stream]})

    async def send(self, request: httpx.Request, on_sent: Callable[[], None] | None = None,
                   account: str | None = None) -> httpx.Response:
        """The response with its body still to read (``aread`` or ``aiter_raw``, then ``aclose``).

        ``account`` is whose request this is: the pool shares its connections fairly between
        accounts (``providers/fair_slots.py``).

        ``on_sent`` is called once the request's bytes are handed to the provider's
        connection (the first body chunk taken by the connection's writer, or at the latest
        when an answer comes back): from then on the provider can bill the request's input,
        and before it, it cannot (issue 25: a client gone while we connected pays nothing).

        A request carrying ``AUTHORIZE_EXTENSION`` gets its credentials from it first (Vertex
        AI: a cached OAuth token; a new one from a worker thread when it is about to expire)."""
        if account is not None:
            request.extensions[ACCOUNT_EXTENSION] = account
        authorize = request.extensions.get(AUTHORIZE_EXTENSION)
        if authorize is not None:
            await authorize(request)
        if on_sent is None:
            return await self.transport.handle_async_request(request)
        request.stream = _Handed(request.stream, on_sent)
        response = await self.transport.handle_async_request(request)
        on_sent()
        return response

    async def aclose(self) -> None:
        await self.transport.aclose()


class _Handed(httpx.AsyncByteStream):
    """A request body that says when the connection first takes a chunk of it."""

    def __init__(self, stream, on_sent: Callable[[], None]) -> None:
        self._stream = stream
        self._on_sent = on_sent

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            self._on_sent()
            yield chunk
        self._on_sent()  # an empty body: handed over whole once the headers were
