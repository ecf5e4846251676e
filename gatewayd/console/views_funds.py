"""The Balance page's "Add funds": a card top-up through Stripe Checkout.

Shown only with ``[payments.stripe]`` in the config. The form posts an amount in dollars
(between the configured minimum and maximum, whole cents) and a nonce the page made; the
gateway creates a Checkout Session (``gatewayd.payments.stripe_api``, idempotency key
from the account, the nonce and the amount, so a double-submit makes one session) and
redirects the browser to Stripe's page with 303. Nothing is credited here: the credit
comes with Stripe's signed webhook (``gatewayd.payments.stripe_webhook``).

An account makes at most ``checkout_sessions_per_hour`` sessions in any hour (issue 31,
L-N3: one per POST, unthrottled, 50 in 2.3 s); past that the form is answered 429 with the
wait, and Stripe is not asked.
"""

from __future__ import annotations

import logging
import math
import re
import secrets
from typing import Any

from quart import Blueprint, Response, redirect, request, url_for

from gatewayd.console import queries
from gatewayd.console.formatting import usd, usd_html
from gatewayd.console.web import CSP, Console, ConsoleError, checked_form, is_tls, page, signed_in
from gatewayd.payments import stripe_api
from gatewayd.payments.stripe_settings import NANO_PER_CENT, StripeSettings

AMOUNT = re.compile(r"\$?\s*(\d{1,12})(?:\.(\d{1,2}))?")
NONCE = re.compile(r"[0-9a-f]{32}")
CHECKOUT_NOTICES = {
    "success": "Thank you. Your balance shows the payment as soon as Stripe confirms it, usually within seconds.",
    "cancel": "The card payment was cancelled; nothing was charged.",
}
log = logging.getLogger("gatewayd.console")
CHECKOUT_WINDOW = "stripe-checkout"  # the rate window's name beside the models' (gatewayd.ratelimit)


def amount_cents(text: str, settings: StripeSettings) -> int:
    """The form's amount in cents, or a ``ValueError`` saying what is wrong with it."""
    match = AMOUNT.fullmatch(text.strip().replace(",", ""))
    if match is None:
        raise ValueError("Enter an amount in US dollars, such as 25 or 25.50.")
    cents = int(match.group(1)) * 100 + int((match.group(2) or "0").ljust(2, "0"))
    if not settings.min_cents <= cents <= settings.max_cents:
        raise ValueError(f"Enter an amount between {usd(settings.min_cents * NANO_PER_CENT)} "
                         f"and {usd(settings.max_cents * NANO_PER_CENT)}.")
    return cents


def _console_url(console: Console, endpoint: str, **args: Any) -> str:
    """An absolute URL of a console page, for Stripe to send the browser back to."""
    scheme = "https" if is_tls(console) else request.scheme
    return f"{scheme}://{request.host}{url_for(endpoint, **args)}"


def register(bp: Blueprint, console: Console) -> None:
    @bp.context_processor
    def funds_context() -> dict[str, Any]:
        settings: StripeSettings | None = console.config.stripe
        if settings is None:
            return {"add_funds": None}
        return {
            "add_funds": {
                "min": f"{settings.min_cents / 100:.2f}", "max": f"{settings.max_cents / 100:.2f}",
                "min_usd": usd_html(settings.min_cents * NANO_PER_CENT),
                "max_usd": usd_html(settings.max_cents * NANO_PER_CENT),
                "nonce": secrets.token_hex(16),
            },
            "checkout_notice": CHECKOUT_NOTICES.get(request.args.get("checkout", "")),
        }

    @bp.after_request
    async def checkout_may_follow_the_form(response: Response) -> Response:
        """The Balance page's CSP lets its Add funds form be followed to Stripe's payment page
        (Chrome checks the redirect after a form against ``form-action``); other pages keep
        ``'self'`` alone. Runs before ``finish_response``, which only sets a missing CSP."""
        settings: StripeSettings | None = console.config.stripe
        if settings is not None and request.endpoint in ("console.balance", "console.add_funds"):
            allowed = " ".join(("'self'", *settings.checkout_origins))
            response.headers["Content-Security-Policy"] = CSP.replace("form-action 'self'", f"form-action {allowed}")
        return response

    @bp.post("/balance/funds")
    async def add_funds() -> Any:
        account = signed_in()
        form = await checked_form(console)
        settings: StripeSettings | None = console.config.stripe
        if settings is None:
            raise ConsoleError(404, "Not found", "Card payments are not offered by this gateway.")
        nonce = form.get("nonce", "")
        if not NONCE.fullmatch(nonce):
            raise ConsoleError(400, "Form refused", "This form is incomplete. Reload the page and try again.")
        amount = form.get("amount", "")
        try:
            cents = amount_cents(amount, settings)
        except ValueError as e:
            payments = await queries.payments(console.store, account.id)
            return await page(console, "balance.html", 400, nav="balance", payments=payments,
                              funds_error=str(e), funds_amount=amount[:40])
        wait = await console.checkouts.take(account.id, CHECKOUT_WINDOW, settings.checkout_sessions_per_hour, 3600)
        if wait is not None:
            minutes = max(1, math.ceil(wait / 60))
            raise ConsoleError(429, "Too many payment attempts",
                               f"This account started {settings.checkout_sessions_per_hour} card payments in the "
                               f"last hour. Try again in {minutes} minute{'s' if minutes != 1 else ''}.",
                               {"Retry-After": str(max(1, math.ceil(wait)))})
        checkout = stripe_api.CheckoutRequest(
            account_id=account.id, cents=cents, nonce=nonce,
            success_url=_console_url(console, "console.balance", checkout="success"),
            cancel_url=_console_url(console, "console.balance", checkout="cancel"),
        )
        try:
            url = await stripe_api.create_checkout_session(settings, checkout)
        except stripe_api.StripeError as e:
            log.warning("console: Stripe refused or could not be reached for a Checkout Session",
                        extra={"fields": {"account_id": account.id, "cents": cents, "error": str(e)}})
            raise ConsoleError(502, "Card payments unavailable",
                               "Stripe could not be reached to start the payment. Nothing was charged; "
                               "try again in a moment.") from None
        log.info("console: checkout session created", extra={"fields": {"account_id": account.id, "cents": cents}})
        return redirect(url, 303)
