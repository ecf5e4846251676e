"""Accounts and keys as the request path sees them, and their JSON for the admin API.

These are mutable on purpose: the directory keeps one object per account and key in
memory, the request path reads them without a database round trip, and every change
(admin or settlement) is written through to the store first, then applied here.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import math
import secrets
import string
import time
from zoneinfo import ZoneInfo

import attrs

from gatewayd.money import nano_to_usd_str

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_ALPHABET = string.ascii_letters + string.digits


def new_id(prefix: str, length: int = 12) -> str:
    return prefix + "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(length))


def new_secret() -> str:
    """``sk-`` + 48 base62 characters (~285 bits)."""
    return "sk-" + "".join(secrets.choice(_ALPHABET) for _ in range(48))


def secret_hash(presented: str) -> str:
    """The key is accepted with or without its ``sk-`` prefix: hash what follows it."""
    body = presented[3:] if presented.startswith("sk-") else presented
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def secret_hint(secret: str) -> str:
    return f"{secret[:7]}...{secret[-4:]}"


_second_cache: tuple[int, str] = (-1, "")


def utc_now_iso() -> str:
    """``2026-11-21T20:48:00.123Z``. Called twice a request: the date part is formatted once a second."""
    global _second_cache
    now = time.time()
    second = int(now)
    if _second_cache[0] != second:
        _second_cache = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{_second_cache[1]}.{int((now - second) * 1000):03d}Z"


def expiry_instant(expires_on: dt.date | None, timezone: str) -> float | None:
    """End of the chosen day in the account's zone, as a Unix timestamp."""
    if expires_on is None:
        return None
    if expires_on == dt.date.max:
        return math.inf  # the day after 9999-12-31 has no date: that end is never reached
    next_midnight = dt.datetime.combine(expires_on + dt.timedelta(days=1), dt.time(0), tzinfo=ZoneInfo(timezone))
    return next_midnight.timestamp()


@attrs.define(eq=False)
class Account:
    id: str
    email: str
    name: str
    timezone: str
    password_hash: str | None
    credit_nano: int  # payments - charges
    total_paid_nano: int
    groups: tuple[str, ...]
    embedding_models: frozenset[str]
    created_at: str
    held_nano: int = 0  # open holds, in memory (persisted rows only for crash recovery)
    max_concurrent: int | None = None  # requests in flight at once; None: [server] max_concurrent_per_account
    alert_below_nano: int | None = None  # alert when the balance falls below this (gatewayd.alerts); None: never

    @property
    def balance_nano(self) -> int:
        return self.credit_nano - self.held_nano

    def public(self) -> dict:
        return {
            "id": self.id,
            "email": self.email,
            "name": self.name,
            "timezone": self.timezone,
            "balance_nano": self.balance_nano,
            "held_nano": self.held_nano,
            "total_paid_nano": self.total_paid_nano,
            "balance_usd": nano_to_usd_str(self.balance_nano),
            "groups": list(self.groups),
            "embedding_models": sorted(self.embedding_models),
            "created_at": self.created_at,
            "has_password": self.password_hash is not None,
            "max_concurrent": self.max_concurrent,
            "alert_below_nano": self.alert_below_nano,
        }

    def balance(self) -> dict:
        return {
            "balance_nano": self.balance_nano,
            "held_nano": self.held_nano,
            "total_paid_nano": self.total_paid_nano,
        }


@attrs.define(eq=False)
class Key:
    id: str
    account_id: str
    name: str
    secret_hash: str
    secret_hint: str
    status: str  # enabled | disabled | deleted  (stored)
    spend_limit_nano: int | None
    spent_nano: int
    expires_on: dt.date | None
    models: frozenset[str] | None
    allow_ips: tuple[IPNetwork, ...] | None
    group: str | None
    created_at: str
    last_used_at: str | None
    expires_at: float | None = None  # derived from expires_on + the account's zone
    held_nano: int = 0  # open holds on this key, in memory
    max_concurrent: int | None = None  # requests in flight at once; None: [server] max_concurrent_per_key
    # the periodic budget (gatewayd.budgets): at most budget_nano per day / week / month in the
    # account's zone; budget_spent_nano is what the usage rows dated from budget_period_start on cost
    budget_nano: int | None = None
    budget_period: str | None = None
    budget_period_start: str | None = None
    budget_spent_nano: int = 0
    # MCP servers and ``server:tool`` patterns the key may use (gatewayd.mcp.access); None: every server
    mcp: tuple[str, ...] | None = None

    def state(self, now: float) -> str:
        """The spec's five states; expired and used-up are derived, never stored."""
        if self.status in ("deleted", "disabled"):
            return self.status
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        if self.spend_limit_nano is not None and self.spent_nano >= self.spend_limit_nano:
            return "used_up"
        return "enabled"

    def public(self, now: float) -> dict:
        return {
            "id": self.id,
            "account_id": self.account_id,
            "name": self.name,
            "state": self.state(now),
            "secret_hint": self.secret_hint,
            "spend_limit_nano": self.spend_limit_nano,
            "spent_nano": self.spent_nano,
            "held_nano": self.held_nano,
            "expires_on": self.expires_on.isoformat() if self.expires_on else None,
            "models": sorted(self.models) if self.models is not None else None,
            "allow_ips": [str(n) for n in self.allow_ips] if self.allow_ips is not None else None,
            "group": self.group,
            "created_at": self.created_at,
            "last_used_at": self.last_used_at,
            "max_concurrent": self.max_concurrent,
            "budget_nano": self.budget_nano,
            "budget_period": self.budget_period,
            "budget_period_start": self.budget_period_start,
            "budget_spent_nano": self.budget_spent_nano,
            "mcp": list(self.mcp) if self.mcp is not None else None,
        }
