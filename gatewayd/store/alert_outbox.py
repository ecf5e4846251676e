"""The alert outbox's SQL (both stores): claim due rows, then mark each delivered, retried or expired.

Rows are written by triggers (migrations 0012 / postgres 0014) in the transaction that moved
the money; this module only moves them along. A deliverer *claims* a batch: it sets
``claimed_until`` (a lease, epoch s) and ``claim`` (its token) on rows that are due and not
under another lease, in one statement. On PostgreSQL the candidate rows are picked ``FOR
UPDATE SKIP LOCKED`` and the lease is re-checked by the UPDATE, so two instances claiming at
once take disjoint rows. Every later write names the claim token: a deliverer whose lease
ran out (and whose row another took) changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from gatewayd.store.sql import Tx

OUTBOX_FIELDS = (
    "id", "created_at", "kind", "account_id", "key_id", "level", "amount_nano", "threshold_nano", "period_start",
    "payment_id", "source", "attempts", "email_done", "webhook_done", "finished_at", "outcome", "last_error",
)
_COLUMNS = ", ".join(OUTBOX_FIELDS)


@attrs.frozen
class OutboxRow:
    """One alert as stored (``kind``: balance_below | key_spend_limit | key_budget | payment)."""

    id: int
    created_at: str
    kind: str
    account_id: str
    key_id: str | None
    level: int | None
    amount_nano: int
    threshold_nano: int | None
    period_start: str | None
    payment_id: int | None
    source: str | None  # a payment's source (operator, code, card, refund, dispute)
    attempts: int
    email_done: bool
    webhook_done: bool
    finished_at: str | None
    outcome: str | None
    last_error: str | None

    @classmethod
    def from_row(cls, row: Any) -> OutboxRow:
        values = {name: row[name] for name in OUTBOX_FIELDS}
        values["email_done"], values["webhook_done"] = bool(values["email_done"]), bool(values["webhook_done"])
        return cls(**values)


def claim(tx: Tx, *, now: float, lease_s: float, token: str, limit: int, skip_locked: bool) -> list[OutboxRow]:
    """Up to ``limit`` due, unclaimed rows, oldest first, leased to ``token`` until ``now + lease_s``."""
    lock = " FOR UPDATE SKIP LOCKED" if skip_locked else ""
    rows = tx.rows(
        f"UPDATE alert_outbox SET claimed_until = ?, claim = ? WHERE id IN (SELECT id FROM alert_outbox"
        f" WHERE finished_at IS NULL AND next_attempt_at <= ? AND claimed_until <= ? ORDER BY id LIMIT ?{lock})"
        f" AND finished_at IS NULL AND claimed_until <= ? RETURNING {_COLUMNS}",
        (now + lease_s, token, now, now, limit, now))
    return sorted((OutboxRow.from_row(r) for r in rows), key=lambda r: r.id)


def finish(tx: Tx, row_id: int, token: str, *, outcome: str, at: str, email_done: bool, webhook_done: bool,
           error: str | None) -> bool:
    """The row is done (``delivered`` or ``expired``): it is never claimed again. False: not ours any more."""
    return tx.run(
        "UPDATE alert_outbox SET finished_at = ?, outcome = ?, email_done = ?, webhook_done = ?, last_error = ?,"
        " attempts = attempts + 1, claimed_until = 0, claim = NULL WHERE id = ? AND claim = ? AND finished_at IS NULL",
        (at, outcome, int(email_done), int(webhook_done), error, row_id, token)) == 1


def retry_later(tx: Tx, row_id: int, token: str, *, next_attempt_at: float, email_done: bool,
                webhook_done: bool, error: str) -> bool:
    """A channel failed: remember which ones are done, release the lease, try again at ``next_attempt_at``."""
    return tx.run(
        "UPDATE alert_outbox SET next_attempt_at = ?, email_done = ?, webhook_done = ?, last_error = ?,"
        " attempts = attempts + 1, claimed_until = 0, claim = NULL WHERE id = ? AND claim = ? AND finished_at IS NULL",
        (next_attempt_at, int(email_done), int(webhook_done), error, row_id, token)) == 1


def recent(tx: Tx, account_id: str, limit: int) -> list[OutboxRow]:
    """The account's latest alerts, newest first (the console and the tests read them)."""
    return [OutboxRow.from_row(r) for r in tx.rows(
        f"SELECT {_COLUMNS} FROM alert_outbox WHERE account_id = ? ORDER BY id DESC LIMIT ?", (account_id, limit))]


def forget_finished(tx: Tx, before: str) -> int:
    """Delete rows finished before ``before`` (UTC text): the outbox is not an archive."""
    return tx.run("DELETE FROM alert_outbox WHERE finished_at IS NOT NULL AND finished_at < ?", (before,))
