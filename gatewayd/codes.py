"""Redemption codes: prepaid amounts the operator hands out and account holders redeem.

A code is ``gwc-`` and 28 characters of Crockford's base32 (140 random bits from
``secrets``), grouped by four for reading aloud: ``gwc-7K3M-Q9PD-...``. Typing is
forgiven: case, dashes and spaces do not matter, and O / I / L read as 0 / 1 / 1.

Only the SHA-256 of the code's canonical form is stored. A slow password hash (scrypt, as
for console passwords) guards secrets a person chose, which an attacker with the table can
guess by the billion; a code is 140 random bits, so no guessing finishes and one fast
hash is as safe, while it lets redemption find the row by an index lookup. Guessing
online is throttled on top (``gatewayd.console.views_codes``).

The rules for creating codes are here (the admin API calls them); the redemption itself,
the code's row and its payment in one transaction, is the store's
(``gatewayd.store.redemption_codes``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets

from gatewayd.directory import DirectoryError, refuse_control_characters
from gatewayd.money import MAX_PAID_NANO, format_usd
from gatewayd.records import new_id, utc_now_iso
from gatewayd.store.redemption_codes import RedemptionCode

PREFIX = "gwc-"
ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford's base32: no I, L, O, U
BODY_LENGTH = 28  # 28 x 5 = 140 bits
GROUP = 4
MAX_COUNT = 1000  # codes in one creation
MAX_NOTE = 500
_READ_AS = str.maketrans({"O": "0", "I": "1", "L": "1"})


def new_code() -> str:
    body = "".join(secrets.choice(ALPHABET) for _ in range(BODY_LENGTH))
    return PREFIX + "-".join(body[i:i + GROUP] for i in range(0, BODY_LENGTH, GROUP))


def canonical(typed: str) -> str | None:
    """The code as stored (hashed): ``gwc-`` and the 28 characters; None when ``typed`` cannot be a code."""
    text = "".join(typed.split()).replace("-", "").upper()
    if text.startswith("GWC"):
        text = text[3:]
    text = text.translate(_READ_AS)
    if len(text) != BODY_LENGTH or any(c not in ALPHABET for c in text):
        return None
    return PREFIX + text


def code_hash(canonical_code: str) -> str:
    return hashlib.sha256(canonical_code.encode("ascii")).hexdigest()


def expiry(value: object, now: str) -> str | None:
    """``expires_at`` as sent: null, a date ``YYYY-MM-DD`` (the code works through that day, UTC)
    or an ISO 8601 time with an offset; the store's UTC text, which must be in the future."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise DirectoryError("expires_at must be a date YYYY-MM-DD or an ISO 8601 time with an offset")
    try:
        if len(value) == 10:
            moment = dt.datetime.combine(dt.date.fromisoformat(value) + dt.timedelta(days=1), dt.time(),
                                         dt.timezone.utc)
        else:
            moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            if moment.tzinfo is None:
                raise ValueError("no offset")
        moment = moment.astimezone(dt.timezone.utc)
    except (ValueError, OverflowError):
        raise DirectoryError(f"expires_at must be a date YYYY-MM-DD or an ISO 8601 time with an offset (got"
                             f" {value!r})") from None
    text = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    if text <= now:
        raise DirectoryError(f"expires_at {value} is in the past: a code that never works is a typo")
    return text


def new_codes(amount_nano: object, count: object, expires_at: object, note: object
              ) -> list[tuple[RedemptionCode, str, str]]:
    """Validated new codes: (the row, the code to print once, its hash)."""
    if isinstance(amount_nano, bool) or not isinstance(amount_nano, int) or not 0 < amount_nano <= MAX_PAID_NANO:
        raise DirectoryError(f"amount_nano must be a positive integer number of nano-dollars, at most"
                             f" {format_usd(MAX_PAID_NANO, 2)}")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        raise DirectoryError(f"count must be an integer from 1 to {MAX_COUNT}")
    if not isinstance(note, str) or len(note) > MAX_NOTE:
        raise DirectoryError(f"note must be a string of at most {MAX_NOTE} characters")
    refuse_control_characters(note, "note")
    now = utc_now_iso()
    expires = expiry(expires_at, now)
    out = []
    for _ in range(count):
        code = new_code()
        stored_form = canonical(code)
        assert stored_form is not None  # a new code always reads back as itself
        out.append((RedemptionCode(new_id("code_"), code[-GROUP:], amount_nano, note, now, expires), code,
                    code_hash(stored_form)))
    return out
