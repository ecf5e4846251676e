"""Request bodies held in memory: a budget for the process and a share of it for each key.

A body is read into memory whole before it is parsed, and stays there until its request
has been answered (the parsed document, the upstream request built from it and the body
itself are all alive until then). Without a bound, anyone could pin the process's memory
by opening connections and sending large bodies slowly. So the listener reads a body
only once the request's key has been checked (``gatewayd.api_routes``), within
``[server] body_timeout_s`` (``gatewayd.app.Listener``), and counts every byte it holds
here:

- the process holds at most ``[server] max_buffered_bytes`` of request bodies;
- one owner holds at most a quarter of that (``KEY_SHARE``). An owner is a key
  (``key:<id>``) on the API routes; every request that reaches the rest of the app (the
  console's forms, paths the gateway does not serve) shares the owner ``anonymous``,
  so requests without a key can never take more than their quarter either.

A request whose body would go over either bound is refused with 503 and ``Retry-After``
before its bytes are kept (a declared ``Content-Length`` is reserved whole, up front, so
such a body is refused before any of it is read). Everything a request counted is given
back when its answer is complete (streams included), so the budget, like the memory,
returns after a burst.

Counted bytes are the bodies as received; the memory they cost is a few times that
(parsing, the upstream request). ``bench/attack_bodies.py`` measures it.

Giving the memory back: a body arrives in chunks of up to 64 KiB, each its own block from
the C allocator, and glibc keeps freed blocks of that size in its heap for reuse instead
of returning them to the system: after a burst of large bodies the process stayed
hundreds of MiB above its idle size (``bench/attack_bodies.py``: +192 MiB five seconds
after the last 100 MB body). So once large bodies have been let go (``TRIM_AFTER_BYTES``
since the last time) and the budget is empty, or at most once a second meanwhile, glibc's
``malloc_trim`` returns the free pages, in a thread of its own (about 20 ms for 100 MB,
without the event loop). Without glibc there is nothing to call and nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time

import attrs

from gatewayd.errors import GatewayError

KEY_SHARE = 4  # one owner may hold at most 1/KEY_SHARE of the process's budget
ANONYMOUS = "anonymous"
RETRY_AFTER_S = 2  # bodies in flight finish in about that time; the client's retry comes then
TRIM_AFTER_BYTES = 16 << 20  # body bytes let go since the last trim before the next is worth it
TRIM_EVERY_S = 1.0  # while bodies are still held: at most this often


def over_budget(what: str) -> GatewayError:
    """The 503 for a body that would take the process or one key over its share."""
    return GatewayError(
        503, f"the gateway is holding too many request bodies {what} right now; retry shortly",
        "server_busy", headers={"retry-after": str(RETRY_AFTER_S)},
    )


def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc: its allocator has no such call
        return None


class MemoryReturner:
    """Runs ``malloc_trim`` in a thread after large bodies were let go (see the module's doc)."""

    def __init__(self) -> None:
        self._trim = _malloc_trim()
        self.freed_since = 0
        self.last = 0.0
        self.trims = 0
        self._running = threading.Lock()

    def let_go(self, n: int, still_held: int) -> None:
        self.freed_since += n
        if self._trim is None or self.freed_since < TRIM_AFTER_BYTES:
            return
        now = time.monotonic()
        if still_held and now - self.last < TRIM_EVERY_S:
            return
        if not self._running.acquire(blocking=False):
            return  # one is running; the next release past the threshold starts another
        self.freed_since = 0
        self.last = now
        self.trims += 1
        threading.Thread(target=self._run, name="gatewayd-malloc-trim", daemon=True).start()

    def _run(self) -> None:
        try:
            self._trim(0)
        finally:
            self._running.release()


class BodyBudget:
    """Bytes of request bodies held now, in total and by owner."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.owner_max = max(1, max_bytes // KEY_SHARE)
        self.held = 0
        self.by_owner: dict[str, int] = {}
        self.memory = MemoryReturner()

    def lease(self, owner: str = ANONYMOUS) -> "BodyLease":
        return BodyLease(self, owner)

    def _take(self, owner: str, n: int) -> GatewayError | None:
        mine = self.by_owner.get(owner, 0)
        if self.held + n > self.max_bytes:
            return over_budget("for all callers")
        if mine + n > self.owner_max:
            return over_budget("for this key" if owner != ANONYMOUS else "without a key")
        self.held += n
        self.by_owner[owner] = mine + n
        return None

    def _give_back(self, owner: str, n: int) -> None:
        self.held -= n
        left = self.by_owner[owner] - n
        if left:
            self.by_owner[owner] = left
        else:
            del self.by_owner[owner]  # no entry per key that once sent a body
        self.memory.let_go(n, self.held)


@attrs.define
class BodyLease:
    """What one request holds. ``reserve`` a declared length up front, ``receive`` each
    chunk as it arrives (only bytes beyond the reservation are taken), ``close`` once the
    answer is complete. A refusal takes nothing."""

    budget: BodyBudget
    owner: str
    reserved: int = 0
    received: int = 0

    @property
    def held(self) -> int:
        return max(self.reserved, self.received)

    def reserve(self, declared: int) -> GatewayError | None:
        extra = declared - self.held
        if extra <= 0:
            return None
        refused = self.budget._take(self.owner, extra)
        if refused is None:
            self.reserved = declared
        return refused

    def receive(self, n: int) -> GatewayError | None:
        extra = self.received + n - self.held
        if extra > 0:
            refused = self.budget._take(self.owner, extra)
            if refused is not None:
                return refused
        self.received += n
        return None

    def assign(self, owner: str) -> None:
        """Who the bytes are counted against, once the key is known (nothing is held yet)."""
        assert self.held == 0, "a lease changes owner before any byte is held"
        self.owner = owner

    def close(self) -> None:
        held = self.held
        if held:
            self.budget._give_back(self.owner, held)
        self.reserved = self.received = 0
