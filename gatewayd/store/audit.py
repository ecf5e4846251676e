"""The audit: the ledger's invariant checked from the stored rows.

For every account, stored credit == payments - charges, total paid == payments (refunds and
disputes are negative payments: they lower both), and
the money it holds == its open hold rows; for every key, spent == its usage rows and
held == its open hold rows; and every request has one usage row. Each store gathers the
facts in one consistent read (one snapshot), so the answer is right while traffic flows;
a cache (the SQLite store's memory) is compared with the rows too, where the store has one.

The hold rule (issue 19): a charge never exceeds its hold by more than the tokenizer
tolerance, ``charge <= hold x (1 + HOLD_TOLERANCE)``. The audit fails, naming the
request, on any usage row beyond it (rows written before the hold was recorded, with
``hold_nano`` NULL, cannot be checked and are skipped). ``interrupted`` rows (a dead
instance's holds, released by another) are checked like every row: they charge nothing,
so they pass, unless the instance came back and settled the request after all, which
turns that row into the real outcome, checked against the hold it had.

What the rule allows an account and a key, with ``t = HOLD_TOLERANCE`` (see docs/billing.md
for the proof): a hold is only taken when the balance covers it, so every open hold
together is at most the credit, at most what was paid; settling a hold can take the
balance below zero by at most ``t`` x that hold. Hence, at every moment,

    credit - (1 + t) x held >= -t x paid in - R - C          (account)
    spent + (1 + t) x held <= (1 + t) x limit + C            (key with a limit)

where ``paid in`` is the sum of the positive payments, ``R`` what the negative ones (refunds,
disputes) gave back, and ``C`` the charges made after their hold had been released as ``interrupted``
(only on PostgreSQL, by an instance that lost the database: the release gave the money
back and it was taken again later, ``usage.charged_after_release``). Below that it is a
failure. Within it, a balance below zero or a key over its limit is a warning.
A silent PostgreSQL instance's holds become provisional charges of the held amount
(``unsettled`` rows, cost = hold) until it reports the real outcome: they pass the row rule,
and, the money having never been handed out again, they need no allowance in ``C``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import attrs

from gatewayd.billing.estimate import HOLD_TOLERANCE

NAMED_AT_MOST = 100
ADJECTIVE = {"day": "daily", "week": "weekly", "month": "monthly"}  # usage rows over their hold named in one report


def over_hold_condition(tolerance: Fraction | None = None) -> str:
    """SQL (both stores): the usage row's charge is above ``hold x (1 + tolerance)``
    (``HOLD_TOLERANCE`` unless given).

    Exact in integers and free of overflow for any 64-bit charge: with ``t = p/q`` and
    ``hold = a*q + r``, ``charge - hold > hold*p/q`` is ``charge - hold > a*p + (r*p) div q``."""
    tolerance = HOLD_TOLERANCE if tolerance is None else tolerance
    p, q = tolerance.numerator, tolerance.denominator
    # (no % operator: psycopg would read it as a placeholder; r = hold - (hold div q) * q)
    return (f"hold_nano IS NOT NULL AND cost_nano - hold_nano > (hold_nano / {q}) * {p}"
            f" + ((hold_nano - (hold_nano / {q}) * {q}) * {p}) / {q}")


@attrs.frozen
class AuditAccount:
    id: str
    email: str
    credit_nano: int
    total_paid_nano: int
    held_nano: int  # what the store says is held (a column, or the owning process's memory)
    cached_credit_nano: int | None = None  # the in-memory credit, where a store keeps one


@attrs.frozen
class AuditBudget:
    """A key's periodic budget as stored (``gatewayd.budgets``)."""

    budget_nano: int
    period: str
    period_start: str | None  # None: no usage row since the budget was set (nothing counted yet)
    spent_nano: int


@attrs.frozen
class AuditKey:
    id: str
    spent_nano: int
    spend_limit_nano: int | None
    held_nano: int
    cached_spent_nano: int | None = None
    budget: AuditBudget | None = None


# the key columns ``audit_budget`` reads
BUDGET_COLUMNS = "budget_nano, budget_period, budget_period_start, budget_spent_nano"


def audit_budget(row: Any) -> AuditBudget | None:
    """The budget of a key row read with ``BUDGET_COLUMNS`` (None: the key has none)."""
    if row["budget_period"] is None or row["budget_nano"] is None:
        return None
    return AuditBudget(int(row["budget_nano"]), row["budget_period"], row["budget_period_start"],
                       int(row["budget_spent_nano"]))


def lowest_allowed_balance(total_paid_nano: int, held_nano: int, late_nano: int,
                           tolerance: Fraction = HOLD_TOLERANCE, given_back_nano: int = 0) -> int:
    """The lowest balance (credit - held) the hold rule allows: ``-t x (paid in - held) - R - C``,
    rounded up, where R is what refunds and disputes gave back (the negative payments) and
    ``paid in = total paid + R`` the positive payments: money given back lowers the balance
    by itself, and the holds taken before it may still overrun on what it was."""
    paid_in = total_paid_nano + given_back_nano
    return math.ceil(-tolerance * (paid_in - held_nano) - given_back_nano - late_nano)


def highest_allowed_spend(limit_nano: int, held_nano: int, late_nano: int,
                          tolerance: Fraction = HOLD_TOLERANCE) -> int:
    """The most a key with a limit may have spent: ``(1 + t) x (limit - held) + C``, rounded down."""
    return math.floor((1 + tolerance) * (limit_nano - held_nano) + late_nano)


def build_audit(sums: dict[str, Any], accounts: list[AuditAccount], keys: list[AuditKey],
                tolerance: Fraction | None = None) -> dict[str, Any]:
    """The report from the stores' sums (``SQLStore._audit_sums``) and their accounts and keys;
    ``tolerance``: ``HOLD_TOLERANCE`` unless given (the stores' sums must use the same one)."""
    tolerance = HOLD_TOLERANCE if tolerance is None else tolerance
    accounts_out, keys_out = [], []
    repeated = sums.get("repeated_requests", {})
    general = [f"request {rid} has {n} usage rows (one settlement, one row per request)"
               for rid, n in sorted(repeated.items())]
    factor = 1 + tolerance
    for rid, (cost, hold, *what) in sorted(sums.get("over_hold", {}).items()):
        about = f" ({what[0]})" if what else ""
        general.append(f"request {rid}{about} was charged {cost} nano-USD, over its hold of {hold} x {factor}"
                       f" ({math.floor(hold * factor)}): the charge escaped its hold")
    more = sums.get("over_hold_count", 0) - len(sums.get("over_hold", {}))
    if more > 0:
        general.append(f"... and {more} more usage rows charged over their hold x {factor}")
    ok = not general
    late_accounts = sums.get("late_charged", {})
    late_keys = sums.get("key_late_charged", {})
    for a in accounts:
        paid = sums["paid"].get(a.id, 0)
        charged = sums["charged"].get(a.id, 0)
        open_holds = sums["held"].get(a.id, 0)
        late = late_accounts.get(a.id, 0)
        given_back = sums.get("given_back", {}).get(a.id, 0)
        problems = []
        if a.credit_nano != paid - charged:
            problems.append(f"stored credit {a.credit_nano} != payments - charges {paid - charged}")
        if a.total_paid_nano != paid:
            problems.append("total paid differs from the sum of payments")
        if a.cached_credit_nano is not None and a.cached_credit_nano != a.credit_nano:
            problems.append(f"in-memory credit {a.cached_credit_nano} != stored {a.credit_nano}")
        if a.held_nano != open_holds:
            problems.append(f"held {a.held_nano} != open hold rows {open_holds}")
        warnings = []
        balance = a.credit_nano - a.held_nano
        lowest = lowest_allowed_balance(a.total_paid_nano, a.held_nano, late, tolerance, given_back)
        if balance < lowest:
            problems.append(f"balance {balance} is below the lowest the hold rule allows ({lowest} ="
                            f" -{tolerance} x (paid in - held)" + (f" - {given_back} given back" if given_back else "")
                            + (f" - {late} charged after release" if late else "") + "): charges escaped their holds")
        elif balance < 0:
            why = (f"{given_back} given back by refunds or disputes, and charges within their holds' tolerance"
                   if given_back else "charges exceeded their holds, within the tolerance")
            warnings.append(f"balance below zero by {-balance} ({why}: it may go down to {lowest})")
        ok = ok and not problems
        accounts_out.append({
            "account_id": a.id,
            "email": a.email,
            "balance_nano": balance,
            "expected_balance_nano": paid - charged - open_holds,
            "lowest_allowed_balance_nano": lowest,
            "held_nano": a.held_nano,
            "open_holds_nano": open_holds,
            "ok": not problems,
            "problems": problems,
            "warnings": warnings,
        })
    for k in keys:
        problems = []
        charged = sums["key_charged"].get(k.id, 0)
        open_holds = sums["key_held"].get(k.id, 0)
        if k.spent_nano != charged:
            problems.append(f"spent {k.spent_nano} != sum of its usage rows {charged}")
        if k.cached_spent_nano is not None and k.cached_spent_nano != charged:
            problems.append(f"in-memory spent {k.cached_spent_nano} != sum of its usage rows {charged}")
        if k.held_nano != open_holds:
            problems.append(f"held {k.held_nano} != open hold rows {open_holds}")
        warnings = []
        highest = None
        if k.spend_limit_nano is not None:
            late = late_keys.get(k.id, 0)
            highest = highest_allowed_spend(k.spend_limit_nano, k.held_nano, late, tolerance)
            over = k.spent_nano - k.spend_limit_nano
            if k.spent_nano > highest:
                problems.append(f"spent {over} over its limit, beyond what the hold rule allows (at most"
                                f" {highest - k.spend_limit_nano} over, {factor} x (limit - held)"
                                + (f" + {late} charged after release" if late else "") + ")")
            elif over > 0:
                warnings.append(f"spent {over} over its limit (within the hold tolerance: at most"
                                f" {highest - k.spend_limit_nano})")
        budget_out = None
        if k.budget is not None:
            budget_out = _audit_budget(k.budget, sums.get("key_period_charged", {}).get(k.id, 0),
                                       late_keys.get(k.id, 0), tolerance, problems, warnings)
        ok = ok and not problems
        keys_out.append({
            "key_id": k.id,
            "spent_nano": k.spent_nano,
            "spend_limit_nano": k.spend_limit_nano,
            "highest_allowed_spent_nano": highest,
            "held_nano": k.held_nano,
            "budget": budget_out,
            "ok": not problems,
            "problems": problems,
            "warnings": warnings,
        })
    return {"ok": ok, "hold_tolerance": str(tolerance), "problems": general, "accounts": accounts_out,
            "keys": keys_out}


def _audit_budget(budget: AuditBudget, period_charged: int, late_nano: int, tolerance: Fraction,
                  problems: list[str], warnings: list[str]) -> dict[str, Any]:
    """A key's period budget: its count equals its usage rows since the period's start, and the
    hold rule bounds the period's spend: every hold charged in it was taken with ``budget -
    spent in the period - held >= hold``, so its charges are at most ``(1 + t) x budget`` (the
    open holds are not subtracted: they may belong to a period the stored count has not reached)."""
    counted = budget.spent_nano if budget.period_start is not None else 0
    if budget.period_start is not None and counted != period_charged:
        problems.append(f"budget: spent {counted} in the period from {budget.period_start} != sum of its usage"
                        f" rows since then {period_charged}")
    highest = highest_allowed_spend(budget.budget_nano, 0, late_nano, tolerance)
    if counted > highest:
        problems.append(f"budget: spent {counted - budget.budget_nano} over its {ADJECTIVE[budget.period]} budget in the"
                        f" period from {budget.period_start}, beyond what the hold rule allows (at most"
                        f" {highest - budget.budget_nano} over)")
    elif counted > budget.budget_nano:
        warnings.append(f"budget: spent {counted - budget.budget_nano} over its {ADJECTIVE[budget.period]} budget (within"
                        f" the hold tolerance)")
    return {"budget_nano": budget.budget_nano, "period": budget.period, "period_start": budget.period_start,
            "spent_nano": counted, "highest_allowed_spent_nano": highest}
