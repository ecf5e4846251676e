"""Bounds on Responses WebSockets (``gatewayd.responses_ws``): how many, and what they hold.

A WebSocket's messages are request bodies, and the socket's remembered history (its last
response, which a ``previous_response_id`` continues) is a body it keeps between requests.
Issue 31 (N2) found neither bounded: permessage-deflate turned about 1 MiB sent into about
1 GiB held, free ``generate: false`` warm-ups chained on one socket grew its history
without end, and any number of sockets could be opened. So:

- **Messages count against the account's share of the API body budget**
  (``gatewayd.bodies``, the pool ``POST /v1/responses`` uses), as they are: decompressed
  (permessage-deflate is not negotiated at all: ``gatewayd.hypercorn_patches``'
  ``websocket_limits``, so a message is never larger than its bytes on the wire). Under
  hypercorn the same patch counts each frame as it is buffered (``SCOPE_LEASE``), so a
  message is counted from its first byte and one that would go over is cut with 1009;
  elsewhere (an ASGI server without the patch) a whole message is counted when it arrives,
  and one over the share is answered with an ``error`` event (503 ``server_busy``) and
  dropped. Either way a message is held until the response it asked for has ended (or at
  once, for one refused).
- **The remembered history is capped at ``max_body_bytes``** and counts against the same
  share while it is kept; a history over either bound is not kept, and a continuation
  naming it is answered with a 400 that says to send the whole input. It is dropped when
  the socket closes.
- **Sockets per key and per account are capped** (``[server] max_sockets_per_key``,
  ``max_sockets_per_account``): one more is answered 429 before the upgrade (a server
  without the denial-response extension closes with 1008 and the reason).

The counts are this process's (like the in-flight caps of ``gatewayd.concurrency``).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from gatewayd.access import Caller
from gatewayd.bodies import BodyBudget, BodyLease, account_owner
from gatewayd.errors import GatewayError
from gatewayd.formats.responses_socket import LastResponse
from gatewayd.hypercorn_patches import SCOPE_COUNTED, SCOPE_LEASE

log = logging.getLogger("gatewayd.app")

RETRY_AFTER_S = 30  # a socket closes when its client's session ends; try again after a while


class SocketCounts:
    """Open sockets by key and by account, in this process."""

    def __init__(self) -> None:
        self.by_key: dict[str, int] = {}
        self.by_account: dict[str, int] = {}

    def open(self, caller: Caller, per_key: int, per_account: int) -> GatewayError | None:
        """Count one more socket for ``caller``, or the 429 saying which cap it would pass
        (nothing counted then). A cap of 0 is no cap."""
        key, account = caller.key.id, caller.account.id
        if per_key and self.by_key.get(key, 0) >= per_key:
            return _too_many(f"this key already has {per_key} WebSockets open (max_sockets_per_key)")
        if per_account and self.by_account.get(account, 0) >= per_account:
            return _too_many(f"this account already has {per_account} WebSockets open (max_sockets_per_account)")
        self.by_key[key] = self.by_key.get(key, 0) + 1
        self.by_account[account] = self.by_account.get(account, 0) + 1
        return None

    def close(self, caller: Caller) -> None:
        for counts, name in ((self.by_key, caller.key.id), (self.by_account, caller.account.id)):
            left = counts[name] - 1
            if left:
                counts[name] = left
            else:
                del counts[name]


def _too_many(why: str) -> GatewayError:
    return GatewayError(429, f"{why}; close one before opening another", "too_many_sockets",
                        headers={"retry-after": str(RETRY_AFTER_S)})


class SocketBudget:
    """What one socket holds in the API body pool: the message being handled and the
    remembered history. Without a pool (a listener that counts no bodies) only the
    history's ``max_body_bytes`` cap applies."""

    def __init__(self, pool: BodyBudget | None, caller: Caller, max_body_bytes: int, scope: dict) -> None:
        self.lease: BodyLease | None = pool.lease(account_owner(caller.account.id)) if pool is not None else None
        self.max_body_bytes = max_body_bytes
        self.scope = scope
        if self.lease is not None:
            scope[SCOPE_LEASE] = self.lease  # hypercorn counts the frames as they come, when patched
        self.history_bytes = 0
        self.forgotten: str | None = None  # the id of a response whose history was too large to keep

    def message(self, size: int) -> GatewayError | None:
        """Count a message of ``size`` as it is handled; the 503 when it would go over. (Under
        the patched hypercorn its frames were counted as they came: nothing more to take.)"""
        if self.lease is None or self.scope.get(SCOPE_COUNTED):
            return None
        return self.lease.receive(size)

    def handled(self, size: int) -> None:
        """A message's request has ended: its bytes are given back."""
        if self.lease is not None:
            self.lease.give_back(size)

    def remember(self, last: LastResponse | None) -> LastResponse | None:
        """``last`` if the socket may keep it (within ``max_body_bytes`` and the account's
        share), else None; the previous history's bytes are given back either way."""
        self._forget()
        if last is None:
            return None
        size = len(orjson.dumps(last.items))
        refused = None if size <= self.max_body_bytes else "over max_body_bytes"
        if refused is None and self.lease is not None and self.lease.receive(size) is not None:
            refused = "over the account's body budget"
        if refused is not None:
            log.info("responses socket: history not kept", extra={"fields": {
                "response_id": last.response_id, "bytes": size, "reason": refused}})
            self.forgotten = last.response_id
            return None
        self.history_bytes = size
        self.forgotten = None
        return last

    def check_continuation(self, event: dict[str, Any]) -> None:
        """A continuation of a history the socket did not keep: a clear 400, not an unknown id."""
        previous = event.get("previous_response_id")
        if self.forgotten is not None and previous == self.forgotten:
            raise GatewayError(
                400, f"the history of {previous} is larger than this socket keeps (max_body_bytes, "
                f"{self.max_body_bytes} bytes, within the account's share of the body budget); send the whole "
                "input without previous_response_id", "history_too_large", param="previous_response_id")

    def _forget(self) -> None:
        if self.history_bytes and self.lease is not None:
            self.lease.give_back(self.history_bytes)
        self.history_bytes = 0

    def close(self) -> None:
        """The socket has closed: its history and any message still counted are let go."""
        self._forget()
        if self.lease is not None:
            self.lease.close()
