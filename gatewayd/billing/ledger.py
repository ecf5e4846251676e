"""Holds and settlement as the request path sees them: the store moves the money, this says no.

The store's ``reserve`` is the atomic check-and-hold (in process memory for the
one-process SQLite store, a conditional UPDATE in PostgreSQL); it answers a ``Hold`` or
a ``Refusal``, and this module turns a refusal into the spec's 403 and an unreachable
database into a 503, before anything was sent upstream or charged. ``settle`` charges,
releases and writes the usage row in one transaction, exactly once per hold.
"""

from __future__ import annotations

import time
from fractions import Fraction

from gatewayd.billing.pricing import Bill
from gatewayd.billing.tab import OnSettled, OpenTab, Tab
from gatewayd.catalogue import Model
from gatewayd.errors import GatewayError, invalid_token
from gatewayd.formats.usage import Usage
from gatewayd.money import MAX_PAID_NANO, format_usd
from gatewayd.records import Account, Key
from gatewayd.store.base import Hold, Refusal, Settlement, StoreUnavailable
from gatewayd.store.contract import Store

__all__ = ["Hold", "Ledger", "OpenTab", "Tab", "refusal_error"]


def refusal_error(refusal: Refusal, amount_nano: int) -> GatewayError:
    if refusal.what == "key":
        return GatewayError(
            403,
            f"token quota is not enough, token remain quota: {format_usd(max(refusal.available_nano, 0))}, "
            f"need quota: {format_usd(amount_nano)}",
            "pre_consume_token_quota_failed",
        )
    return GatewayError(
        403,
        f"user quota is not enough: this request needs {format_usd(amount_nano)} held up front, "
        f"the balance available is {format_usd(refusal.available_nano)}",
        "insufficient_user_quota",
    )


def beyond_any_balance() -> GatewayError:
    """A hold larger than any account can be paid (a huge ``n``, ``max_uses`` or ``max_tool_calls``):
    no top-up could make it affordable, and the number may not even fit the store's 64-bit
    columns (PostgreSQL refused it with ``NumericValueOutOfRange``), so it is the client's 400,
    answered before the store is asked."""
    return GatewayError(400, f"this request could cost more than any balance can hold (over "
                        f"{format_usd(MAX_PAID_NANO, 2)} at its most expensive): lower n, max_tokens, "
                        "max_tool_calls or the tools' max_uses", "request_too_expensive", model_step=True)


def store_unavailable() -> GatewayError:
    return GatewayError(503, "the gateway's database is unavailable right now; nothing was charged, retry shortly",
                        "store_unavailable", headers={"Retry-After": "2"})


class Ledger:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.open_holds = 0  # holds in flight on this instance and what they hold (for the metrics)
        self.held_nano = 0

    async def reserve(
        self, account: Account, key: Key, amount_nano: int, *, request_id: str, model: str, endpoint: str,
        stream: bool,
    ) -> Hold:
        """Hold ``amount_nano`` on the key and the account, or raise the spec's 403 (or a 503, or
        the 400 of :func:`beyond_any_balance`)."""
        if amount_nano > MAX_PAID_NANO:
            raise beyond_any_balance()
        try:
            held = await self.store.reserve(account, key, amount_nano, request_id=request_id, model=model,
                                            endpoint=endpoint, stream=stream)
        except StoreUnavailable:
            raise store_unavailable() from None
        if isinstance(held, Refusal):
            if held.what == "key" and key.state(time.time()) == "used_up":
                # spent through another instance since this one's cache last heard: the spec's
                # used-up key is the same 401 as every other key problem, not the 403
                raise invalid_token("key used up (spend limit reached through another instance)")
            raise refusal_error(held, amount_nano)
        self.open_holds += 1
        self.held_nano += amount_nano
        return held

    def open_tab(self, account: Account, key: Key, amount_nano: int, *, request_id: str, model: Model,
                 endpoint: str, stream: bool, price_ratio: Fraction, input_estimate: int,
                 on_settled: OnSettled | None = None, requested_model: str | None = None) -> OpenTab:
        """``async with ledger.open_tab(...) as tab``: hold ``amount_nano`` (or raise the spec's
        403 / a 503 before anything is held) and own it until settled (:mod:`.tab`)."""

        async def reserve() -> Hold:
            hold = await self.reserve(account, key, amount_nano, request_id=request_id, model=model.id,
                                      endpoint=endpoint, stream=stream)
            hold.requested_model = requested_model  # an alias: the usage row records both ids
            return hold

        return OpenTab(reserve, lambda hold: Tab(self, hold, model=model, price_ratio=price_ratio,
                                                 input_estimate=input_estimate, on_settled=on_settled))

    async def settle(self, hold: Hold, usage: Usage, bill: Bill, *, status: str, http_status: int) -> None:
        """Charge ``bill.total_nano``, release the hold and write the usage row, exactly once.

        The row records the hold it settled and the bill's lines (``Bill.doc()``), so it says
        what the charge was made of and the audit can compare it with the hold. Callers run
        this shielded from cancellation: a client that went away still pays for what was
        produced.
        """
        if hold.settled:
            return
        self.open_holds -= 1
        self.held_nano -= hold.amount_nano
        await self.store.settle(hold, Settlement(
            status=status, http_status=http_status, input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens, cached_tokens=usage.cached_tokens,
            cache_write_tokens=usage.cache_write_tokens, cost_nano=bill.total_nano, breakdown=bill.doc(),
        ))
