"""Request bodies held in memory: budgets that count bytes as they arrive, by owner.

A body is read into memory whole before it is parsed, and stays there until its request
has been answered (the parsed document, the upstream request built from it and the body
itself are all alive until then). Without a bound, anyone could pin the process's memory
by opening connections and sending large bodies slowly. So the listener reads a body
only once the request's key has been checked (``gatewayd.api_routes``), within
``[server] body_timeout_s`` (``gatewayd.app.Listener``), and counts every byte it holds
in one of the budgets of :class:`BodyPools`:

- ``api``: the /v1 API routes and the Responses WebSocket's messages, at most
  ``[server] max_buffered_bytes`` in all, one account at most
  ``max_buffered_bytes_per_account`` (a quarter by default). The owner is the key's
  *account*: an account with four keys holds no more than one with one.
- ``console``: the console's forms and every other path the Quart app answers, at most
  ``console_buffered_bytes``, one client address at most a quarter of it.
- ``webhook``: ``POST /webhooks/stripe``, at most ``webhook_buffered_bytes``, one client
  address at most a quarter of it.

The admin socket is a server of its own (``gatewayd.server``: Quart's 16 MiB cap per body,
a 0600 Unix socket) and shares nothing with these. So API traffic, however heavy, can fill
neither the console's budget (sign-in stays possible) nor the webhook's (Stripe's payments
are recorded) nor the admin socket's.

Bytes are counted **as they arrive**, never as declared: a ``Content-Length`` reserves
nothing, so a connection that declares 100 MB and sends nothing holds nothing, and is
answered 408 at the body deadline (issue 31, N6: two such connections used to fill the
shared quarter and make every console form 503). A chunk that would take the pool or
its owner over its bound is refused with 503 and ``Retry-After`` before it is kept.
Everything a request counted is given back when its answer is complete (streams
included), so the budget, like the memory, returns after a burst.

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

SHARE = 4  # by default one owner may hold at most 1/SHARE of its pool
RETRY_AFTER_S = 2  # bodies in flight finish in about that time; the client's retry comes then
TRIM_AFTER_BYTES = 16 << 20  # body bytes let go since the last trim before the next is worth it
TRIM_EVERY_S = 1.0  # while bodies are still held: at most this often


def over_budget(what: str) -> GatewayError:
    """The 503 for a body that would take a pool or one owner over its share."""
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
    """One pool: bytes of request bodies held now, in total and by owner.

    ``owner_max`` bounds one owner (default: a quarter of the pool). ``what`` names the
    pool's owners in a refusal ("this account", "this client address")."""

    def __init__(self, max_bytes: int, owner_max: int | None = None, *, what: str = "this account",
                 memory: "MemoryReturner | None" = None) -> None:
        self.max_bytes = max_bytes
        self.owner_max = max(1, owner_max if owner_max is not None else max_bytes // SHARE)
        self.what = what
        self.held = 0
        self.by_owner: dict[str, int] = {}
        self.memory = memory if memory is not None else MemoryReturner()

    def lease(self, owner: str | None = None) -> "BodyLease":
        """A lease for one request or one socket; ``owner`` None until the caller is known
        (the API routes: the key's account), and nothing may be received before then."""
        return BodyLease(self, owner)

    def _take(self, owner: str, n: int) -> GatewayError | None:
        mine = self.by_owner.get(owner, 0)
        if self.held + n > self.max_bytes:
            return over_budget("for all callers")
        if mine + n > self.owner_max:
            return over_budget(f"for {self.what}")
        self.held += n
        self.by_owner[owner] = mine + n
        return None

    def _give_back(self, owner: str, n: int) -> None:
        self.held -= n
        left = self.by_owner[owner] - n
        if left:
            self.by_owner[owner] = left
        else:
            del self.by_owner[owner]  # no entry per owner that once sent a body
        self.memory.let_go(n, self.held)


@attrs.define
class BodyLease:
    """What one request (or one WebSocket message) holds: ``receive`` each chunk as it
    arrives, ``give_back`` what a finished message held, ``close`` once the answer is
    complete. A refusal takes nothing."""

    budget: BodyBudget
    owner: str | None
    held: int = 0
    ended: bool = False  # closed: nothing more is taken (a WebSocket's frames after its app ended)

    def receive(self, n: int) -> GatewayError | None:
        if n <= 0:
            return None
        if self.ended:
            return over_budget("for a request that has ended")
        if self.owner is None:  # read before its key was checked (a route that should not): one shared owner
            self.owner = UNKNOWN_OWNER
        refused = self.budget._take(self.owner, n)
        if refused is None:
            self.held += n
        return refused

    def give_back(self, n: int) -> None:
        n = min(n, self.held)
        if n > 0 and self.owner is not None:
            self.held -= n
            self.budget._give_back(self.owner, n)

    def assign(self, owner: str) -> None:
        """Who the bytes are counted against, once the key is known (bytes already held, read
        before it, stay with the owner they were counted under)."""
        if self.held == 0:
            self.owner = owner

    def close(self) -> None:
        self.give_back(self.held)
        self.ended = True


UNKNOWN_OWNER = "unknown"  # bytes of an API request read before its key was known share one owner's share


def account_owner(account_id: str) -> str:
    """The owner an API request's body bytes count against: its key's account."""
    return f"account:{account_id}"


@attrs.frozen
class BodyPools:
    """The public listener's budgets (see the module's doc): which one a path's body counts in."""

    api: BodyBudget
    console: BodyBudget
    webhook: BodyBudget

    @classmethod
    def from_settings(cls, server) -> "BodyPools":
        memory = MemoryReturner()  # one process, one heap: the trim is shared
        per_account = server.max_buffered_bytes_per_account
        return cls(
            api=BodyBudget(server.max_buffered_bytes, per_account, what="this account", memory=memory),
            console=BodyBudget(server.console_buffered_bytes, what="this client address", memory=memory),
            webhook=BodyBudget(server.webhook_buffered_bytes, what="this client address", memory=memory),
        )

    def for_app_path(self, path: str) -> BodyBudget:
        """The pool of a request the Quart app answers (not an API route)."""
        return self.webhook if path == WEBHOOK_PATH else self.console


WEBHOOK_PATH = "/webhooks/stripe"
