"""``POST /webhooks/stripe``: Stripe's signed events, recorded exactly once.

Outside the API key auth: the ``Stripe-Signature`` header (an HMAC of the timestamp and
the body with the endpoint's secret) is what authenticates it, checked by the ``stripe``
library with its timestamp tolerance, so a captured delivery cannot be replayed later.

Exactly once, whatever the delivery does: each entry is a payment row unique by
``(source, Stripe's id)`` (``store.record_payment``), so a replay, a duplicate delivered
to two instances at once, or a retry after a crash records nothing more; and the answer
is 2xx only once every row is committed, so a crash before that (or a store that cannot
be reached: 503) leaves Stripe retrying until the credit is in. Events we do not handle,
and events that concern no account of ours, are answered 200 and logged: a retry would
bring the same answer.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
import stripe
from quart import Response, request

from gatewayd import logs
from gatewayd.errors import GatewayError, not_found_path
from gatewayd.payments import stripe_api
from gatewayd.payments.stripe_events import (
    DISPUTE_EVENTS, HANDLED, REFUND_EVENTS, SESSION_EVENTS, Entry, Ignored, dispute_entries, intent_of,
    refund_entries, session_entry,
)
from gatewayd.payments.stripe_settings import StripeSettings
from gatewayd.store.base import PaymentTooLarge, StoreUnavailable

PATH = "/webhooks/stripe"
MAX_BODY_BYTES = 1 << 20  # Stripe's events are a few KiB; nothing bigger is read
TOLERANCE_S = 300  # Stripe's recommended window for the signed timestamp
log = logging.getLogger("gatewayd.payments")


class _Refused(Exception):
    def __init__(self, error: GatewayError) -> None:
        self.error = error


def _answer(status: int, doc: dict[str, Any]) -> Response:
    return Response(orjson.dumps(doc), status=status, content_type="application/json")


def _error(error: GatewayError) -> Response:
    body = error.chat_body(str(request.scope.get("gateway.request_id", "")))
    return Response(body, status=error.status, content_type="application/json", headers=error.headers)


async def _body() -> bytes:
    declared = request.content_length
    if declared is not None and declared > MAX_BODY_BYTES:
        raise _Refused(GatewayError(413, f"a webhook body is at most {MAX_BODY_BYTES} bytes", "request_too_large"))
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.body:
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _Refused(GatewayError(413, f"a webhook body is at most {MAX_BODY_BYTES} bytes",
                                        "request_too_large"))
        chunks.append(chunk)
    return b"".join(chunks)


def _verified_event(settings: StripeSettings, payload: bytes) -> dict[str, Any]:
    """The event, once its signature and timestamp check out (400 otherwise)."""
    try:
        event = stripe_api.client(settings).construct_event(
            payload, request.headers.get("stripe-signature"), settings.webhook_secret, TOLERANCE_S)
    except stripe.SignatureVerificationError as e:
        raise _Refused(GatewayError(400, f"the Stripe-Signature header does not verify: {e.user_message or e}",
                                    "invalid_signature")) from None
    except ValueError:  # the signature verified, but the body is no JSON event
        raise _Refused(GatewayError(400, "the body is not a JSON event", "invalid_request_error")) from None
    doc = event.to_dict()
    if not isinstance(doc.get("type"), str) or not isinstance((doc.get("data") or {}).get("object"), dict):
        raise _Refused(GatewayError(400, "the event has no type or no data.object", "invalid_request_error"))
    return doc


async def _account_of_intent(settings: StripeSettings, obj: dict[str, Any]) -> str | Ignored:
    intent = intent_of(obj)
    if intent is None:
        return Ignored(f"{obj.get('id')} has no payment intent")
    account_id = (await stripe_api.intent_metadata(settings, intent)).get(stripe_api.ACCOUNT_KEY)
    return account_id or Ignored(f"payment intent {intent} was not made by gatewayd")


async def entries_of(settings: StripeSettings, event: dict[str, Any]) -> list[Entry | Ignored]:
    """The event's ledger entries; Stripe is asked for what the event does not carry."""
    kind = event["type"]
    obj = event["data"]["object"]
    if kind in SESSION_EVENTS:
        return [session_entry(obj, settings)]
    account_id = await _account_of_intent(settings, obj)
    if isinstance(account_id, Ignored):
        return [account_id]
    if kind in REFUND_EVENTS:
        return refund_entries(obj, await stripe_api.refunds_of(settings, obj["id"]), account_id, settings)
    if kind in DISPUTE_EVENTS:
        return dispute_entries(kind, obj, account_id, settings)
    raise AssertionError(kind)  # pragma: no cover - HANDLED is the union of the three


async def _record(holder: Any, event_id: str, entry: Entry) -> dict[str, Any]:
    account = holder.directory.accounts.get(entry.account_id)
    fields: dict[str, Any] = {"event": event_id, "account_id": entry.account_id, "source": entry.source,
              "reference": entry.reference, "amount_nano": entry.amount_nano}
    if account is None:
        # accounts are never deleted: the session was made by another gateway sharing the
        # Stripe account. Nothing here can credit it, and a retry would not change that.
        logs.event("stripe: payment for an account this gateway does not have; not recorded",
                   logging.ERROR, **fields)
        return {"reference": entry.reference, "recorded": False, "reason": "no such account"}
    try:
        outcome = await holder.store.record_outside_payment(
            account, entry.amount_nano, entry.note, source=entry.source, reference=entry.reference)
    except PaymentTooLarge:  # above MAX_PAID_NANO in all
        logs.event("stripe: payment would take the account's total paid out of bounds; not recorded",
                   logging.ERROR, **fields)
        return {"reference": entry.reference, "recorded": False, "reason": "total paid out of bounds"}
    if outcome == "waiting":
        # money given back before the credit it gives back: kept, applied when that credit arrives
        logs.event("stripe: money given back before its credit arrived; waiting for the credit",
                   logging.WARNING, **fields)
        return {"reference": entry.reference, "recorded": False, "waiting": True}
    logs.event("stripe: payment recorded" if outcome == "recorded" else "stripe: payment already recorded",
               **fields)
    return {"reference": entry.reference, "recorded": outcome == "recorded"}


async def handle(holder: Any) -> Response:
    settings: StripeSettings | None = holder.config.stripe
    if settings is None:
        return _error(not_found_path(request.path))
    try:
        event = _verified_event(settings, await _body())
    except _Refused as refused:
        logs.event("stripe: webhook refused", logging.WARNING, status=refused.error.status,
                   reason=refused.error.message)
        return _error(refused.error)
    event_id, kind = str(event.get("id")), event["type"]
    if kind not in HANDLED:
        return _answer(200, {"received": True, "ignored": f"{kind} is not an event gatewayd acts on"})
    try:
        entries = await entries_of(settings, event)
    except stripe.StripeError as e:  # Stripe's API, not ours: its retry of this event comes later
        logs.event("stripe: cannot reach Stripe's API for the event; answered 503 so it is retried",
                   logging.WARNING, event=event_id, type=kind, error=str(e))
        return _error(GatewayError(503, "Stripe's API could not be reached; retry later", "upstream_unavailable"))
    results: list[dict[str, Any]] = []
    try:
        for entry in entries:
            if isinstance(entry, Ignored):
                logs.event("stripe: event records nothing", event=event_id, type=kind, reason=entry.reason)
                results.append({"recorded": False, "reason": entry.reason})
            else:
                results.append(await _record(holder, event_id, entry))
    except StoreUnavailable as e:
        logs.event("stripe: the store is unavailable; answered 503 so Stripe retries", logging.WARNING,
                   event=event_id, type=kind, error=str(e))
        return _error(GatewayError(503, "the gateway's store is unavailable; retry later", "store_unavailable",
                                   headers={"Retry-After": "5"}))
    return _answer(200, {"received": True, "type": kind, "entries": results})


def mount_stripe_webhook(app: Any, holder: Any) -> None:
    """Add ``POST /webhooks/stripe`` to the public app. ``holder`` has the ``config`` in force
    (a reload replaces it: adding or removing ``[payments.stripe]`` takes effect at once),
    the ``store`` and the ``directory`` (the console's ``Console`` is one)."""
    async def stripe_webhook() -> Response:
        return await handle(holder)

    app.add_url_rule(PATH, "stripe_webhook", stripe_webhook, methods=["POST"])
