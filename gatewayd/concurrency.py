"""Fair shares: how many requests one key and one account may have in flight at once.

A request counts from the moment the relay starts running it (the key, the body and the
model were accepted; nothing is held yet) until its tab settles -- for a stream, when the
stream is closed after its last byte. A request over a cap is refused with 429 and a
``Retry-After`` before anything is held, sent or charged.

The caps are the key's and the account's ``max_concurrent`` (``None``: the server's
``[server] max_concurrent_per_key`` / ``max_concurrent_per_account``; 0 means no cap).

The count is kept per instance, in memory: with several instances on one PostgreSQL
database each instance counts its own requests, so an account may have up to
``instances x cap`` in flight in all. A shared count would need a write per request start
and end in the money functions (``gatewayd_hold`` / ``gatewayd_settle``) and, worse, a way
to give back the counts of an instance that died with requests in flight (the fencing
machinery of ``store/pg_instances.py`` for holds): the cap protects each instance's own
memory, sockets and upstream pool, which are per instance too. docs/operations.md says so.
"""

from __future__ import annotations

from gatewayd.errors import GatewayError
from gatewayd.records import Account, Key

RETRY_AFTER_S = 1  # a slot frees as soon as any of the caller's requests ends
GATEWAY_BUSY_RETRY_AFTER_S = 2  # as the store's own 503 (store_unavailable)


def effective_cap(own: int | None, default: int) -> int:
    """The cap in force: the record's own, else the server's default; 0 = no cap."""
    return default if own is None else own


class InFlight:
    """Requests in flight per account and per key on this instance."""

    def __init__(self) -> None:
        self.by_account: dict[str, int] = {}
        self.by_key: dict[str, int] = {}

    def enter(self, account: Account, key: Key, *, account_default: int, key_default: int) -> "Ticket":
        """Count one more request of ``key``, or raise the 429 when the key or its account is at its cap."""
        key_cap = effective_cap(key.max_concurrent, key_default)
        account_cap = effective_cap(account.max_concurrent, account_default)
        if key_cap and self.by_key.get(key.id, 0) >= key_cap:
            raise over_cap("this key", key_cap)
        if account_cap and self.by_account.get(account.id, 0) >= account_cap:
            raise over_cap("this account", account_cap)
        self.by_account[account.id] = self.by_account.get(account.id, 0) + 1
        self.by_key[key.id] = self.by_key.get(key.id, 0) + 1
        return Ticket(self, account.id, key.id)

    def _leave(self, account_id: str, key_id: str) -> None:
        for counts, owner in ((self.by_account, account_id), (self.by_key, key_id)):
            left = counts[owner] - 1
            if left:
                counts[owner] = left
            else:
                del counts[owner]  # an idle account or key leaves nothing behind


class Ticket:
    """One request's place in the count; ``leave`` is idempotent."""

    __slots__ = ("_in_flight", "_account_id", "_key_id")

    def __init__(self, in_flight: InFlight | None, account_id: str, key_id: str) -> None:
        self._in_flight = in_flight
        self._account_id = account_id
        self._key_id = key_id

    def leave(self) -> None:
        if self._in_flight is not None:
            in_flight, self._in_flight = self._in_flight, None
            in_flight._leave(self._account_id, self._key_id)


def over_cap(whose: str, cap: int) -> GatewayError:
    return GatewayError(
        429, f"Too many concurrent requests: {whose} may have at most {cap} requests in flight; "
             "retry when one of them has finished",
        "concurrency_limit_exceeded", headers={"Retry-After": str(RETRY_AFTER_S)}, model_step=True)


def gateway_busy() -> GatewayError:
    """No upstream connection became free within the pool timeout: our capacity is the limit,
    not the provider (no 502, and the route's health is left alone)."""
    return GatewayError(
        503, "the gateway has no free connection to the provider right now; nothing was charged, retry shortly",
        "gateway_busy", headers={"Retry-After": str(GATEWAY_BUSY_RETRY_AFTER_S)}, model_step=True)
