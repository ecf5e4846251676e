"""The store contract's values and errors, shared by both stores and their callers.

Accounts and keys travel as ``gatewayd.records.Account`` / ``Key`` (the directory's
cached objects); everything else a store hands back is a frozen value defined here.
No ``sqlite3`` or ``psycopg`` type ever crosses this line.
"""

from __future__ import annotations

import logging
import datetime as dt
from typing import Any

import attrs
import orjson

from gatewayd.records import Account, Key


class StoreError(Exception):
    """A store refused or failed an operation; subclasses say which."""


class SchemaTooNew(StoreError):
    """The database has migrations this binary does not know: a newer gatewayd upgraded it.
    Serving it could corrupt what the newer code wrote; ``gatewayd serve`` exits 2 with this line."""


def check_schema_known(kind: str, applied: set[int], known: set[int]) -> None:
    """``SchemaTooNew`` when ``applied`` holds a version no migration file of this binary has."""
    unknown = applied - known
    if unknown:
        from gatewayd.version import version

        raise SchemaTooNew(
            f"the {kind} database's schema is at migration {max(unknown):04d}, which this gatewayd {version()} "
            f"does not know (it knows up to {max(known, default=0):04d}): a newer gatewayd upgraded it; run that "
            "version, or restore the backup taken before the upgrade (docs/upgrade.md)")


def log_migration(kind: str, before: int, version: int, seconds: float) -> None:
    """One line a migration applied: the schema it found, the one it made, how long it took."""
    logging.getLogger("gatewayd.store").info(
        "database migrated", extra={"fields": {"store": kind, "from": before, "to": version,
                                               "duration_ms": round(seconds * 1000, 1)}})


class StoreUnavailable(StoreError):
    """The database cannot be reached (or stopped answering): a 503 for a new request, a retry for settlement."""


class TooManyKeys(StoreError):
    """The account already has ``max_keys`` live (not revoked) keys."""


class PaymentTooLarge(StoreError):
    """The payment would take the account's total paid above ``money.MAX_PAID_NANO`` (or, a
    refund or dispute, below zero: more given back than was ever paid)."""

    def __init__(self, total_paid_nano: int) -> None:
        super().__init__(f"total paid would be {total_paid_nano}")
        self.total_paid_nano = total_paid_nano  # as stored before this payment


class BelowFloor(StoreError):
    """A debit (an operator's adjustment) would take the account's credit below the floor it was
    given (``record_payment``'s ``credit_floor_nano``): checked in the same UPDATE as the debit,
    so two debits at once, or a charge meanwhile on another instance, cannot both pass it."""

    def __init__(self, credit_nano: int) -> None:
        super().__init__(f"credit is {credit_nano}")
        self.credit_nano = credit_nano  # as stored before this payment


class EmailTaken(StoreError):
    """Another account has this email (case-insensitive)."""


class KeyRevoked(StoreError):
    """The key was revoked (deleted); revoking is permanent and a revoked key cannot change."""


@attrs.define(eq=False)
class Hold:
    """Money held for one request until it settles. Mutable only in ``settled`` (exactly once)
    and in the route facts the relay updates before each attempt (``provider``, ``attempts``),
    which the usage row records."""

    request_id: str
    account: Account
    key: Key
    amount_nano: int
    model: str
    endpoint: str
    stream: bool
    started: float  # time.monotonic() at reserve, for the usage row's duration
    settled: bool = False
    provider: str | None = None  # the provider of the route tried last (the one that served, on success)
    attempts: int = 0  # routes tried for this request
    requested_model: str | None = None  # the alias the request named, when not the catalogue id (the usage row's)


@attrs.frozen
class Refusal:
    """``reserve`` could not hold: ``what`` is ``"key"`` (spend limit) or ``"account"`` (balance);
    ``available_nano`` is what was left to hold at that moment."""

    what: str
    available_nano: int


@attrs.frozen
class Settlement:
    """What ``settle`` writes: the usage row's facts besides the hold's own (the store takes
    ``hold_nano`` from the ``Hold``).

    ``breakdown`` is what ``cost_nano`` is made of, as the usage row stores and shows it:
    ``gatewayd.billing.pricing.Bill.doc()`` (``{"lines": [{dimension, quantity, unit_nano,
    nano}], "tier", "long_context"}``, the lines adding up to ``cost_nano``); None records
    no breakdown (callers that settle a bare cost, such as the store tests)."""

    status: str
    http_status: int
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cost_nano: int = 0
    breakdown: dict[str, Any] | None = attrs.field(default=None, hash=False)

    def breakdown_json(self) -> str | None:
        """The ``breakdown`` column's text."""
        return None if self.breakdown is None else orjson.dumps(self.breakdown).decode()


@attrs.frozen
class Payment:
    """A payment row: money in (operator, code, card) or given back (refund, dispute: negative).

    ``reference`` is the outside identity of the credit (a code's id, a Checkout Session,
    a refund, a dispute): unique per ``source`` among the payments, so it credits once."""

    id: int
    account_id: str
    amount_nano: int
    note: str
    created_at: str
    source: str = "operator"
    reference: str | None = None

    def doc(self) -> dict[str, Any]:
        return attrs.asdict(self)


# Where a payment comes from (``payments.source``); refunds and disputes are negative amounts
# (dispute_won: a dispute closed in the card holder's favour gives back what its opening held), an
# operator's adjustment (``POST /admin/v1/accounts/{ref}/adjustments``) either sign
PAYMENT_SOURCES = ("operator", "code", "card", "refund", "dispute", "dispute_won", "adjustment")
NEGATIVE_SOURCES = frozenset({"refund", "dispute"})
SIGNED_SOURCES = frozenset({"adjustment"})


USAGE_FIELDS = (
    "id", "request_id", "created_at", "key_id", "model", "endpoint", "stream", "status", "http_status",
    "input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens", "cost_nano", "duration_ms",
    "provider", "attempts", "hold_nano", "breakdown", "requested_model",
)


def parse_breakdown(text: str | None) -> dict[str, Any] | None:
    """A stored ``breakdown`` column (JSON text) as the document it holds; None when the row has
    none (written before the column existed, or settled without one) or it cannot be read."""
    if not text:
        return None
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


@attrs.frozen
class UsageRow:
    """One settled (or interrupted) request, as the usage log shows it."""

    id: int
    request_id: str
    created_at: str
    key_id: str
    model: str
    endpoint: str
    stream: bool
    status: str
    http_status: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    cost_nano: int
    duration_ms: int
    provider: str | None  # the provider that served it (the last one tried when none did)
    attempts: int  # routes tried
    hold_nano: int | None  # what was held for it (None: settled before the column existed)
    # Bill.doc(): what cost_nano is made of (None: not recorded)
    breakdown: dict[str, Any] | None = attrs.field(hash=False)
    requested_model: str | None = None  # the alias the request named (None: the catalogue id itself)

    @classmethod
    def from_row(cls, row: Any) -> UsageRow:
        values = {name: row[name] for name in USAGE_FIELDS}
        values["stream"] = bool(values["stream"])
        values["breakdown"] = parse_breakdown(values["breakdown"])
        return cls(**values)

    def doc(self) -> dict[str, Any]:
        """The admin API's JSON for a row (``id`` is internal: the request id names a row)."""
        out = attrs.asdict(self)
        del out["id"]
        return out

    def __getitem__(self, name: str) -> Any:  # templates and CSV code read rows like mappings
        return getattr(self, name)


@attrs.frozen
class UsageQuery:
    """A filter on one account's usage log; ``since``/``until`` are UTC ISO instants (until exclusive)."""

    account_id: str
    key_id: str | None = None
    model: str | None = None
    since: str | None = None
    until: str | None = None


@attrs.frozen
class UsagePage:
    rows: list[UsageRow]
    total: int
    page: int
    pages: int
    total_cost_nano: int


@attrs.frozen
class Balance:
    credit_nano: int  # payments - charges
    held_nano: int  # open holds
    total_paid_nano: int

    @property
    def balance_nano(self) -> int:
        return self.credit_nano - self.held_nano


@attrs.frozen
class Instance:
    """One gatewayd process registered in the store."""

    id: str
    host: str
    pid: int
    started_at: str
    heartbeat_age_s: float  # seconds since its last heartbeat, by the database's clock


def utc_iso(moment: dt.datetime) -> str:
    """The store's timestamp text: ``2026-11-21T20:48:00.123Z`` (sorts as time)."""
    moment = moment.astimezone(dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@attrs.frozen
class Change:
    """An account or key changed by some instance (``follow_changes``); ``kind="all"``: reload everything."""

    kind: str  # "account" | "key" | "all"
    id: str | None = None

    @classmethod
    def parse(cls, payload: str) -> "Change | None":
        """``account:<id>`` / ``key:<id>``, as the PostgreSQL triggers send them."""
        kind, _, ref = payload.partition(":")
        if kind in ("account", "key") and ref:
            return cls(kind, ref)
        return None
