"""Admin tokens: what they are, how they are made and checked, and what each scope allows.

An admin token is ``gwa-`` + 48 base62 characters (~285 bits), shown once when it is made
and kept as its SHA-256 only (as API keys are): a database read leaks no usable token. The
prefix is what tells it from an API key (``sk-``): each listener refuses the other's
(``gatewayd.admin.gate``), so a leaked API key never operates the gateway, and an admin
token never spends an account's money.

Scopes (``SCOPES``): every scope may read; ``write`` changes accounts, groups, prices and
the config; ``keys`` manages any account's API keys; ``money`` records payments,
adjustments and redemption codes (the only scope that moves money); ``admin`` manages admin
tokens and the operator's password, and holds every other scope. The operator on the local
Unix socket holds ``admin``. Which scope a route needs is in the OpenAPI document
(``x-scope`` on each operation, ``gatewayd.admin.openapi``), the one place that says it.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import secrets
import string
from typing import Any

from gatewayd.store.admin_sql import AdminToken as AdminToken  # the row (kept by the store), re-exported

PREFIX = "gwa-"
API_KEY_PREFIX = "sk-"
_ALPHABET = string.ascii_letters + string.digits

READ, WRITE, MONEY, KEYS, ADMIN = "read", "write", "money", "keys", "admin"
SCOPES = (READ, WRITE, MONEY, KEYS, ADMIN)
MAX_NAME = 100
MAX_ALLOW_IPS = 50


class TokenError(ValueError):
    """A token's fields are not acceptable; the message names the field."""


def new_token() -> str:
    return PREFIX + "".join(secrets.choice(_ALPHABET) for _ in range(48))


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_token_id() -> str:
    return "adm_" + "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(12))


def grants(held: frozenset[str] | tuple[str, ...], needed: str) -> bool:
    """Whether scopes ``held`` allow a route that needs ``needed``."""
    return ADMIN in held or needed in held or (needed == READ and bool(held))


def check_name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        raise TokenError(f"name must be a non-empty string of at most {MAX_NAME} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise TokenError("name must not contain control characters")
    return value.strip()


def check_scopes(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(s, str) for s in value):
        raise TokenError(f"scopes must be a non-empty list of scope names ({', '.join(SCOPES)})")
    unknown = [s for s in value if s not in SCOPES]
    if unknown:
        raise TokenError(f"unknown scope {unknown[0]!r} (the scopes are {', '.join(SCOPES)})")
    return tuple(s for s in SCOPES if s in value)


def check_allow_ips(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or len(value) > MAX_ALLOW_IPS or \
            not all(isinstance(s, str) for s in value):
        raise TokenError(f"allow_ips must be null (any address) or a list of 1 to {MAX_ALLOW_IPS} "
                         "IP addresses or CIDR networks")
    nets = []
    for entry in value:
        try:
            nets.append(str(ipaddress.ip_network(entry.strip(), strict=False)))
        except ValueError:
            raise TokenError(f"allow_ips: {entry!r} is not an IP address or CIDR network") from None
    return tuple(dict.fromkeys(nets))


def check_expires(value: Any, now: datetime.datetime) -> str | None:
    """``YYYY-MM-DD`` (the end of that day, UTC) or an ISO 8601 time with an offset, in the
    future; returned as the store's UTC text."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TokenError("expires_at must be a date YYYY-MM-DD or an ISO 8601 time with an offset")
    try:
        if len(value) == 10:
            day = datetime.date.fromisoformat(value)
            moment = datetime.datetime.combine(day, datetime.time(23, 59, 59, 999000), datetime.timezone.utc)
        else:
            moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            if moment.tzinfo is None:
                raise ValueError("no offset")
            moment = moment.astimezone(datetime.timezone.utc)
    except (ValueError, OverflowError):
        raise TokenError(f"expires_at must be a date YYYY-MM-DD or an ISO 8601 time with an offset "
                         f"(got {value!r})") from None
    if moment <= now:
        raise TokenError(f"expires_at {value} is in the past")
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
