"""The upstream connection pool (gatewayd/providers/pool.py) against a real loopback server:
reuse, growth under concurrency, server-closed connections, the connection cap, errors."""

from __future__ import annotations

import functools

import httpx
import pytest
import trio

from gatewayd.providers.pool import ConnectionPool

BODY = b'{"ok":true}'


class Server:
    """HTTP/1.1 on loopback: answers every request with BODY; counts the connections it accepted."""

    def __init__(self, *, close_after: bool = False, delay: float = 0.0, silent: bool = False) -> None:
        self.connections = 0
        self.requests = 0
        self.close_after = close_after
        self.delay = delay
        self.silent = silent
        self.streams: list[trio.SocketStream] = []

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        self.streams.append(stream)
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buffer) < length:
                    buffer += await stream.receive_some(65536)
                buffer = buffer[length:]
                self.requests += 1
                if self.silent:
                    await trio.sleep_forever()
                await trio.sleep(self.delay)
                close = b"connection: close\r\n" if self.close_after else b""
                await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + close
                                      + b"content-length: %d\r\n\r\n" % len(BODY) + BODY)
                if self.close_after:
                    await stream.aclose()
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):  # the client left, or the test closed it
            return

    async def start(self, nursery) -> str:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, self.handle, 0, host="127.0.0.1"))
        return f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"


def request(url: str, *, pool_timeout: float | None = 5, read_timeout: float | None = 5) -> httpx.Request:
    timeout = httpx.Timeout(connect=5, read=read_timeout, write=5, pool=pool_timeout).as_dict()
    return httpx.Request("POST", url + "/v1/chat/completions", content=b'{"q":1}',
                         headers={"content-type": "application/json"}, extensions={"timeout": timeout})


async def fetch(pool: ConnectionPool, req: httpx.Request) -> bytes:
    response = await pool.handle_async_request(req)
    try:
        assert response.status_code == 200
        return await response.aread()
    finally:
        await response.aclose()


async def test_sequential_requests_reuse_one_connection(nursery):
    server = Server()
    url = await server.start(nursery)
    pool = ConnectionPool(max_connections=10, keepalive_expiry=30)
    for _ in range(5):
        assert await fetch(pool, request(url)) == BODY
    assert server.connections == 1 and server.requests == 5 and pool.opened == 1
    await pool.aclose()


async def test_concurrent_requests_open_connections_then_reuse_them(nursery):
    server = Server(delay=0.05)
    url = await server.start(nursery)
    pool = ConnectionPool(max_connections=10, keepalive_expiry=30)
    for _ in range(2):
        async with trio.open_nursery() as inner:
            for _ in range(5):
                inner.start_soon(fetch, pool, request(url))
    assert server.requests == 10
    assert server.connections == 5 and pool.opened == 5  # the second round reused all five
    await pool.aclose()


async def test_a_connection_the_server_closed_is_not_reused(nursery):
    server = Server(close_after=True)
    url = await server.start(nursery)
    pool = ConnectionPool(max_connections=10, keepalive_expiry=30)
    for _ in range(3):
        assert await fetch(pool, request(url)) == BODY
    assert server.connections == 3


async def test_an_idle_connection_closed_by_the_server_is_replaced(nursery):
    server = Server()
    url = await server.start(nursery)
    pool = ConnectionPool(max_connections=10, keepalive_expiry=30)
    assert await fetch(pool, request(url)) == BODY
    await server.streams[0].aclose()  # the server drops the keep-alive connection while it is idle
    await trio.sleep(0.05)
    assert await fetch(pool, request(url)) == BODY
    assert server.connections == 2


async def test_expired_keepalive_is_not_reused(nursery):
    server = Server()
    url = await server.start(nursery)
    pool = ConnectionPool(max_connections=10, keepalive_expiry=0.05)
    assert await fetch(pool, request(url)) == BODY
    await trio.sleep(0.1)
    assert await fetch(pool, request(url)) == BODY
    assert pool.opened == 2


async def test_the_cap_makes_a_request_wait_then_times_out(nursery):
    server = Server(delay=0.3)
    url = await server.start(nursery)
    pool = ConnectionPool(max_connections=1, keepalive_expiry=30)
    results = []

    async def first():
        results.append(await fetch(pool, request(url)))

    nursery.start_soon(first)
    await trio.sleep(0.05)
    with pytest.raises(httpx.PoolTimeout):
        await pool.handle_async_request(request(url, pool_timeout=0.05))
    assert await fetch(pool, request(url)) == BODY  # waits for the first one's connection, then reuses it
    assert results == [BODY] and server.connections == 1


async def test_errors_are_httpx_errors_and_free_the_slot(nursery):
    pool = ConnectionPool(max_connections=1, keepalive_expiry=30)
    with trio.socket.socket() as s:  # a port nobody listens on
        await s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for _ in range(3):  # the slot is released each time, or the second attempt would wait
        with pytest.raises(httpx.ConnectError):
            await pool.handle_async_request(request(f"http://127.0.0.1:{port}", pool_timeout=0.1))

    silent = Server(silent=True)
    url = await silent.start(nursery)
    with pytest.raises(httpx.ReadTimeout):
        await pool.handle_async_request(request(url, read_timeout=0.1))
    server = Server()
    url = await server.start(nursery)
    assert await fetch(pool, request(url, pool_timeout=0.1)) == BODY


async def test_cancelled_request_frees_the_slot_and_drops_the_connection(nursery):
    server = Server(delay=5)
    url = await server.start(nursery)
    pool = ConnectionPool(max_connections=1, keepalive_expiry=30)
    with trio.move_on_after(0.1):
        await pool.handle_async_request(request(url))
    fast = Server()
    fast_url = await fast.start(nursery)
    assert await fetch(pool, request(fast_url, pool_timeout=0.1)) == BODY
    # the cut connection was dropped, not pooled: only the fast server's connection waits idle
    assert [len(stack) for stack in pool.idle.values()] == [1]
    assert all(c.is_idle() for stack in pool.idle.values() for c in stack)
