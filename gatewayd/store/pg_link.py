"""A dedicated PostgreSQL connection whose every call is bounded in time.

The pool's connections serve requests; two jobs must not queue behind them or hang with
them: the heartbeat (an instance that cannot say it is alive has its holds released by
the others) and the change feed's LISTEN connection. Each gets a ``Link``: one
connection, used by one worker thread at a time, with

- TCP keepalives and ``tcp_user_timeout`` on the socket, so the kernel gives up on a
  peer that vanished without FIN or RST (a NAT or load balancer that dropped an idle
  connection) instead of waiting forever;
- a watchdog on every call: if the database has not answered within ``timeout`` seconds
  the socket is shut down, which wakes the blocked thread with an error at once. A
  black-holed connection (packets accepted, nothing ever answered) is thus noticed in
  ``timeout`` seconds whatever the kernel thinks of it.

After any failure the connection is closed and the next call connects again
(``connect_timeout`` bounds that too). Failures raise ``LinkDown``.

The request pool's connections get the same watchdog (``WATCHDOG``, one thread for the
whole process rather than a timer thread per query: a hold must stay cheap).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import socket
import threading
import time
from typing import Any, Callable

import psycopg
import trio
from psycopg.conninfo import conninfo_to_dict

# the kernel's own liveness checks on an idle or stuck socket (libpq parameters)
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
              "tcp_user_timeout": 10_000}


def keepalives(url: str) -> dict[str, Any]:
    """``KEEPALIVES`` less what the operator's URL sets itself (theirs wins)."""
    given = conninfo_to_dict(url)
    return {name: value for name, value in KEEPALIVES.items() if name not in given}


@functools.lru_cache(maxsize=1024)
def _pg(sql: str) -> str:
    return sql.replace("?", "%s")


class PgTx:
    """The shared jobs' cursor surface over one psycopg connection (``?`` becomes ``%s``)."""

    __slots__ = ("conn",)

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def rows(self, sql: str, args: Any = ()) -> list[Any]:
        return self.conn.execute(_pg(sql), args).fetchall()

    def one(self, sql: str, args: Any = ()) -> Any:
        return self.conn.execute(_pg(sql), args).fetchone()

    def run(self, sql: str, args: Any = ()) -> int:
        return self.conn.execute(_pg(sql), args).rowcount


class LinkDown(Exception):
    """The database did not answer on this link (refused, reset, or silent past the deadline)."""


class Link:
    def __init__(self, url: str, *, autocommit: bool, setup: Callable[[psycopg.Connection], None] | None = None,
                 row_factory: psycopg.rows.RowFactory[Any] | None = None) -> None:
        self.url = url
        self.autocommit = autocommit
        self.setup = setup  # run on every new connection (e.g. LISTEN)
        self.row_factory = row_factory
        self.conn: psycopg.Connection | None = None
        self.connects = 0  # how many connections were made (the first, then each reconnection)
        self._limiter = trio.CapacityLimiter(1)  # its own thread: never waits behind the pool's queries
        self._lock = trio.Lock()

    async def call(self, fn: Callable[[psycopg.Connection], Any], *, timeout: float) -> Any:
        """``fn(conn)`` in a worker thread, connecting first if needed; ``LinkDown`` if the
        database does not answer within ``timeout`` seconds (the connection is then dropped)."""
        async with self._lock:
            fired = threading.Event()
            try:
                return await trio.to_thread.run_sync(self._work, fn, timeout, fired, limiter=self._limiter)
            except psycopg.OperationalError as e:
                self._drop()
                raise LinkDown(f"no answer within {timeout:g} s" if fired.is_set() else _first_line(e)) from None
            finally:
                if fired.is_set():
                    self._drop()  # its socket was shut: whatever came back, the connection is done

    def _work(self, fn: Callable[[psycopg.Connection], Any], timeout: float, fired: threading.Event) -> Any:
        if self.conn is None or self.conn.closed:
            kwargs: dict[str, Any] = {"row_factory": self.row_factory} if self.row_factory is not None else {}
            conn = psycopg.connect(self.url, autocommit=self.autocommit,
                                   connect_timeout=max(2, math.ceil(timeout)), **keepalives(self.url), **kwargs)
            try:
                if self.setup is not None:
                    self.setup(conn)
            except BaseException:
                conn.close()
                raise
            self.conn = conn
            self.connects += 1
        # the watchdog is a timer thread, so it fires even while the trio caller is cancelled
        watchdog = threading.Timer(timeout, _shut_socket, (self.conn, fired))
        watchdog.daemon = True
        watchdog.start()
        try:
            return fn(self.conn)
        finally:
            watchdog.cancel()

    def _drop(self) -> None:
        """Forget a broken connection (closing it sends nothing: its socket is dead or shut)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()

    async def aclose(self) -> None:
        """Close the connection in order (a worker thread: the goodbye may wait on the network)."""
        async with self._lock:
            conn, self.conn = self.conn, None
            if conn is not None and not conn.closed:
                await trio.to_thread.run_sync(conn.close, limiter=self._limiter)


class Armed:
    """One armed deadline: ``fired`` says whether the watchdog shut the connection's socket."""

    __slots__ = ("conn", "deadline", "fired", "done")

    def __init__(self, conn: psycopg.Connection, deadline: float) -> None:
        self.conn = conn
        self.deadline = deadline
        self.fired = threading.Event()
        self.done = False


class Watchdog:
    """Shuts the socket of a connection whose call outlived its deadline (``time.monotonic``).

    One daemon thread serves every armed call: arming is a heap push under a lock, not a
    thread. A disarmed entry is dropped when it comes up. ``disarm`` and the firing take
    the same lock, so a connection is never shut after its caller disarmed it (by then it
    may be back in the pool and someone else's)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Armed]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, conn: psycopg.Connection, deadline: float) -> Armed:
        armed = Armed(conn, deadline)
        with self._cond:
            if self._thread is None or not self._thread.is_alive():  # (a fork leaves no thread behind)
                self._thread = threading.Thread(target=self._watch, name="gatewayd-pg-watchdog", daemon=True)
                self._thread.start()
            first = not self._heap or deadline < self._heap[0][0]
            heapq.heappush(self._heap, (deadline, next(self._order), armed))
            if first:
                self._cond.notify()
        return armed

    def disarm(self, armed: Armed) -> bool:
        """Stop watching; True if the deadline had passed and the socket was shut."""
        with self._cond:
            armed.done = True
        return armed.fired.is_set()

    def _watch(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                wait = self._heap[0][0] - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                _, _, armed = heapq.heappop(self._heap)
                armed.done = True
                _shut_socket(armed.conn, armed.fired)


WATCHDOG = Watchdog()


def _shut_socket(conn: psycopg.Connection, fired: threading.Event) -> None:
    """Wake the thread blocked on ``conn``: shut its socket down (from the watchdog's thread)."""
    fired.set()
    try:
        sock = socket.socket(fileno=socket.dup(conn.pgconn.socket))
    except (psycopg.OperationalError, OSError):
        return  # closed meanwhile
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
