"""The key form: what a person types, to the fields ``Directory.create_key/update_key`` take.

Only the shape is checked here (dollars to nano-dollars, lines to a list); the rules
themselves (50 characters, 1,000 keys, known models and groups, valid addresses) stay
in the directory, whose message the page shows. The form keeps the text as typed, so
a refused form comes back with everything the person entered.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import attrs

from gatewayd.money import NANO_PER_USD, MoneyError, usd_to_nano
from gatewayd.records import Key

_IP_SEPARATORS = re.compile(r"[\s,]+")
MAX_SPEND_LIMIT_NANO = 10**9 * NANO_PER_USD  # far below SQLite's 64-bit integers


class FormError(Exception):
    """Input that cannot even be handed to the directory; ``field`` names the input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def nano_to_plain_usd(nano: int | None) -> str:
    """10_500_000_000 -> '10.50' for an input box (exact: trailing zeros trimmed to cents)."""
    if nano is None:
        return ""
    text = format(Decimal(nano) / NANO_PER_USD, "f")
    whole, _, frac = text.partition(".")
    frac = frac.rstrip("0").ljust(2, "0")
    return f"{whole}.{frac}"


# Which input a directory message is about, from the words it starts with.
_FIELD_OF_MESSAGE = (
    ("key name", "name"),
    ("spend_limit", "spend_limit"),
    ("expires_on", "expires_on"),
    ("models", "models"),
    ("no model", "models"),
    ("allow_ips", "allow_ips"),
    ("no group", "group"),
    ("budget", "budget"),
    ("mcp", "mcp"),
    ("no MCP server", "mcp"),
)


def field_of(message: str) -> str | None:
    for prefix, field in _FIELD_OF_MESSAGE:
        if message.startswith(prefix):
            return field
    return None


def friendly(message: str) -> str:
    """The directory speaks the admin API's field names; say them as the form labels them."""
    return (
        message.replace("spend_limit_nano must be a non-negative integer number of nano-dollars",
                        "spend limit must be a dollar amount of zero or more")
        .replace("expires_on must be a date YYYY-MM-DD", "expiry date must be a date YYYY-MM-DD")
        .replace("; give a later date, or force: true (gatewayctl --force) to set it anyway", "; choose a later date")
        .replace("expires_on ", "expiry date ")
        .replace("allow_ips: ", "IP allowlist: ")
        .replace("allow_ips must be", "IP allowlist must be")
        .replace("budget_nano must be a non-negative integer number of nano-dollars",
                 "budget must be a dollar amount of zero or more")
        .replace("models must be a non-empty list of model ids (or null for every model)",
                 "choose at least one model, or allow every model")
    )


@attrs.define
class KeyForm:
    name: str = ""
    spend_limit: str = ""
    expires_on: str = ""
    model_scope: str = "all"  # "all" | "selected"
    models: list[str] = attrs.Factory(list)
    allow_ips: str = ""
    group: str = ""
    budget: str = ""
    budget_period: str = "month"
    mcp: str = ""  # MCP servers and server:tool patterns, one a line; empty: every server
    mcp_shown: bool = False  # the form had the field (shown only when the gateway has MCP servers)

    @classmethod
    def from_key(cls, key: Key) -> "KeyForm":
        return cls(
            name=key.name,
            spend_limit=nano_to_plain_usd(key.spend_limit_nano),
            expires_on=key.expires_on.isoformat() if key.expires_on else "",
            model_scope="all" if key.models is None else "selected",
            models=sorted(key.models or ()),
            allow_ips="\n".join(str(n) for n in key.allow_ips or ()),
            group=key.group or "",
            budget=nano_to_plain_usd(key.budget_nano),
            budget_period=key.budget_period or "month",
            mcp="\n".join(key.mcp or ()),
            mcp_shown=True,
        )

    @classmethod
    def from_form(cls, form: Any) -> "KeyForm":
        return cls(
            name=form.get("name", ""),
            spend_limit=form.get("spend_limit", "").strip(),
            expires_on=form.get("expires_on", "").strip(),
            model_scope="selected" if form.get("model_scope") == "selected" else "all",
            models=[m for m in form.getlist("models") if m],
            allow_ips=form.get("allow_ips", ""),
            group=form.get("group", "").strip(),
            budget=form.get("budget", "").strip(),
            budget_period=form.get("budget_period", "month").strip(),
            mcp=form.get("mcp", ""),
            mcp_shown="mcp" in form,
        )

    def fields(self) -> dict[str, Any]:
        """The directory's keyword arguments; raises FormError for input of the wrong shape."""
        mcp = {"mcp": [e for e in _IP_SEPARATORS.split(self.mcp) if e] or None} if self.mcp_shown else {}
        return {
            **mcp,
            "name": self.name.strip(),
            "spend_limit_nano": self._spend_limit(),
            "expires_on": self.expires_on or None,
            "models": self._models(),
            "allow_ips": [e for e in _IP_SEPARATORS.split(self.allow_ips) if e] or None,
            "group": self.group or None,
            **self._budget(),
        }

    def _budget(self) -> dict[str, Any]:
        """An empty amount clears the budget (both fields null), as an empty spend limit clears it."""
        text = self.budget.removeprefix("$").replace(",", "").strip()
        if not text:
            return {"budget_nano": None, "budget_period": None}
        try:
            nano = usd_to_nano(text)
        except MoneyError:
            raise FormError("budget", f"budget must be a dollar amount such as 25 or 12.50 (got {text!r})")
        if nano < 0:
            raise FormError("budget", "budget must not be negative")
        if nano > MAX_SPEND_LIMIT_NANO:
            raise FormError("budget", "budget must be at most $1,000,000,000")
        if self.budget_period not in ("day", "week", "month"):
            raise FormError("budget", "choose a budget period: day, week or month")
        return {"budget_nano": nano, "budget_period": self.budget_period}

    def _spend_limit(self) -> int | None:
        text = self.spend_limit.removeprefix("$").replace(",", "").strip()
        if not text:
            return None
        try:
            nano = usd_to_nano(text)
        except MoneyError:
            raise FormError("spend_limit", f"spend limit must be a dollar amount such as 25 or 12.50 (got {text!r})")
        if nano < 0:
            raise FormError("spend_limit", "spend limit must not be negative")
        if nano > MAX_SPEND_LIMIT_NANO:
            raise FormError("spend_limit", "spend limit must be at most $1,000,000,000")
        return nano

    def _models(self) -> list[str] | None:
        if self.model_scope != "selected":
            return None
        if not self.models:
            raise FormError("models", "choose at least one model, or allow every model")
        return list(dict.fromkeys(self.models))
