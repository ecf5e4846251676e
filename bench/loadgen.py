"""A cheap HTTP/1.1 load generator for the benchmarks (asyncio protocols, raw bytes).

A Python HTTP client such as httpx spends about as much CPU per request as the gateway
itself; driving the gateway with it on a 2-core machine measures the client. This one
writes pre-built request bytes on keep-alive connections and parses only the status
line, the headers it needs (Content-Length / chunked) and the chunk framing: tens of
microseconds a request, so the generator is never the bottleneck. It runs in the
benchmark's own process (pin that process away from the gateway's core).

Three shapes of traffic:
  - ``closed_loop``: N connections, each sending its next request when the last answer ends;
  - ``paced``: an open loop at a fixed rate, latency measured from the scheduled send time;
  - ``open_streams``: N streams left open (memory per stream), closed together at the end.
"""

from __future__ import annotations

import asyncio
import time

import attrs


def build_request(path: str, body: bytes, headers: dict[str, str], host: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class ResponseParser:
    """Incremental: ``feed(data)`` returns True when the response is complete."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.buffer = bytearray()
        self.status = 0
        self.in_body = False
        self.remaining = -1  # Content-Length bytes still due; -1 when chunked
        self.chunked = False
        self.body_bytes = 0
        self.keep = False  # collect the body (for checks), else count it only
        self.body = bytearray()
        self.closes = False  # the answer says "connection: close"

    def feed(self, data: bytes) -> bool:
        self.buffer += data
        if not self.in_body:
            end = self.buffer.find(b"\r\n\r\n")
            if end == -1:
                return False
            head = bytes(self.buffer[:end]).split(b"\r\n")
            self.status = int(head[0].split(b" ", 2)[1])
            self.remaining = 0
            for line in head[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    self.remaining = int(value)
                elif name == b"connection" and b"close" in value.lower():
                    self.closes = True
                elif name == b"transfer-encoding" and b"chunked" in value.lower():
                    self.chunked = True
                    self.remaining = -1
            del self.buffer[: end + 4]
            self.in_body = True
        if not self.chunked:
            take = min(len(self.buffer), self.remaining)
            if self.keep:
                self.body += self.buffer[:take]
            self.body_bytes += take
            self.remaining -= take
            del self.buffer[:take]
            return self.remaining == 0
        while True:  # chunked framing: size line, data, CRLF; the zero chunk ends it
            line_end = self.buffer.find(b"\r\n")
            if line_end == -1:
                return False
            size = int(bytes(self.buffer[:line_end]).split(b";")[0], 16)
            if size == 0:
                if self.buffer.find(b"\r\n\r\n", line_end) == -1:
                    return False  # trailers or the final CRLF still to come
                self.buffer.clear()
                return True
            if len(self.buffer) < line_end + 2 + size + 2:
                return False
            if self.keep:
                self.body += self.buffer[line_end + 2: line_end + 2 + size]
            self.body_bytes += size
            del self.buffer[: line_end + 2 + size + 2]


@attrs.define
class Result:
    latencies: list[float] = attrs.Factory(list)  # seconds, send to last byte
    ttfb: list[float] = attrs.Factory(list)  # seconds, send to first byte
    errors: dict[int, int] = attrs.Factory(dict)  # status (0: connection lost) -> count
    elapsed: float = 0.0
    sample: bytes = b""  # one answer's body, for a sanity check

    @property
    def done(self) -> int:
        return len(self.latencies)

    def error(self, status: int) -> None:
        self.errors[status] = self.errors.get(status, 0) + 1


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = ResponseParser()
        self.waiter: asyncio.Future | None = None
        self.first_byte = 0.0
        self.lost = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self.first_byte:
            self.first_byte = time.perf_counter()
        if self.parser.feed(data) and self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(True)

    def connection_lost(self, exc) -> None:
        self.lost = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(False)

    async def request(self, raw: bytes, keep_body: bool = False) -> tuple[bool, int, float]:
        """(complete, status, first-byte time) for one request on this connection."""
        self.parser.reset()
        self.parser.keep = keep_body
        self.first_byte = 0.0
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        ok = await self.waiter
        return ok, self.parser.status, self.first_byte


async def _connect(host: str, port: int) -> _Conn:
    _, conn = await asyncio.get_running_loop().create_connection(_Conn, host, port)
    return conn


async def _closed_loop(host: str, port: int, raw: bytes, connections: int, seconds: float, warmup: int) -> Result:
    result = Result()
    conns = [await _connect(host, port) for _ in range(connections)]
    for conn in conns:  # warm the connection and the server's caches
        for _ in range(warmup):
            await conn.request(raw)
    deadline = time.perf_counter() + seconds

    async def worker(conn: _Conn) -> None:
        while time.perf_counter() < deadline:
            if conn.parser.closes:  # the last answer ended the connection (hypercorn: every 1,000th)
                conns.append(conn := await _connect(host, port))
            start = time.perf_counter()
            ok, status, first = await conn.request(raw, keep_body=not result.sample)
            if not ok:
                result.error(0)
                return
            if status != 200:
                result.error(status)
                continue
            end = time.perf_counter()
            if not result.sample:
                result.sample = bytes(conn.parser.body)
            result.latencies.append(end - start)
            result.ttfb.append(first - start)

    started = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    result.elapsed = time.perf_counter() - started
    for conn in conns:
        conn.transport.close()
    return result


def closed_loop(host: str, port: int, raw: bytes, connections: int, seconds: float, warmup: int = 3) -> Result:
    return asyncio.run(_closed_loop(host, port, raw, connections, seconds, warmup))


async def _paced(host: str, port: int, raw: bytes, rate: float, seconds: float, pool: int) -> Result:
    result = Result()
    idle = [await _connect(host, port) for _ in range(pool)]
    for conn in idle:
        await conn.request(raw)
    loop = asyncio.get_running_loop()
    tasks = []

    async def one(scheduled: float) -> None:
        conn = idle.pop() if idle else await _connect(host, port)
        ok, status, first = await conn.request(raw)
        if not ok:
            result.error(0)
            return
        end = time.perf_counter()
        if not conn.parser.closes:
            idle.append(conn)
        if status != 200:
            result.error(status)
            return
        result.latencies.append(end - scheduled)
        result.ttfb.append(first - scheduled)

    started = time.perf_counter()
    for i in range(int(rate * seconds)):
        at = started + i / rate
        delay = at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(loop.create_task(one(at)))
    await asyncio.gather(*tasks)
    result.elapsed = time.perf_counter() - started
    for conn in idle:
        conn.transport.close()
    return result


def paced(host: str, port: int, raw: bytes, rate: float, seconds: float, pool: int = 32) -> Result:
    return asyncio.run(_paced(host, port, raw, rate, seconds, pool))


async def _open_streams(host: str, port: int, raw: bytes | list[bytes], count: int, batch: int,
                        measure) -> tuple[int, object]:
    """Open ``count`` streams (``batch`` at a time), wait for each one's first bytes, call
    ``measure()`` while all are open, then close them. Returns (streams seen open, measure()).
    ``raw``: one request for every stream, or a list taken in turn (one per key, say)."""
    raws = raw if isinstance(raw, list) else [raw]
    conns: list[_Conn] = []
    for start in range(0, count, batch):
        opened = await asyncio.gather(*(_connect(host, port) for _ in range(min(batch, count - start))))
        for i, conn in enumerate(opened, start):
            conn.waiter = asyncio.get_running_loop().create_future()
            conn.transport.write(raws[i % len(raws)])
        conns += opened
        deadline = time.perf_counter() + 30
        while any(not c.first_byte and not c.lost for c in opened) and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.5)  # let the last ones settle into their steady state
    seen = sum(1 for c in conns if c.first_byte and not c.lost and c.parser.status == 200)
    value = measure()
    for conn in conns:
        conn.transport.close()
    await asyncio.sleep(0.2)
    return seen, value


def open_streams(host: str, port: int, raw: bytes | list[bytes], count: int, measure, batch: int = 50):
    return asyncio.run(_open_streams(host, port, raw, count, batch, measure))
