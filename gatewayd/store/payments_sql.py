"""Money coming in, the SQL both stores share: payments and redemption codes.

``PaymentsSQL`` is mixed into ``SQLStore`` (``gatewayd.store.sql``) and runs on its
primitives: ``_write(job)`` / ``_read(job)`` with a ``Tx``, the same SQL on SQLite and
PostgreSQL. A payment is recorded and credited in one transaction, exactly once per
``(source, reference)`` (a replayed webhook or a code redeemed twice credits nothing); a
code's redemption writes its row and its payment in one transaction
(``gatewayd.store.redemption_codes``). How the cached account then shows the payment is
each store's own (``_credit_payment``): SQLite adds to the cached object, the truth in
one process; PostgreSQL sets the credit and total the database returned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from gatewayd.money import MAX_PAID_NANO
from gatewayd.records import Account, utc_now_iso
from gatewayd.store import redemption_codes
from gatewayd.store.base import (
    NEGATIVE_SOURCES, PAYMENT_SOURCES, SIGNED_SOURCES, BelowFloor, Payment, PaymentTooLarge,
)
from gatewayd.store.redemption_codes import RedemptionCode

if TYPE_CHECKING:
    from gatewayd.store.sql import R, Tx

PAYMENT_COLUMNS = "id, account_id, amount_nano, note, created_at, source, reference"


def payment_from_row(row: Any) -> Payment:
    return Payment(row["id"], row["account_id"], row["amount_nano"], row["note"], row["created_at"], row["source"],
                   row["reference"])


def check_payment(amount_nano: int, source: str) -> None:
    """A payment's amount fits its source: a programming error otherwise (callers validate input)."""
    if source not in PAYMENT_SOURCES:
        raise ValueError(f"unknown payment source {source!r}")
    if source in SIGNED_SOURCES:
        if amount_nano == 0 or abs(amount_nano) > MAX_PAID_NANO:
            raise ValueError(f"an {source} is a non-zero amount of at most {MAX_PAID_NANO} either way, not {amount_nano}")
    elif source in NEGATIVE_SOURCES:
        if not -MAX_PAID_NANO <= amount_nano < 0:
            raise ValueError(f"a {source} is a negative amount of at most {MAX_PAID_NANO}, not {amount_nano}")
    elif not 0 < amount_nano <= MAX_PAID_NANO:
        raise PaymentTooLarge(0) if amount_nano > 0 else ValueError(f"a payment is positive, not {amount_nano}")


class PaymentsSQL:
    """Mixed into ``SQLStore``: payments and redemption codes (see the module docstring)."""

    if TYPE_CHECKING:  # provided by each store, declared by SQLStore, the one class this is mixed into
        async def _write(self, job: Callable[[Tx], R]) -> R: ...

        async def _read(self, job: Callable[[Tx], R]) -> R: ...

    # -- payments ---------------------------------------------------------------------

    async def add_payment(self, account: Account, amount_nano: int, note: str) -> Payment:
        """The operator's payment (``gatewayctl account pay``): a ``record_payment`` with no reference."""
        payment, _ = await self.record_payment(account, amount_nano, note, source="operator", reference=None)
        return payment

    async def record_payment(self, account: Account, amount_nano: int, note: str, *, source: str,
                             reference: str | None, credit_floor_nano: int | None = None) -> tuple[Payment, bool]:
        """Record a payment and credit it in one transaction, exactly once per ``(source, reference)``.

        Returns the row and True; or, when a payment with this source and reference exists
        already (a replayed webhook, a code redeemed twice, another instance first), that
        row and False, and nothing is credited. The unique index decides: the row is inserted
        with ON CONFLICT DO NOTHING and the account credited only if it went in, in the same
        transaction, so two instances racing on PostgreSQL credit once (the second insert
        waits for the first's commit, then does nothing).

        ``amount_nano`` is positive, or negative for a ``refund`` / ``dispute``: money given
        back. A negative payment lowers the credit (the balance may go below zero) and the
        total paid too, so the total paid stays the sum of the payment rows (the audit) and
        counts only money kept; it never goes below zero (``PaymentTooLarge``: more given back
        than was paid) nor above ``MAX_PAID_NANO``. ``account`` (the cached object) shows a
        new payment on return.

        ``credit_floor_nano``: the credit must stay at or above it after the payment, else
        ``BelowFloor`` and nothing is written (an operator's debit: ``Directory.adjust``)."""
        check_payment(amount_nano, source)
        created_at = utc_now_iso()
        payment, stored = await self._write(lambda tx: self._record_payment(
            tx, account.id, amount_nano, note, source, reference, created_at, credit_floor_nano))
        if stored is not None:
            self._credit_payment(account, amount_nano, stored)
        return payment, stored is not None

    def _record_payment(self, tx: Tx, account_id: str, amount_nano: int, note: str, source: str,
                        reference: str | None, created_at: str,
                        credit_floor_nano: int | None = None) -> tuple[Payment, dict[str, Any] | None]:
        """``record_payment``'s transaction, for callers that write more in the same one (a code's
        redemption): the row, and the account's new credit and total (None: a repeat, nothing done)."""
        row = tx.one("INSERT INTO payments (account_id, amount_nano, note, created_at, source, reference)"
                     " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id",
                     (account_id, amount_nano, note, created_at, source, reference))
        if row is None:  # the reference is taken: that payment was credited when it went in
            existing = tx.one(f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE source = ? AND reference = ?",
                              (source, reference))
            if existing is None:  # pragma: no cover - only the unique index can refuse the row
                raise AssertionError(f"payment {source} {reference} refused yet not found")
            return payment_from_row(existing), None
        # the bounds are in the UPDATE itself, so they hold against payments made at the same time
        # on another instance: past MAX_PAID_NANO the 64-bit sums of the audit would overflow
        floor = "" if credit_floor_nano is None else " AND credit_nano + ? >= ?"
        paid = tx.rows("UPDATE accounts SET credit_nano = credit_nano + ?, total_paid_nano = total_paid_nano + ?"
                       " WHERE id = ? AND total_paid_nano <= ? AND total_paid_nano >= ?" + floor +
                       " RETURNING credit_nano, total_paid_nano",
                       (amount_nano, amount_nano, account_id, MAX_PAID_NANO - amount_nano, -amount_nano,
                        *(() if credit_floor_nano is None else (amount_nano, credit_floor_nano))))
        if not paid:  # raised inside the transaction: the payment row goes with it
            now = tx.one("SELECT credit_nano, total_paid_nano FROM accounts WHERE id = ?", (account_id,))
            if now is not None and credit_floor_nano is not None and now["credit_nano"] + amount_nano < credit_floor_nano:
                raise BelowFloor(now["credit_nano"])
            raise PaymentTooLarge(now["total_paid_nano"] if now else 0)
        return Payment(row["id"], account_id, amount_nano, note, created_at, source, reference), paid[0]

    async def record_outside_payment(self, account: Account, amount_nano: int, note: str, *, source: str,
                                     reference: str) -> str:
        """A payment from outside (Stripe's webhook), in whichever order its events arrive:
        ``"recorded"``, ``"repeat"`` (this reference was recorded before: nothing done), or
        ``"waiting"``.

        Money given back (a refund, a dispute) that would take the account's total paid below
        zero arrived before the credit it gives back: it waits in ``payments_waiting``
        (unique by source and reference, so a repeat waits once) instead of being refused.
        Every credit recorded here applies, in the same transaction, the account's waiting
        entries that now fit, oldest first: each becomes its payment row exactly once, in
        either order of arrival. The account's row is locked first (PostgreSQL: ``FOR UPDATE``;
        SQLite has one writer), so a credit and a refund racing on two instances see each
        other: the refund either fits or is waiting when the credit looks."""
        check_payment(amount_nano, source)
        created_at = utc_now_iso()
        lock = " FOR UPDATE" if getattr(self, "kind", "") == "postgres" else ""

        def job(tx: Tx) -> tuple[str, list[tuple[int, dict[str, Any]]]]:
            row = tx.one(f"SELECT total_paid_nano FROM accounts WHERE id = ?{lock}", (account.id,))
            if row is None:
                raise PaymentTooLarge(0)
            if tx.one("SELECT 1 FROM payments WHERE source = ? AND reference = ?", (source, reference)):
                return "repeat", []
            if amount_nano < 0 and row["total_paid_nano"] + amount_nano < 0:
                tx.run("INSERT INTO payments_waiting (source, reference, account_id, amount_nano, note, created_at)"
                       " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                       (source, reference, account.id, amount_nano, note, created_at))
                return "waiting", []
            tx.run("DELETE FROM payments_waiting WHERE source = ? AND reference = ?", (source, reference))
            _, stored = self._record_payment(tx, account.id, amount_nano, note, source, reference, created_at)
            assert stored is not None  # the reference was free, under the account's lock
            credited = [(amount_nano, stored)]
            if amount_nano > 0:
                credited += self._apply_waiting(tx, account.id, stored["total_paid_nano"], created_at)
            return "recorded", credited

        outcome, credited = await self._write(job)
        for amount, stored in credited:
            self._credit_payment(account, amount, stored)
        return outcome

    def _apply_waiting(self, tx: Tx, account_id: str, total_paid: int,
                       created_at: str) -> list[tuple[int, dict[str, Any]]]:
        """The account's waiting entries that fit under ``total_paid`` now, recorded (oldest first)."""
        applied = []
        for waiting in tx.rows("SELECT source, reference, amount_nano, note FROM payments_waiting"
                               " WHERE account_id = ? ORDER BY created_at, source, reference", (account_id,)):
            if total_paid + waiting["amount_nano"] < 0:
                continue  # still more than was paid: it waits for the next credit
            tx.run("DELETE FROM payments_waiting WHERE source = ? AND reference = ?",
                   (waiting["source"], waiting["reference"]))
            _, stored = self._record_payment(tx, account_id, waiting["amount_nano"], waiting["note"],
                                             waiting["source"], waiting["reference"], created_at)
            if stored is not None:
                total_paid = stored["total_paid_nano"]
                applied.append((waiting["amount_nano"], stored))
        return applied

    async def payments_waiting(self, account_id: str) -> list[dict[str, Any]]:
        """Money given back that waits for its credit (``record_outside_payment``)."""
        rows = await self._read(lambda tx: tx.rows(
            "SELECT source, reference, amount_nano, note, created_at FROM payments_waiting WHERE account_id = ?"
            " ORDER BY created_at", (account_id,)))
        return [dict(r) for r in rows]

    def _credit_payment(self, account: Account, amount_nano: int, stored: dict[str, Any]) -> None:
        """Show a payment on the cached account: ``stored`` has the row's new credit and total."""
        raise NotImplementedError  # pragma: no cover - each store says where its truth is

    async def payments(self, account_id: str) -> list[Payment]:
        rows = await self._read(lambda tx: tx.rows(
            f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE account_id = ? ORDER BY id DESC", (account_id,)))
        return [payment_from_row(r) for r in rows]

    # -- redemption codes (gatewayd.codes, gatewayd.store.redemption_codes) ------------

    async def insert_codes(self, codes: list[tuple[RedemptionCode, str]]) -> None:
        """Store new codes, each with its SHA-256 (the code itself is never stored)."""
        await self._write(lambda tx: redemption_codes.insert(tx, codes))

    async def redemption_codes(self) -> list[RedemptionCode]:
        return await self._read(redemption_codes.listed)

    async def revoke_code(self, code_id: str, now: str) -> RedemptionCode | None:
        return await self._write(lambda tx: redemption_codes.revoke(tx, code_id, now))

    async def redeem_code(self, account: Account, code_hash: str, now: str) -> tuple[Payment | None, str | None]:
        """The code with this hash credits ``account`` once: (its payment, None), or (None, why not:
        ``redemption_codes.UNKNOWN`` / ``REDEEMED`` / ``REVOKED`` / ``EXPIRED``). The code's row and
        its payment are one transaction."""

        def redeem(tx: Tx) -> tuple[Payment | None, str | None, dict[str, Any] | None]:
            code, refused = redemption_codes.claim(tx, code_hash, account.id, now)
            if code is None:
                return None, refused, None
            note = f"code {code.id}" + (f": {code.note}" if code.note else "")
            payment, stored = self._record_payment(tx, account.id, code.amount_nano, note, "code", code.id, now)
            if stored is None:  # pragma: no cover - the claim above lets one transaction through
                raise AssertionError(f"code {code.id} claimed but its payment exists already")
            return payment, None, stored

        payment, refused, stored = await self._write(redeem)
        if payment is not None and stored is not None:
            self._credit_payment(account, payment.amount_nano, stored)
        return payment, refused
