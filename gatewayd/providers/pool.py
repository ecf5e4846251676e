"""The upstream connection pool: keep-alive HTTP/1.1 connections per origin, O(1) a request.

Why not httpcore's ``AsyncConnectionPool`` (what ``httpx.AsyncHTTPTransport`` uses):
on every request and again on every response close it walks all its connections,
asking each whether it expired (a ``poll`` system call per idle connection) and, for
each idle one, counting all connections again. With 64 requests in flight that is
thousands of checks a request: the gateway's CPU per request grew by half from 1 to 64
connections, and the pool was the largest share of the growth (issue 15).

Here idle connections wait in a per-origin stack. A request takes the most recently
used one (checking only that one for expiry or a server close) or opens a new one; when
its response is closed, the connection goes back on the stack if it can be reused.
The connections themselves are httpcore's (``httpcore.AsyncHTTPConnection``, its public
interface), so the wire behaviour, timeouts and TLS are unchanged; the pool only hands
them out. ``max_connections`` bounds connections in use; a request over it waits up to
the pool timeout, as before. The slots are shared fairly between accounts
(``fair_slots.py``): a request names its account in the ``gatewayd.account`` extension.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
from typing import AsyncIterator, Iterator

import httpcore
import httpx
import trio

from gatewayd.providers.fair_slots import FairSlots, Owner

ACCOUNT_EXTENSION = "gatewayd.account"  # the request's account, for the fair share of the slots
# httpcore's errors as httpx's, most specific first (httpx does the same in its transport)
_ERRORS: dict[type[Exception], type[httpx.HTTPError]] = {
    httpcore.ConnectTimeout: httpx.ConnectTimeout,
    httpcore.ReadTimeout: httpx.ReadTimeout,
    httpcore.WriteTimeout: httpx.WriteTimeout,
    httpcore.PoolTimeout: httpx.PoolTimeout,
    httpcore.TimeoutException: httpx.TimeoutException,
    httpcore.ConnectError: httpx.ConnectError,
    httpcore.ReadError: httpx.ReadError,
    httpcore.WriteError: httpx.WriteError,
    httpcore.NetworkError: httpx.NetworkError,
    httpcore.ProxyError: httpx.ProxyError,
    httpcore.UnsupportedProtocol: httpx.UnsupportedProtocol,
    httpcore.LocalProtocolError: httpx.LocalProtocolError,
    httpcore.RemoteProtocolError: httpx.RemoteProtocolError,
    httpcore.ProtocolError: httpx.ProtocolError,
}


@contextlib.contextmanager
def httpx_errors() -> Iterator[None]:
    """Raise httpcore's exceptions as the httpx ones the relay handles."""
    try:
        yield
    except Exception as exc:
        for cls in type(exc).__mro__:
            mapped = _ERRORS.get(cls)
            if mapped is not None:
                raise mapped(str(exc)) from exc
        raise


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """httpx's default client context (certifi's CAs, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``),
    made once a process: loading the CA bundle takes some 20 ms of CPU, and a context is safe
    to share between pools. It is read when the first pool is made, at start-up."""
    return httpx.create_ssl_context()


class ConnectionPool:
    """``handle_async_request(httpx.Request) -> httpx.Response`` over pooled HTTP/1.1 connections."""

    def __init__(self, *, max_connections: int, keepalive_expiry: float,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.keepalive_expiry = keepalive_expiry
        self.ssl_context = ssl_context if ssl_context is not None else default_ssl_context()
        self.slots = FairSlots(max_connections)
        self.idle: dict[tuple, list[httpcore.AsyncHTTPConnection]] = {}  # (scheme, host, port) -> stack
        self.opened = 0  # connections ever opened (tests read it to see reuse)

    def _connection(self, origin: httpcore.Origin) -> tuple[httpcore.AsyncHTTPConnection, list]:
        """The freshest reusable idle connection to ``origin``, or a new one; and the stale ones seen."""
        stack = self.idle.get((origin.scheme, origin.host, origin.port))
        stale: list[httpcore.AsyncHTTPConnection] = []
        while stack:
            connection = stack.pop()
            if connection.is_idle() and not connection.has_expired():
                return connection, stale
            stale.append(connection)
        self.opened += 1
        return httpcore.AsyncHTTPConnection(
            origin=origin, ssl_context=self.ssl_context, keepalive_expiry=self.keepalive_expiry,
            http1=True, http2=False, retries=0,
        ), stale

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host, port=request.url.port,
                             target=request.url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        origin = core_request.url.origin
        owner = request.extensions.get(ACCOUNT_EXTENSION)
        if not self.slots.try_take(owner):
            pool_timeout = request.extensions.get("timeout", {}).get("pool")
            if not await self.slots.take(owner, float("inf") if pool_timeout is None else pool_timeout):
                raise httpx.PoolTimeout("no upstream connection became free in time")
        return await self._send(core_request, origin, owner)

    async def _send(self, core_request: httpcore.Request, origin: httpcore.Origin, owner: Owner) -> httpx.Response:
        """With a slot held: send on a connection; the slot is released when the response closes."""
        try:
            while True:
                connection, stale = self._connection(origin)
                if stale:
                    await _close(stale)
                try:
                    with httpx_errors():
                        response = await connection.handle_async_request(core_request)
                except httpcore.ConnectionNotAvailable:
                    continue  # the reused connection was closed under us: take another
                except BaseException:
                    await _close([connection])
                    raise
                break
        except BaseException:
            self.slots.release(owner)
            raise
        return httpx.Response(
            status_code=response.status, headers=response.headers, extensions=response.extensions,
            stream=_ResponseStream(response.stream, self, connection, origin, owner),
        )

    async def _done(self, connection: httpcore.AsyncHTTPConnection, origin: httpcore.Origin, owner: Owner) -> None:
        """A response was closed: keep its connection for the next request if it can serve one."""
        self.slots.release(owner)
        if connection.is_idle() and not connection.is_closed():
            stack = self.idle.setdefault((origin.scheme, origin.host, origin.port), [])
            stack.append(connection)
            # the oldest idle connection is at the bottom: drop it once past its keep-alive
            if len(stack) > 1 and stack[0].has_expired():
                await _close([stack.pop(0)])
        elif not connection.is_closed():
            await _close([connection])

    async def aclose(self) -> None:
        stacks, self.idle = self.idle, {}
        for stack in stacks.values():
            await _close(stack)


async def _close(connections: list) -> None:
    with trio.CancelScope(shield=True):
        for connection in connections:
            await connection.aclose()


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream, pool: ConnectionPool, connection, origin, owner: Owner) -> None:
        self._stream = stream
        self._pool = pool
        self._connection = connection
        self._origin = origin
        self._owner = owner
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            with trio.CancelScope(shield=True), httpx_errors():
                await self._stream.aclose()
        finally:
            await self._pool._done(self._connection, self._origin, self._owner)
