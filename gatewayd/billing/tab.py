"""One request's money, owned in one place: the hold, and the one settlement of it.

A request that needs money opens a tab (``async with ledger.open_tab(...) as tab``). The
hold is taken as the context is entered, with no checkpoint between the hold landing and
the block starting, so no cancellation can leave a hold that nobody owns. From then on the
tab is the only thing that settles it:

- the request path settles explicitly where it knows the outcome (``settle`` with the
  provider's usage, ``release`` when nothing may be charged);
- a streamed answer takes the tab over (``hand_off``): the stream settles it, and
  :class:`gatewayd.pump.AnswerStream` closes the stream whatever the client does;
- every other way out of the block -- the client gone at any await, our own exception, a
  refusal raised before settling -- is settled by ``__aexit__``, shielded from
  cancellation: input is charged only if the request's bytes were handed to a provider
  connection (``sent``), because only then can the provider bill it; our own faults
  charge nothing the client did not get.

Settlement happens exactly once (``Hold.settled``), shielded, and the charge is always the
provider's usage priced by :func:`gatewayd.billing.pricing.bill`.
"""

from __future__ import annotations

import enum
import logging
import time
from fractions import Fraction
from types import TracebackType
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import trio

from gatewayd.billing.pricing import Bill, bill
from gatewayd.catalogue import Model
from gatewayd.formats.usage import Usage
from gatewayd.store.base import Hold, StoreUnavailable

if TYPE_CHECKING:  # the ledger makes tabs (a cycle at run time)
    from gatewayd.billing.ledger import Ledger

log = logging.getLogger("gatewayd.billing")


class Outcome(str, enum.Enum):
    """How a request ended, as its usage row's ``status`` says it."""

    OK = "ok"
    CLIENT_DISCONNECTED = "client_disconnected"
    UPSTREAM_ERROR = "upstream_error"  # the provider answered with an error (status, or error event)
    UPSTREAM_BROKEN = "upstream_broken"  # the answer broke off
    UPSTREAM_INVALID = "upstream_invalid"  # the answer was not the protocol
    UPSTREAM_UNREACHABLE = "upstream_unreachable"
    IDLE_TIMEOUT = "idle_timeout"
    SHUTDOWN = "shutdown"
    GATEWAY_BUSY = "gateway_busy"  # no upstream connection of ours became free in time (a 503)
    INTERNAL_ERROR = "internal_error"  # a fault of ours


# called once the tab is settled: (usage, outcome, the bill, seconds the request took), for the metrics and log
OnSettled = Callable[[Usage, Outcome, Bill, float], None]


class Tab:
    """The money of one request (see the module docstring). Made by ``Ledger.open_tab``."""

    def __init__(self, ledger: Ledger, hold: Hold, *, model: Model, price_ratio: Fraction, input_estimate: int,
                 on_settled: OnSettled | None = None) -> None:
        self.ledger = ledger
        self.hold = hold
        self.model = model
        self.price_ratio = price_ratio
        self.input_estimate = input_estimate  # the prompt as estimated for the hold (tokens)
        self.output_allowance = 0  # the output the hold covers (tokens): set by the relay per route
        self.hidden_possible = False  # the model may bill reasoning it never shows (billing/cut.py)
        # (client body, its format): counted if a cut stream needs it
        self.prompt: tuple[dict[str, Any], str] | None = None
        self.on_settled = on_settled
        self.sent = False  # some attempt's request bytes were handed to a provider connection
        self.handed_off = False  # a stream owns the settlement now
        self.client_left = False  # the client hung up; a task the daemon owns settles (gatewayd.hangups)
        self.store_failed = False  # the store could not take the settlement (``settle``)
        self.outcome: Outcome | None = None

    @property
    def settled(self) -> bool:
        return self.hold.settled or self.store_failed  # the latter: nothing more can be done here

    def mark_sent(self) -> None:
        """The request's bytes reached a provider connection: the provider can bill its input."""
        self.sent = True

    def hand_off(self) -> None:
        """A stream takes over the settlement (it must settle on every way out)."""
        self.handed_off = True

    async def settle(self, usage: Usage, outcome: Outcome, http_status: int) -> None:
        """Charge ``usage`` and write the usage row, exactly once, shielded from cancellation.

        A store that cannot take the settlement raises ``StoreUnavailable`` (the caller answers
        503 ``store_unavailable``); the tab is not tried again: the hold is left to the store's
        own recovery (SQLite releases it at the next start, as a dead process's)."""
        if self.hold.settled or self.store_failed:
            return
        priced = bill(self.model, usage, self.price_ratio)
        if priced.unpriced:
            log.warning("charged at fallback rates: %s", ", ".join(priced.unpriced),
                        extra={"fields": {"request_id": self.hold.request_id, "model": self.model.id}})
        started = time.perf_counter()
        with trio.CancelScope(shield=True):
            try:
                await self.ledger.settle(self.hold, usage, priced, status=outcome.value, http_status=http_status)
            except StoreUnavailable:
                self.store_failed = True
                raise
        self.outcome = outcome
        if self.on_settled is not None:
            self.on_settled(usage, outcome, priced, time.perf_counter() - started)

    async def release(self, outcome: Outcome, http_status: int) -> None:
        """Settle with nothing charged (the provider billed nothing we know of, or the fault is ours)."""
        await self.settle(Usage(), outcome, http_status)

    async def abandon(self, outcome: Outcome, http_status: int) -> None:
        """The request ended without an answer: its input is charged only if a provider got it."""
        usage = Usage(input_tokens=self.input_estimate) if self.sent else Usage()
        await self.settle(usage, outcome, http_status)

    async def close(self, exc_type: type[BaseException] | None, exc: BaseException | None) -> None:
        """The block that owned the tab is left: settle whatever nobody settled."""
        if self.handed_off or self.hold.settled or self.store_failed:
            return
        if exc_type is not None and (issubclass(exc_type, trio.Cancelled) or _only_cancelled(exc)):
            await self.abandon(Outcome.CLIENT_DISCONNECTED, 499)  # the client went away
        else:  # an exception nobody settled for, or a path that forgot to: ours, nothing charged
            if exc_type is None:
                log.error("a request ended without settling its hold", extra={"fields": {
                    "request_id": self.hold.request_id}})
            await self.release(Outcome.INTERNAL_ERROR, 500)


class OpenTab:
    """``async with ledger.open_tab(...) as tab``: the hold is taken by ``__aenter__``, whose
    last await is the hold itself, so the block owns it from the instant it exists."""

    def __init__(self, reserve: Callable[[], Awaitable[Hold]], make: Callable[[Hold], Tab]) -> None:
        self._reserve = reserve
        self._make = make
        self.tab: Tab | None = None

    async def __aenter__(self) -> Tab:
        self.tab = self._make(await self._reserve())
        return self.tab

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool:
        assert self.tab is not None
        await self.tab.close(exc_type, exc)
        return False


def _only_cancelled(exc: BaseException | None) -> bool:
    return isinstance(exc, BaseExceptionGroup) and exc.split(trio.Cancelled)[1] is None


def store_failed_while_settling(tab: Tab) -> None:
    """The operator's line for a settlement the store could not take: a 503
    ``store_unavailable`` (the store's fault, not a gateway bug: no traceback)."""
    log.warning("store unavailable while settling; the hold is left to the store's recovery", extra={"fields": {
        "request_id": tab.hold.request_id, "error": "store_unavailable"}})
