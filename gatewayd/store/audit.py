"""The audit: the ledger's invariant checked from the stored rows.

For every account, stored credit == payments - charges, total paid == payments, and
the money it holds == its open hold rows; for every key, spent == its usage rows and
held == its open hold rows; and every request has one usage row. Each store gathers the
facts in one consistent read (one snapshot), so the answer is right while traffic flows;
a cache (the SQLite store's memory) is compared with the rows too, where the store has one.

Two findings are reported as warnings, not failures, when they can be right:

- an account's balance below zero: a charge can exceed its hold's estimate, and the
  audit cannot see the estimates;
- a key's spend over its limit by at most its largest single charge: the design allows
  one request's estimate error, which is less than that request's charge. Over by more,
  it is a failure.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class AuditAccount:
    id: str
    email: str
    credit_nano: int
    total_paid_nano: int
    held_nano: int  # what the store says is held (a column, or the owning process's memory)
    cached_credit_nano: int | None = None  # the in-memory credit, where a store keeps one


@attrs.frozen
class AuditKey:
    id: str
    spent_nano: int
    spend_limit_nano: int | None
    held_nano: int
    cached_spent_nano: int | None = None


def build_audit(sums: dict[str, dict[str, int]], accounts: list[AuditAccount], keys: list[AuditKey]) -> dict:
    accounts_out, keys_out = [], []
    repeated = sums.get("repeated_requests", {})
    general = [f"request {rid} has {n} usage rows (one settlement, one row per request)"
               for rid, n in sorted(repeated.items())]
    ok = not general
    for a in accounts:
        paid = sums["paid"].get(a.id, 0)
        charged = sums["charged"].get(a.id, 0)
        open_holds = sums["held"].get(a.id, 0)
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
        if a.credit_nano - a.held_nano < 0:
            warnings.append(f"balance below zero by {a.held_nano - a.credit_nano} (charges exceeded their holds)")
        ok = ok and not problems
        accounts_out.append({
            "account_id": a.id,
            "email": a.email,
            "balance_nano": a.credit_nano - a.held_nano,
            "expected_balance_nano": paid - charged - open_holds,
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
        over = k.spent_nano - k.spend_limit_nano if k.spend_limit_nano is not None else 0
        if over > 0:
            biggest = sums.get("key_biggest_charge", {}).get(k.id, 0)
            if over > biggest:
                problems.append(f"spent {over} over its limit, more than its largest charge ({biggest}):"
                                " more than one request's estimate error")
            else:
                warnings.append(f"spent {over} over its limit (within one request's estimate error)")
        ok = ok and not problems
        keys_out.append({
            "key_id": k.id,
            "spent_nano": k.spent_nano,
            "spend_limit_nano": k.spend_limit_nano,
            "held_nano": k.held_nano,
            "ok": not problems,
            "problems": problems,
            "warnings": warnings,
        })
    return {"ok": ok, "problems": general, "accounts": accounts_out, "keys": keys_out}
