"""``[payments.stripe]``: card top-ups through Stripe Checkout (docs/funding.md).

Read once with the rest of the file, so a mistake is the same one-line ``ConfigError``
(exit 2) as any other key; without the section there is no "Add funds" and
``/webhooks/stripe`` answers 404. The two secrets are named by environment variable and
must be set when the section is there: a configured top-up that cannot reach Stripe or
cannot verify its webhooks would fail only when an account holder tries to pay.
"""

from __future__ import annotations

import os
import urllib.parse
from decimal import Decimal
from typing import Any, Mapping

import attrs

from gatewayd.config_tables import ConfigError, Section as _Section
from gatewayd.money import MAX_PAID_NANO

NANO_PER_CENT = 10_000_000
KEYS = frozenset({"secret_key_env", "webhook_secret_env", "currency", "min_amount", "max_amount", "api_base",
                  "checkout_sessions_per_hour"})
# balances are US dollars: a top-up in another currency would need an exchange rate we do not have
CURRENCIES = ("usd",)
DEFAULT_API_BASE = "https://api.stripe.com"
CHECKOUT_ORIGIN = "https://checkout.stripe.com"  # where Stripe's API sends the browser to pay


@attrs.frozen
class StripeSettings:
    secret_key: str = attrs.field(repr=False)
    webhook_secret: str = attrs.field(repr=False)
    currency: str
    min_cents: int
    max_cents: int
    api_base: str
    # Checkout Sessions one account may create an hour (the console's "Add funds"; 429 past it)
    checkout_sessions_per_hour: int = 10

    @property
    def checkout_origins(self) -> tuple[str, ...]:
        """Where a Checkout Session's page may be. The console's form is followed by a redirect
        there, and Chrome holds such a redirect to the page's CSP ``form-action``. Another
        ``api_base`` (a test double of Stripe's API) serves its payment pages itself."""
        if self.api_base == DEFAULT_API_BASE:
            return (CHECKOUT_ORIGIN,)
        parts = urllib.parse.urlsplit(self.api_base)
        return (CHECKOUT_ORIGIN, f"{parts.scheme}://{parts.netloc}")


def _cents(s: _Section, key: str, default: float) -> int:
    value = s.number(key, default, minimum=0.5)  # Stripe's smallest card charge is $0.50
    amount = Decimal(str(value)) * 100
    if amount != amount.to_integral_value():
        raise ConfigError(f"payments.stripe.{key}: must be a whole number of cents (got {value})")
    cents = int(amount)
    if cents * NANO_PER_CENT > MAX_PAID_NANO:
        raise ConfigError(f"payments.stripe.{key}: must be at most {MAX_PAID_NANO // 10**9} USD")
    return cents


def _secret(s: _Section, key: str, default: str, env: Mapping[str, str]) -> str:
    name = s.str(key, default)
    value = env.get(name)
    if not value:
        raise ConfigError(f"payments.stripe.{key}: the environment variable {name} is not set")
    return value


def read_payments(raw: Any, env: Mapping[str, str] | None = None) -> StripeSettings | None:
    """``[payments]`` (only ``stripe`` for now) -> the Stripe settings, or None without them."""
    if raw is None:
        return None
    payments = _Section(raw, "payments")
    payments.unknown({"stripe"})
    if "stripe" not in payments.table:
        return None
    env = os.environ if env is None else env
    s = _Section(payments.table["stripe"], "payments.stripe")
    s.unknown(KEYS)
    min_cents = _cents(s, "min_amount", 5.0)
    max_cents = _cents(s, "max_amount", 1000.0)
    if max_cents < min_cents:
        raise ConfigError("payments.stripe.max_amount: must be at least min_amount")
    api_base = s.str("api_base", DEFAULT_API_BASE).rstrip("/")
    if not api_base.startswith(("http://", "https://")):
        raise ConfigError("payments.stripe.api_base: must start with http:// or https://")
    return StripeSettings(
        secret_key=_secret(s, "secret_key_env", "STRIPE_SECRET_KEY", env),
        webhook_secret=_secret(s, "webhook_secret_env", "STRIPE_WEBHOOK_SECRET", env),
        currency=s.str("currency", "usd", choices=CURRENCIES),
        min_cents=min_cents, max_cents=max_cents, api_base=api_base,
        checkout_sessions_per_hour=s.number("checkout_sessions_per_hour", 10, minimum=1, integer=True),
    )
