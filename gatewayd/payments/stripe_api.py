"""The gateway's calls to Stripe's API, through the official ``stripe`` library.

The library is synchronous (it blocks on its HTTP client), so every call here runs in a
worker thread (``trio.to_thread``), never on the event loop. The client is pointed at
``api_base`` (Stripe itself, or a loopback fake in the tests) and retries network
failures itself: each request carries an idempotency key, so a retry never makes a
second object.

What we ask Stripe to keep for us: the account id and the amount, in the Checkout
Session's metadata and in its PaymentIntent's (``payment_intent_data.metadata``). The
webhook reads the session's; a refund or a dispute names only the charge's PaymentIntent,
whose metadata says whose top-up it was.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import attrs
import stripe
import trio

from gatewayd.payments.stripe_settings import NANO_PER_CENT, StripeSettings

ACCOUNT_KEY = "gatewayd_account"
AMOUNT_KEY = "gatewayd_amount_nano"
TIMEOUT_S = 30
NETWORK_RETRIES = 2
StripeError = stripe.StripeError  # what every failure of a call to Stripe raises


@attrs.frozen
class CheckoutRequest:
    account_id: str
    cents: int
    nonce: str  # the form's: a double-submit of one form makes one session
    success_url: str
    cancel_url: str

    def idempotency_key(self) -> str:
        """Derived from the account, the form and the amount: Stripe answers a repeat with the
        session it made the first time (and would refuse the same key with other parameters)."""
        digest = hashlib.sha256(f"{self.account_id}\n{self.nonce}\n{self.cents}".encode()).hexdigest()
        return f"gatewayd-checkout-{digest[:48]}"


@functools.lru_cache(maxsize=4)
def _client(secret_key: str, api_base: str) -> stripe.StripeClient:
    http = stripe.RequestsClient(timeout=TIMEOUT_S)
    return stripe.StripeClient(secret_key, base_addresses={"api": api_base}, http_client=http,
                               max_network_retries=NETWORK_RETRIES)


def client(settings: StripeSettings) -> stripe.StripeClient:
    return _client(settings.secret_key, settings.api_base)


def _create_session(settings: StripeSettings, req: CheckoutRequest) -> Any:
    metadata = {ACCOUNT_KEY: req.account_id, AMOUNT_KEY: str(req.cents * NANO_PER_CENT)}
    params: Any = {
        "mode": "payment",
        "line_items": [{
            "quantity": 1,
            "price_data": {"currency": settings.currency, "unit_amount": req.cents,
                           "product_data": {"name": "Gateway balance top-up"}},
        }],
        "client_reference_id": req.account_id,
        "metadata": metadata,
        "payment_intent_data": {"metadata": metadata},
        "success_url": req.success_url,
        "cancel_url": req.cancel_url,
    }
    return client(settings).v1.checkout.sessions.create(params, {"idempotency_key": req.idempotency_key()})


async def create_checkout_session(settings: StripeSettings, req: CheckoutRequest) -> str:
    """A Checkout Session for the top-up; its URL, where the account holder pays."""
    session = (await trio.to_thread.run_sync(_create_session, settings, req)).to_dict()
    url = session.get("url")
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        raise stripe.APIError(f"Stripe answered a Checkout Session without a URL ({session.get('id')})")
    return url


def _intent_metadata(settings: StripeSettings, intent_id: str) -> dict[str, str]:
    intent = client(settings).v1.payment_intents.retrieve(intent_id)
    return dict(intent.to_dict().get("metadata") or {})


async def intent_metadata(settings: StripeSettings, intent_id: str) -> dict[str, str]:
    """The metadata of a PaymentIntent (ours carry the account id)."""
    return await trio.to_thread.run_sync(_intent_metadata, settings, intent_id)


def _refunds_of(settings: StripeSettings, charge_id: str) -> list[dict[str, Any]]:
    page = client(settings).v1.refunds.list({"charge": charge_id, "limit": 100})
    return [refund.to_dict() for refund in page.auto_paging_iter()]


async def refunds_of(settings: StripeSettings, charge_id: str) -> list[dict[str, Any]]:
    """Every refund of a charge. Listed from the API rather than read from the event: since
    API version 2022-11-15 a charge no longer carries its refunds."""
    return await trio.to_thread.run_sync(_refunds_of, settings, charge_id)
