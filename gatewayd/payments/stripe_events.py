"""What a verified Stripe event means for the ledger: pure functions, no I/O.

Each entry is one payment row, unique by ``(source, reference)`` where the reference is
Stripe's own id for the thing that moved money: the Checkout Session for a top-up
(``card``), each refund (``refund``: a charge refunded in parts is several refunds, each
recorded once whatever event brought it), the dispute (``dispute``: the disputed amount,
held from the moment the dispute opens), and a dispute's end in the holder's favour
(``dispute_won``: the held amount back). So an event delivered twice, or two events that
both show one refund, can never record it twice, and the events of one dispute record the
same rows in whatever order they arrive.

Amounts come from what Stripe says moved (cents in the configured currency), never from
our own metadata: the metadata only says whose money it is.
"""

from __future__ import annotations

from typing import Any

import attrs

from gatewayd.payments.stripe_api import ACCOUNT_KEY
from gatewayd.payments.stripe_settings import NANO_PER_CENT, StripeSettings

SESSION_EVENTS = frozenset({"checkout.session.completed", "checkout.session.async_payment_succeeded"})
REFUND_EVENTS = frozenset({"charge.refunded"})
DISPUTE_EVENTS = frozenset({"charge.dispute.created", "charge.dispute.closed"})
# a dispute closed with the money staying with the merchant: the amount held is given back
DISPUTE_KEPT = frozenset({"won", "warning_closed"})
HANDLED = SESSION_EVENTS | REFUND_EVENTS | DISPUTE_EVENTS
# a pending refund has left the merchant's balance already; failed and canceled ones never will
REFUND_STATUSES = frozenset({"succeeded", "pending"})


@attrs.frozen
class Entry:
    """One payment row to record (negative for money that went back)."""

    account_id: str
    amount_nano: int
    source: str  # "card" | "refund" | "dispute"
    reference: str
    note: str


@attrs.frozen
class Ignored:
    """An event that records nothing, and why (logged; the webhook still answers 2xx)."""

    reason: str


def _cents(obj: dict[str, Any], field: str, settings: StripeSettings) -> int | Ignored:
    amount = obj.get(field)
    currency = obj.get("currency")
    if currency != settings.currency:
        return Ignored(f"{obj.get('id')} is in {currency!r}, not the configured {settings.currency!r}")
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        return Ignored(f"{obj.get('id')} has no positive {field}")
    return amount


def session_entry(session: dict[str, Any], settings: StripeSettings) -> Entry | Ignored:
    """A completed Checkout Session: a credit once it is paid (an asynchronous payment
    method completes the session unpaid and pays later, with its own event)."""
    session_id = session.get("id")
    account_id = (session.get("metadata") or {}).get(ACCOUNT_KEY)
    if not isinstance(session_id, str) or not account_id:
        return Ignored("not a session made by gatewayd (no account in its metadata)")
    if session.get("payment_status") != "paid":
        return Ignored(f"{session_id} is not paid yet ({session.get('payment_status')})")
    cents = _cents(session, "amount_total", settings)
    if isinstance(cents, Ignored):
        return cents
    return Entry(account_id, cents * NANO_PER_CENT, "card", session_id, f"card top-up (Stripe {session_id})")


def refund_entries(charge: dict[str, Any], refunds: list[dict[str, Any]], account_id: str,
                   settings: StripeSettings) -> list[Entry | Ignored]:
    """Every refund of the charge that has left (or is leaving) the account, each its own entry."""
    out: list[Entry | Ignored] = []
    for refund in refunds:
        refund_id = refund.get("id")
        if not isinstance(refund_id, str) or refund.get("status") not in REFUND_STATUSES:
            out.append(Ignored(f"refund {refund_id} is {refund.get('status')}"))
            continue
        cents = _cents(refund, "amount", settings)
        if isinstance(cents, Ignored):
            out.append(cents)
            continue
        out.append(Entry(account_id, -cents * NANO_PER_CENT, "refund", refund_id,
                         f"card refund (Stripe {refund_id} of {charge.get('id')})"))
    return out


def dispute_entries(kind: str, dispute: dict[str, Any], account_id: str,
                    settings: StripeSettings) -> list[Entry | Ignored]:
    """A dispute's rows. Opened (``charge.dispute.created``): the disputed amount is held (a
    negative ``dispute`` row), since Stripe takes it from the merchant at once. Closed lost:
    the same row (recorded once, whichever event came first). Closed won (or an inquiry
    closed): the same row and the amount given back (``dispute_won``), so the account ends
    where it was before the dispute whether or not the opening event arrived, or arrived
    last. Closed in any other state: nothing yet."""
    dispute_id = dispute.get("id")
    if not isinstance(dispute_id, str):
        return [Ignored("a dispute without an id")]
    status = dispute.get("status")
    closed = kind == "charge.dispute.closed"
    if closed and status != "lost" and status not in DISPUTE_KEPT:
        return [Ignored(f"dispute {dispute_id} closed as {status}")]
    cents = _cents(dispute, "amount", settings)
    if isinstance(cents, Ignored):
        return [cents]
    held = Entry(account_id, -cents * NANO_PER_CENT, "dispute", dispute_id,
                 f"card dispute (Stripe {dispute_id} of {dispute.get('charge')})")
    if closed and status in DISPUTE_KEPT:
        return [held, Entry(account_id, cents * NANO_PER_CENT, "dispute_won", dispute_id,
                            f"card dispute closed {status} (Stripe {dispute_id})")]
    return [held]


def intent_of(obj: dict[str, Any]) -> str | None:
    """The PaymentIntent id of a charge or a dispute (a string, or the object when expanded)."""
    intent = obj.get("payment_intent")
    if isinstance(intent, dict):
        intent = intent.get("id")
    return intent if isinstance(intent, str) and intent else None
