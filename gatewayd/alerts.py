"""Alerts: what they say, how they are signed, and the ``[alerts]`` config that says where they go.

An alert is one row of the outbox (``gatewayd.store.alert_outbox``), written by a database
trigger in the transaction that crossed its threshold (migrations 0012 / postgres 0014):

- ``balance_below``: the account's balance (payments - charges, open holds not counted) went
  from at or above its ``alert_below_nano`` to below it;
- ``key_spend_limit`` / ``key_budget``: a charge took the key's lifetime spend, or its spend in
  the current budget period, to 80% or 100% of its limit / budget (``level``: the highest
  of the two reached; 80% of L is reached at L - L // 5 nano-dollars, ``level_80_at``);
- ``payment``: a payment (or a refund: a negative one) was recorded.

Each crossing is judged from the old and the new value of the row that moved, so it writes
one row, and the next charge below writes none; crossing back (a payment, a raised limit, a
new period) re-arms it. ``gatewayd.alert_delivery`` sends the rows: this module is pure.

The webhook's signature: header ``X-Gatewayd-Signature: t=<unix seconds>,v1=<hex>``, where
``hex`` is HMAC-SHA256 with the shared secret over ``f"{t}.".encode() + body`` (``sign``,
``verify``; docs/funding.md has a receiver's snippet).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Mapping

import attrs

from gatewayd.config_tables import ConfigError, Section
from gatewayd.money import format_usd, nano_to_usd_str
from gatewayd.records import Account, Key

SIGNATURE_HEADER = "X-Gatewayd-Signature"
SIGNATURE_TOLERANCE_S = 300  # what ``verify`` accepts by default: a receiver's choice, documented
KINDS = {"balance_below": "balance.below", "key_spend_limit": "key.spend_limit", "key_budget": "key.budget",
         "payment": "payment.received"}

PAYMENT_SOURCES = {"operator": "payment", "code": "code redemption", "card": "card payment", "refund": "refund",
                   "dispute": "card dispute", "dispute_won": "card dispute closed in your favour",
                   "adjustment": "balance adjustment"}


def level_80_at(limit_nano: int) -> int:
    """The least spend that is 80% of ``limit_nano`` or more (ceil(0.8 L)), as the triggers compute it."""
    return limit_nano - limit_nano // 5


@attrs.frozen
class SmtpSettings:
    host: str
    port: int
    sender: str  # [alerts.smtp] from
    starttls: bool
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    timeout_s: float = 10.0


@attrs.frozen
class WebhookSettings:
    url: str
    secret: bytes = attrs.field(repr=False)
    timeout_s: float = 10.0


@attrs.frozen
class AlertSettings:
    """``[alerts]``: the channels and the delivery's pace."""

    smtp: SmtpSettings | None
    webhook: WebhookSettings | None
    poll_s: float = 5.0  # how often the outbox is looked at
    retry_initial_s: float = 30.0  # the first retry's delay; doubled after each failure ...
    retry_max_s: float = 3600.0  # ... up to this
    give_up_after_s: float = 3 * 86400.0  # an alert not delivered by then is marked expired
    lease_s: float = 60.0  # a claimed row is this instance's until then (longer than one delivery)

    def retry_delay(self, attempts: int) -> float:
        """The delay before the next attempt after ``attempts`` failed ones (1, 2, ...)."""
        return min(self.retry_initial_s * 2 ** min(max(attempts - 1, 0), 30), self.retry_max_s)


def read_settings(table: Any, env: Mapping[str, str]) -> AlertSettings | None:
    """``[alerts]`` (None: absent), or ``ConfigError`` naming the key; secrets come from the
    environment variables the file names, and a named variable that is unset is an error."""
    if table is None:
        return None
    s = Section(table, "alerts")
    s.unknown({"smtp", "webhook", "poll_s", "retry_initial_s", "retry_max_s", "give_up_after_h"})

    def secret(section: Section, key: str, required: bool) -> str | None:
        name = section.str(key, ... if required else None)
        if name is None:
            return None
        value = env.get(name)
        if not value:
            raise ConfigError(f"{section._key(key)}: environment variable {name} is not set")
        return value

    smtp = None
    if "smtp" in s.table:
        m = Section(s.table["smtp"], "alerts.smtp")
        m.unknown({"host", "port", "username_env", "password_env", "from", "starttls", "timeout_s"})
        username, password = secret(m, "username_env", False), secret(m, "password_env", False)
        if (username is None) != (password is None):
            raise ConfigError("alerts.smtp.username_env and alerts.smtp.password_env: give both or neither")
        sender = m.str("from")
        if "@" not in sender:
            raise ConfigError(f"alerts.smtp.from: must be an email address (got {sender!r})")
        port = m.number("port", 587, minimum=1, integer=True)
        if port > 65535:
            raise ConfigError(f"alerts.smtp.port: must be at most 65535 (got {port})")
        smtp = SmtpSettings(host=m.str("host"), port=port, sender=sender, starttls=m.bool("starttls", True),
                            username=username, password=password,
                            timeout_s=float(m.number("timeout_s", 10.0, minimum=0.1)))
    webhook = None
    if "webhook" in s.table:
        w = Section(s.table["webhook"], "alerts.webhook")
        w.unknown({"url", "secret_env", "timeout_s"})
        url = w.str("url")
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"alerts.webhook.url: must start with http:// or https:// (got {url!r})")
        webhook = WebhookSettings(url=url, secret=(secret(w, "secret_env", True) or "").encode(),
                                  timeout_s=float(w.number("timeout_s", 10.0, minimum=0.1)))
    if smtp is None and webhook is None:
        raise ConfigError("alerts: give [alerts.smtp] or [alerts.webhook] (or both)")
    initial = float(s.number("retry_initial_s", 30.0, minimum=0.01))
    return AlertSettings(
        smtp=smtp, webhook=webhook, poll_s=float(s.number("poll_s", 5.0, minimum=0.01)), retry_initial_s=initial,
        retry_max_s=max(initial, float(s.number("retry_max_s", 3600.0, minimum=0.01))),
        give_up_after_s=float(s.number("give_up_after_h", 72, minimum=0.001)) * 3600,
    )


# ----------------------------------------------------------------------------- signing


def sign(secret: bytes, body: bytes, timestamp: int) -> str:
    """The ``X-Gatewayd-Signature`` value for ``body`` sent at ``timestamp`` (unix s)."""
    digest = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify(secret: bytes, body: bytes, header: str, now: float, tolerance_s: float = SIGNATURE_TOLERANCE_S) -> bool:
    """What a receiver does: the signature matches and its timestamp is within ``tolerance_s``."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = sign(secret, body, timestamp).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))


# ----------------------------------------------------------------------------- messages


@attrs.frozen
class Message:
    subject: str
    text: str
    doc: dict[str, Any]  # the webhook's JSON body


def compose(row: Any, account: Account | None, key: Key | None) -> Message:
    """The alert ``row`` (an ``OutboxRow``) as an email's subject and text and a webhook's body."""
    who = account.email if account is not None else row.account_id
    key_name = f"{key.name or key.id}" if key is not None else (row.key_id or "")
    amount, threshold = format_usd(row.amount_nano, 2), format_usd(row.threshold_nano, 2)
    if row.kind == "balance_below":
        subject = f"Balance below {threshold}"
        text = f"The balance of {who} is {amount}, below the alert threshold of {threshold}."
    elif row.kind in ("key_spend_limit", "key_budget"):
        what = "spend limit" if row.kind == "key_spend_limit" else "budget for the period"
        subject = f"Key {key_name} reached {row.level}% of its {what}"
        text = (f"The key {key_name} of {who} has spent {amount} of its {what} of {threshold}"
                + (f" (the period began {row.period_start})" if row.period_start else "") + ".")
    else:
        source = PAYMENT_SOURCES.get(row.source or "", "payment")
        subject = f"{source.capitalize()} received: {amount}" if row.amount_nano >= 0 else f"{source.capitalize()}: {amount}"
        text = f"A {source} of {amount} was recorded on the account {who}."
    doc = {
        "id": row.id,
        "type": KINDS.get(row.kind, row.kind),
        "created_at": row.created_at,
        "account": {"id": row.account_id, "email": account.email if account else None,
                    "name": account.name if account else None},
        "key": {"id": row.key_id, "name": key.name if key else None} if row.key_id else None,
        "level_percent": row.level,
        "amount_nano": row.amount_nano,
        "amount_usd": nano_to_usd_str(row.amount_nano),
        "threshold_nano": row.threshold_nano,
        "threshold_usd": nano_to_usd_str(row.threshold_nano),
        "period_start": row.period_start,
        "payment_id": row.payment_id,
        "payment_source": row.source,
        "message": text,
    }
    return Message(subject=subject, text=text, doc=doc)
