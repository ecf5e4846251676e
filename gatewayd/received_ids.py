"""Which response and conversation ids each account received: only those may be named again.

A Responses request can continue a response stored at the provider (``previous_response_id``)
or a conversation (``conversation``). The provider keeps them under the operator's account,
which every tenant of gatewayd shares, so the id alone would let any tenant read another's
conversation (or the operator's) through the model. So gatewayd records, per account, the ids
it delivered to that account (a passed-through answer's ``id`` and ``conversation.id``), and
a request naming any other id gets 400 before anything is held.

The record is in the store (both stores; on PostgreSQL every instance sees what the others
delivered). A row lives ``RETENTION_S`` (30 days, as long as OpenAI keeps a response);
receiving an id again (a conversation's next answer) moves its expiry. Expired rows are
deleted at most once an hour, by whichever request records next. Positive answers are cached
in process (bounded); a refused id is always asked of the store, since another instance may
have just delivered it.

Recording happens when the answer is delivered (the relay calls ``record``). It must never
cost the client the answer or the operator the money: a store that is down is logged, and the
id is still remembered by this process.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Callable, Iterable

from gatewayd.billing.ledger import store_unavailable
from gatewayd.errors import BodyError, our_fault
from gatewayd.formats.stored_objects import MAX_ID_CHARS
from gatewayd.store.base import StoreError, StoreUnavailable

log = logging.getLogger("gatewayd.received_ids")

RETENTION_S = 30 * 24 * 3600  # OpenAI keeps a stored response 30 days
PRUNE_EVERY_S = 3600.0
CACHE_ENTRIES = 50_000  # (account, id) pairs known good; oldest forgotten first
CACHE_TTL_S = 3600.0  # a cached yes is asked of the store again after this


class ReceivedIds:
    """``check`` before a request is held; ``record`` when an answer is delivered."""

    def __init__(self, store, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        self._known: OrderedDict[tuple[str, str], float] = OrderedDict()  # -> cached until (clock)
        self._last_prune = clock()  # the first prune an hour after start

    async def check(self, account_id: str, asked: list[tuple[str, str]]) -> None:
        """Raise the client's 400 naming the first ``(param, id)`` the account did not receive
        (a 503 when the store cannot answer: nothing is held yet)."""
        if not asked:
            return
        now = self.clock()
        unknown = [(param, ref) for param, ref in asked if not self._cached(account_id, ref, now)]
        if not unknown:
            return
        candidates = [ref for _, ref in unknown if 0 < len(ref) <= MAX_ID_CHARS]
        try:
            found = await self.store.received_ids(account_id, candidates, int(now)) if candidates else set()
        except StoreUnavailable:
            raise store_unavailable() from None
        for param, ref in unknown:
            if ref not in found:
                shown = ref if len(ref) <= 64 else ref[:64] + "..."
                raise BodyError(
                    f"{param} {shown!r} was not received by this account through this gateway (or was received "
                    f"more than 30 days ago); send the whole conversation in input instead", param=param)
            self._remember(account_id, ref, now)

    async def record(self, account_id: str, ids: Iterable[str], request_id: str = "") -> None:
        """The account was given ``ids``. Never raises: the answer is already paid for and on its way."""
        ids = [i for i in ids if isinstance(i, str) and 0 < len(i) <= MAX_ID_CHARS]
        if not ids:
            return
        now = self.clock()
        for ref in ids:
            self._remember(account_id, ref, now)
        try:
            await self.store.record_received_ids(account_id, ids, int(now) + RETENTION_S)
            if now - self._last_prune >= PRUNE_EVERY_S:
                self._last_prune = now
                await self.store.forget_received_ids(int(now))
        except StoreError as e:
            log.warning("could not record the response ids an answer delivered (%s); this instance remembers them",
                        type(e).__name__, extra={"fields": {"request_id": request_id, "account_id": account_id}})
        except Exception as e:  # noqa: BLE001 - a bug of ours must not take the delivered answer with it
            our_fault(request_id, "while recording the response ids an answer delivered", e)  # logs it

    def _cached(self, account_id: str, ref: str, now: float) -> bool:
        until = self._known.get((account_id, ref))
        if until is None:
            return False
        if until <= now:
            del self._known[(account_id, ref)]
            return False
        self._known.move_to_end((account_id, ref))
        return True

    def _remember(self, account_id: str, ref: str, now: float) -> None:
        self._known[(account_id, ref)] = now + CACHE_TTL_S
        self._known.move_to_end((account_id, ref))
        while len(self._known) > CACHE_ENTRIES:
            self._known.popitem(last=False)
