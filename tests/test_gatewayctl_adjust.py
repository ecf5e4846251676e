"""gatewayctl's help as typed, ``account adjust`` (signed amounts, the zero floor, --force) and
``key create/update --expires`` with a day already past (issue 32, point 9), against the real
admin API in-process."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.admin_inproc import RealAdmin
from gatewayd.store.base import Settlement
from tests.gatewayctl_cli import Made, flatten, gatewayctl, make_account, ok, one_json, settle
from tests.gatewayctl_cli import (  # noqa: F401  (fixtures)
    admin_fixture, ann_fixture, shared_admin_fixture,
)


def help_rows(admin: RealAdmin, *command: str) -> dict[str, str]:
    """``--help``'s rows by their first word (an option or an argument): the rest of the row."""
    run = gatewayctl(admin, *command, "--help", env={"COLUMNS": "200"})
    assert run.exit_code == 0, run.stderr
    rows = {}
    for line in run.stdout.splitlines():
        words = flatten(line).lstrip("* ").split()
        if words and (words[0].startswith("--") or words[0].isupper()):
            rows[words[0]] = " ".join(words[1:])
    return rows


@pytest.mark.parametrize("command, flags", [
    (("account", "pay"), ["--json", "--help"]),
    (("account", "adjust"), ["--force", "--json", "--help"]),
    (("key", "create"), ["--force", "--json"]),
    (("key", "update"), ["--no-spend-limit", "--no-expiry", "--all-models", "--any-ip", "--force", "--json"]),
    (("usage",), ["--csv", "--jsonl", "--breakdown", "--json"]),
    ((), ["--json", "--version", "--help"]),
])
def test_help_shows_flags_without_a_value(admin: RealAdmin, command: tuple, flags: list[str]) -> None:
    rows = help_rows(admin, *command)
    for flag in flags:
        assert not rows[flag].startswith("<"), (flag, rows[flag])  # was "<bool>", as if it took a value
    assert not any("<bool>" in row for row in rows.values()), rows


@pytest.mark.parametrize("command, argument, shown", [
    (("account", "pay"), "AMOUNT_USD", "<decimal>"),
    (("account", "adjust"), "AMOUNT_USD", "<signed decimal>"),
])
def test_help_shows_money_arguments_as_decimals(admin: RealAdmin, command: tuple, argument: str, shown: str) -> None:
    row = help_rows(admin, *command)[argument]
    assert row.startswith(shown) and "<int>" not in row, row


def test_adjust_debits_with_a_negative_amount_and_its_reason(admin: RealAdmin, ann: Made) -> None:
    run = ok(admin, "account", "adjust", ann.email, "--note", "refund of a failed batch", "--", "-2.50")
    assert admin.last.body == {"amount_nano": -2_500_000_000, "note": "refund of a failed batch"}
    assert "Balance adjusted" in run.stdout and "balance $8.00" in flatten(run.stdout)
    answer = one_json(ok(admin, "account", "adjust", ann.id, "1.25", "--note", "goodwill", "--json"))
    assert answer["adjustment"]["amount_nano"] == 1_250_000_000
    assert answer["adjustment"]["source"] == "adjustment" and answer["adjustment"]["note"] == "goodwill"
    assert answer["account"]["balance_nano"] == 9_250_000_000
    payments = one_json(ok(admin, "account", "payments", ann.id, "--json"))
    assert [(p["amount_nano"], p["source"]) for p in payments[:2]] == [
        (1_250_000_000, "adjustment"), (-2_500_000_000, "adjustment")]
    assert one_json(ok(admin, "audit", "--json"))["ok"] is True  # the ledger still adds up
    [logged] = [e for e in one_json(ok(admin, "audit-log", "--json"))
                if e["path"].endswith(f"{ann.email}/adjustments") and e["status"] == 201]
    assert logged["request"] == {"amount_nano": -2_500_000_000, "note": "refund of a failed batch"}
    assert (logged["before"]["balance_nano"], logged["after"]["balance_nano"]) == (10_500_000_000, 8_000_000_000)


def test_adjust_below_zero_is_refused_unless_forced(admin: RealAdmin) -> None:
    ann = make_account(admin, pay="3")
    key = admin.api("POST", f"/accounts/{ann.id}/keys", {"name": "k"})
    settle(admin, ann.id, key["id"], f"req_spent_{ann.id}", 1_500_000_000,
           Settlement("ok", 200, input_tokens=10, output_tokens=10, cost_nano=1_000_000_000))
    run = gatewayctl(admin, "account", "adjust", ann.id, "--note", "chargeback", "--", "-2.01")
    assert run.exit_code == 1
    assert "would take the balance of $2.000000 below zero" in run.err and "--force" in run.err, run.err
    assert one_json(ok(admin, "balance", ann.id, "--json"))["balance_nano"] == 2_000_000_000  # nothing moved
    forced = one_json(ok(admin, "account", "adjust", ann.id, "--note", "chargeback", "--force", "--json",
                         "--", "-2.50"))
    assert admin.last.body == {"amount_nano": -2_500_000_000, "note": "chargeback", "force": True}
    assert (forced["account"]["balance_nano"], forced["account"]["total_paid_nano"]) == (-500_000_000, 500_000_000)
    # --force lowers the balance, never the total paid below zero: more cannot be taken back than was paid
    run = gatewayctl(admin, "account", "adjust", ann.id, "--note", "x", "--force", "--", "-0.51")
    assert run.exit_code == 1 and "total paid ($0.50) would go below zero" in run.err, run.err
    assert one_json(ok(admin, "audit", "--json"))["ok"] is True


@pytest.mark.parametrize("args, message", [
    (["1.50"], "Missing option '--note'"),
    (["1.50", "--note", "  "], "must not be empty"),
    (["0", "--note", "x"], "an adjustment of nothing changes nothing"),
    (["--note", "x", "--", "-1.5.0"], "give US dollars"),
    (["ten", "--note", "x"], "give US dollars"),
])
def test_adjust_refuses_bad_input_before_calling(admin: RealAdmin, ann: Made, args: list[str], message: str) -> None:
    run = gatewayctl(admin, "account", "adjust", ann.id, *args)
    assert run.exit_code == 2 and message in run.err, run.err
    assert admin.requests == []


def test_adjust_api_refuses_a_force_that_is_not_a_boolean(admin: RealAdmin, ann: Made) -> None:
    import httpx

    with httpx.Client(transport=httpx.HTTPTransport(uds=admin.socket_path), base_url="http://admin") as client:
        answer = client.post(f"/admin/v1/accounts/{ann.id}/adjustments",
                             json={"amount_nano": -1, "note": "x", "force": "yes"})
        assert answer.status_code == 400 and "force must be true or false" in answer.text
        floor = client.post(f"/admin/v1/accounts/{ann.id}/adjustments",
                            json={"amount_nano": -20_000_000_000, "note": "x"})
        assert floor.status_code == 409 and floor.json()["error"]["code"] == "below_floor", floor.text


def _yesterday_in(zone: str) -> str:
    from zoneinfo import ZoneInfo

    return (dt.datetime.now(ZoneInfo(zone)).date() - dt.timedelta(days=1)).isoformat()


def test_key_create_with_a_past_expiry_is_refused_unless_forced(admin: RealAdmin, ann: Made) -> None:
    past = _yesterday_in("Europe/Berlin")
    run = gatewayctl(admin, "key", "create", ann.id, "--name", "late", "--expires", past)
    assert run.exit_code == 1 and f"expires_on {past} has passed already" in run.err and "--force" in run.err
    assert one_json(ok(admin, "key", "list", ann.id, "--json")) == []  # nothing made
    key = one_json(ok(admin, "key", "create", ann.id, "--name", "late", "--expires", past, "--force", "--json"))
    assert (key["expires_on"], key["state"]) == (past, "expired")
    # today is not past: the key works to the end of today in the account's zone
    today = (dt.date.fromisoformat(_yesterday_in("Europe/Berlin")) + dt.timedelta(days=1)).isoformat()
    assert one_json(ok(admin, "key", "create", ann.id, "--name", "today", "--expires", today,
                       "--json"))["state"] == "enabled"


def test_key_update_with_a_past_expiry_is_refused_unless_forced(admin: RealAdmin, ann: Made) -> None:
    key = one_json(ok(admin, "key", "create", ann.id, "--name", "k", "--json"))
    run = gatewayctl(admin, "key", "update", key["id"], "--expires", "2020-01-01")
    assert run.exit_code == 1 and "expires_on 2020-01-01 has passed already" in run.err
    assert one_json(ok(admin, "key", "show", key["id"], "--json"))["expires_on"] is None
    ok(admin, "key", "update", key["id"], "--expires", "2020-01-01", "--force")
    # the key's own past date sent back unchanged (as the console's form does) is not a new expiry
    assert one_json(ok(admin, "key", "update", key["id"], "--expires", "2020-01-01", "--name", "k2",
                       "--json"))["name"] == "k2"
