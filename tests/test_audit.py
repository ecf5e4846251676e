"""``build_audit``: what fails the audit, what is only a warning (plain data, no store).

The hold rule: charge <= hold x (1 + HOLD_TOLERANCE) on every usage row, and what it
allows an account's balance and a key's spend (gatewayd/store/audit.py, docs/billing.md).
The tests use their own tolerance (1/2) so they do not move when the measured one does.
"""

from __future__ import annotations

import sqlite3
from fractions import Fraction

from gatewayd.store.audit import (
    AuditAccount,
    AuditKey,
    build_audit,
    highest_allowed_spend,
    lowest_allowed_balance,
    over_hold_condition,
)

HALF = Fraction(1, 2)


def sums(**extra) -> dict:
    base = {"paid": {"a": 1_000}, "charged": {"a": 1_500}, "held": {}, "key_charged": {"k": 1_500},
            "key_held": {}, "repeated_requests": {}, "over_hold": {}, "over_hold_count": 0}
    return {**base, **extra}


def audit(sums_: dict, accounts=(), keys=()) -> dict:
    return build_audit(sums_, list(accounts), list(keys), HALF)


def test_a_balance_below_zero_within_the_tolerance_is_a_warning():
    # paid 1,000: holds of at most 1,000 were open, so the charges can overshoot by 500 at most
    report = audit(sums(), [AuditAccount("a", "a@example.com", -500, 1_000, 0)])
    assert report["ok"] is True and report["problems"] == []
    [account] = report["accounts"]
    assert account["ok"] is True and account["balance_nano"] == -500
    assert account["lowest_allowed_balance_nano"] == -500
    assert account["warnings"] == [
        "balance below zero by 500 (charges exceeded their holds, within the tolerance: it may go down to -500)"]


def test_a_balance_below_what_the_hold_rule_allows_fails():
    report = audit(sums(charged={"a": 1_501}), [AuditAccount("a", "a@example.com", -501, 1_000, 0)])
    assert report["ok"] is False
    [account] = report["accounts"]
    assert account["ok"] is False and account["warnings"] == []
    assert account["problems"][0].startswith("balance -501 is below the lowest the hold rule allows (-500")


def test_the_issue_reproduction_fails_the_audit():
    """Issue 19: an account paid $3 ran a request held at $0.26 that was charged $33.55."""
    paid, charged = 3_000_000_000, 33_550_000_000
    report = audit(sums(paid={"a": paid}, charged={"a": charged}, key_charged={"k": charged},
                        over_hold={"req_n128": (charged, 260_000_000)}, over_hold_count=1),
                   [AuditAccount("a", "a@example.com", paid - charged, paid, 0)],
                   [AuditKey("k", charged, 1_000_000_000, 0)])
    assert report["ok"] is False
    assert report["problems"] == ["request req_n128 was charged 33550000000 nano-USD, over its hold of 260000000"
                                  " x 3/2 (390000000): the charge escaped its hold"]
    assert report["accounts"][0]["ok"] is False and report["keys"][0]["ok"] is False


def test_open_holds_tighten_the_bound_and_late_charges_widen_it():
    # 400 still held: those holds may overshoot by 200 more, so the balance now must stay above -300
    assert lowest_allowed_balance(1_000, 400, 0, HALF) == -300
    at_bound = audit(sums(charged={"a": 900}, held={"a": 400}), [AuditAccount("a", "a@example.com", 100, 1_000, 400)])
    assert at_bound["ok"] is True and at_bound["accounts"][0]["balance_nano"] == -300
    below = audit(sums(charged={"a": 901}, held={"a": 400}), [AuditAccount("a", "a@example.com", 99, 1_000, 400)])
    assert below["ok"] is False
    # charges made after their hold was released (an instance that lost the database) are allowed on top
    assert lowest_allowed_balance(1_000, 0, 700, HALF) == -1_200
    late = audit(sums(charged={"a": 2_200}, late_charged={"a": 700}),
                 [AuditAccount("a", "a@example.com", -1_200, 1_000, 0)])
    assert late["ok"] is True and late["accounts"][0]["warnings"]


def test_a_key_over_its_limit_within_the_tolerance_warns_beyond_it_fails():
    within = audit(sums(), [], [AuditKey("k", 1_500, 1_000, 0)])  # 500 over a 1,000 limit: 1.5 x
    assert within["ok"] is True and within["keys"][0]["warnings"] == [
        "spent 500 over its limit (within the hold tolerance: at most 500)"]
    assert within["keys"][0]["highest_allowed_spent_nano"] == 1_500
    beyond = audit(sums(), [], [AuditKey("k", 1_500, 999, 0)])
    assert beyond["ok"] is False and beyond["keys"][0]["ok"] is False
    assert "beyond what the hold rule allows (at most 499 over" in beyond["keys"][0]["problems"][0]
    unlimited = audit(sums(), [], [AuditKey("k", 1_500, None, 0)])
    assert unlimited["ok"] is True and unlimited["keys"][0]["warnings"] == []
    assert unlimited["keys"][0]["highest_allowed_spent_nano"] is None
    # open holds leave less room: 1.5 x (1,000 - 200)
    assert highest_allowed_spend(1_000, 200, 0, HALF) == 1_200
    late = audit(sums(key_late_charged={"k": 300}), [], [AuditKey("k", 1_500, 800, 0)])
    assert late["ok"] is True  # 1.5 x 800 + 300 charged after release


def test_rows_over_their_hold_are_named_and_counted():
    report = audit(sums(over_hold={"req_b": (16, 10), "req_a": (200, 100)}, over_hold_count=5))
    assert report["ok"] is False
    assert report["problems"] == [
        "request req_a was charged 200 nano-USD, over its hold of 100 x 3/2 (150): the charge escaped its hold",
        "request req_b was charged 16 nano-USD, over its hold of 10 x 3/2 (15): the charge escaped its hold",
        "... and 3 more usage rows charged over their hold x 3/2",
    ]
    assert report["hold_tolerance"] == "1/2"


def test_two_usage_rows_for_one_request_fail_the_audit():
    report = audit(sums(repeated_requests={"req_1": 2}), [AuditAccount("a", "a@example.com", -500, 1_000, 0)],
                   [AuditKey("k", 1_500, None, 0)])
    assert report["ok"] is False
    assert report["problems"] == ["request req_1 has 2 usage rows (one settlement, one row per request)"]
    assert all(a["ok"] for a in report["accounts"]) and all(k["ok"] for k in report["keys"])


def test_the_over_hold_sql_is_exact_at_the_bound_and_skips_rows_without_a_hold():
    """The SQL both stores run (SQLite here; the store contract runs it on PostgreSQL too)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE usage (request_id TEXT, cost_nano INTEGER, hold_nano INTEGER)")
    big = 9 * 10**18 // 2  # near the 64-bit limit: no overflow in the check
    rows = [("at", 15, 10), ("over", 16, 10), ("odd_at", 16, 11), ("odd_over", 17, 11), ("none", 10**9, None),
            ("zero_hold", 1, 0), ("free", 0, 0), ("big_at", big + big // 2, big), ("big_over", big + big // 2 + 1, big)]
    conn.executemany("INSERT INTO usage VALUES (?, ?, ?)", rows)
    for tolerance in (HALF, Fraction(3, 40), Fraction(0)):
        found = {r[0] for r in conn.execute(f"SELECT request_id FROM usage WHERE {over_hold_condition(tolerance)}")}
        expected = {rid for rid, cost, hold in rows if hold is not None and cost > hold * (1 + tolerance)}
        assert found == expected, tolerance
    assert {r[0] for r in conn.execute(f"SELECT request_id FROM usage WHERE {over_hold_condition(HALF)}")} == {
        "over", "odd_over", "zero_hold", "big_over"}
