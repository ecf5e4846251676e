"""Redemption codes in the store: the rows, and the transaction that redeems one exactly once.

A code is redeemed by one transaction: the conditional UPDATE of its row (still unused,
unrevoked and unexpired at ``now``) and, only if that changed the row, its payment
(``record_payment``'s job: source ``code``, reference the code's id). On PostgreSQL the
second of two instances redeeming at the same instant waits for the first's row lock,
re-reads the row, finds it redeemed and changes nothing; the payment's unique reference is a
second guard. The jobs take a ``Tx`` (``gatewayd.store.sql``): the same SQL on both stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from gatewayd.store.sql import Tx

COLUMNS = "id, hint, amount_nano, note, created_at, expires_at, revoked_at, redeemed_at, redeemed_by"

# Why a code was not redeemed (the console words them; all count as a failed attempt)
UNKNOWN, REDEEMED, REVOKED, EXPIRED = "unknown", "redeemed", "revoked", "expired"


@attrs.frozen
class RedemptionCode:
    """A code's row, without its hash. Times are the store's UTC text."""

    id: str
    hint: str  # the code's last four characters
    amount_nano: int
    note: str
    created_at: str
    expires_at: str | None = None
    revoked_at: str | None = None
    redeemed_at: str | None = None
    redeemed_by: str | None = None  # an account id

    def status(self, now: str) -> str:
        """unused | redeemed | revoked | expired (at ``now``, store time text)."""
        if self.redeemed_at is not None:
            return "redeemed"
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "unused"

    def doc(self, now: str) -> dict[str, Any]:
        return {**attrs.asdict(self), "status": self.status(now)}


def code_from_row(row: Any) -> RedemptionCode:
    return RedemptionCode(row["id"], row["hint"], row["amount_nano"], row["note"], row["created_at"],
                          row["expires_at"], row["revoked_at"], row["redeemed_at"], row["redeemed_by"])


def insert(tx: Tx, codes: list[tuple[RedemptionCode, str]]) -> None:
    """Store ``(code, its hash)`` pairs, all or none."""
    for code, code_hash in codes:
        tx.run("INSERT INTO redemption_codes (id, code_hash, hint, amount_nano, note, created_at, expires_at)"
               " VALUES (?, ?, ?, ?, ?, ?, ?)",
               (code.id, code_hash, code.hint, code.amount_nano, code.note, code.created_at, code.expires_at))


def listed(tx: Tx) -> list[RedemptionCode]:
    return [code_from_row(r) for r in tx.rows(f"SELECT {COLUMNS} FROM redemption_codes ORDER BY created_at DESC, id")]


def revoke(tx: Tx, code_id: str, now: str) -> RedemptionCode | None:
    """Revoke an unused code (a redeemed one stays redeemed; revoking twice keeps the first time).
    Returns the row as it is now, or None when there is no such code."""
    tx.run("UPDATE redemption_codes SET revoked_at = ? WHERE id = ? AND redeemed_at IS NULL AND revoked_at IS NULL",
           (now, code_id))
    row = tx.one(f"SELECT {COLUMNS} FROM redemption_codes WHERE id = ?", (code_id,))
    return None if row is None else code_from_row(row)


def claim(tx: Tx, code_hash: str, account_id: str, now: str) -> tuple[RedemptionCode | None, str | None]:
    """Mark the code redeemed by ``account_id`` if it may be: (the code, None), else (None, why not)."""
    row = tx.one(f"UPDATE redemption_codes SET redeemed_at = ?, redeemed_by = ?"
                 f" WHERE code_hash = ? AND redeemed_at IS NULL AND revoked_at IS NULL"
                 f" AND (expires_at IS NULL OR expires_at > ?) RETURNING {COLUMNS}",
                 (now, account_id, code_hash, now))
    if row is not None:
        return code_from_row(row), None
    found = tx.one(f"SELECT {COLUMNS} FROM redemption_codes WHERE code_hash = ?", (code_hash,))
    if found is None:
        return None, UNKNOWN
    return None, code_from_row(found).status(now)
