"""``build_audit``: what fails the audit, what is only a warning (plain data, no store)."""

from __future__ import annotations

from gatewayd.store.audit import AuditAccount, AuditKey, build_audit


def sums(**extra) -> dict:
    base = {"paid": {"a": 1_000}, "charged": {"a": 1_500}, "held": {}, "key_charged": {"k": 1_500},
            "key_biggest_charge": {"k": 900}, "key_held": {}, "repeated_requests": {}}
    return {**base, **extra}


def test_a_balance_below_zero_is_a_warning_not_a_failure():
    report = build_audit(sums(), [AuditAccount("a", "a@example.com", -500, 1_000, 0)], [])
    assert report["ok"] is True and report["problems"] == []
    [account] = report["accounts"]
    assert account["ok"] is True and account["balance_nano"] == -500
    assert account["warnings"] == ["balance below zero by 500 (charges exceeded their holds)"]


def test_a_key_over_its_limit_by_one_charge_warns_by_more_fails():
    within = build_audit(sums(), [], [AuditKey("k", 1_500, 1_000, 0)])  # 500 over; its largest charge is 900
    assert within["ok"] is True and within["keys"][0]["warnings"] == [
        "spent 500 over its limit (within one request's estimate error)"]
    beyond = build_audit(sums(), [], [AuditKey("k", 1_500, 500, 0)])  # 1000 over: no single request explains it
    assert beyond["ok"] is False and beyond["keys"][0]["ok"] is False
    assert "more than its largest charge (900)" in beyond["keys"][0]["problems"][0]
    unlimited = build_audit(sums(), [], [AuditKey("k", 1_500, None, 0)])
    assert unlimited["ok"] is True and unlimited["keys"][0]["warnings"] == []


def test_two_usage_rows_for_one_request_fail_the_audit():
    report = build_audit(sums(repeated_requests={"req_1": 2}), [AuditAccount("a", "a@example.com", -500, 1_000, 0)],
                         [AuditKey("k", 1_500, None, 0)])
    assert report["ok"] is False
    assert report["problems"] == ["request req_1 has 2 usage rows (one settlement, one row per request)"]
    assert all(a["ok"] for a in report["accounts"]) and all(k["ok"] for k in report["keys"])
