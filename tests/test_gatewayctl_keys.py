"""gatewayctl key: create, list, show, update, disable, enable, revoke."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from gatewayd.money import nano_to_usd_str
from gatewayd.store.base import Settlement
from tests.admin_inproc import RealAdmin
from tests.gatewayctl_cli import Made, gatewayctl, ok, one_json, settle
from tests.gatewayctl_cli import (  # noqa: F401  (fixtures)
    admin_fixture, ann_fixture, laptop_fixture, shared_admin_fixture,
)


def test_key_create_sends_every_option(admin: RealAdmin, ann: Made) -> None:
    run = gatewayctl(
        admin, "key", "create", ann.email, "--name", "laptop",
        "--spend-limit", "5", "--expires", "2030-01-31", "--models", "gpt-4.1,claude-sonnet-4-5",
        "--allow-ip", "10.0.0.0/8", "--allow-ip", "2001:db8::1", "--group", "default",
        "--budget", "2", "--budget-period", "week",
    )
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == (
        "POST", f"/admin/v1/accounts/{quote(ann.email, safe='')}/keys")
    assert admin.last.body == {
        "name": "laptop",
        "budget_nano": 2_000_000_000,
        "budget_period": "week",
        "spend_limit_nano": 5_000_000_000,
        "expires_on": "2030-01-31",
        "models": ["gpt-4.1", "claude-sonnet-4-5"],
        "allow_ips": ["10.0.0.0/8", "2001:db8::1"],
        "group": "default",
    }
    # The secret is printed whole on a line of its own, with the shown-once warning.
    [secret] = [line for line in run.stdout.splitlines() if line.startswith("sk-")]
    assert "shown once" in run.stdout
    [key] = one_json(ok(admin, "key", "list", ann.id, "--json"))
    assert (key["name"], key["spend_limit_nano"], key["expires_on"], key["models"], key["allow_ips"], key["group"],
            key["budget_nano"], key["budget_period"]) == (
        "laptop", 5_000_000_000, "2030-01-31", ["claude-sonnet-4-5", "gpt-4.1"], ["10.0.0.0/8", "2001:db8::1/128"],
        "default", 2_000_000_000, "week")
    assert admin.directory.key_for_secret(secret).id == key["id"]  # the secret printed is the key's


def test_key_create_minimal_and_json_includes_secret(admin: RealAdmin, ann: Made) -> None:
    run = gatewayctl(admin, "key", "create", ann.id, "--name", "ci", "--json")
    assert run.exit_code == 0, run.stderr
    assert admin.last.body == {"name": "ci"}
    created = one_json(run)
    assert created["secret"].startswith("sk-") and created["secret"].endswith(created["secret_hint"][-4:])
    [listed] = one_json(ok(admin, "key", "list", ann.id, "--json"))
    assert {k: v for k, v in created.items() if k != "secret"} == listed


def test_key_create_requires_a_name(admin: RealAdmin) -> None:
    run = gatewayctl(admin, "key", "create", "acct")
    assert run.exit_code == 2
    assert "--name" in run.err
    assert admin.requests == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--allow-ip", "10.0.0.0/8", "--allow-ip", "10.0.0.300/8"],
         "'10.0.0.300/8' is not an IP address or CIDR network"),
        (["--allow-ip", "example.com"], "'example.com' is not an IP address or CIDR network"),
        (["--expires", "2027-02-30"], "'2027-02-30' is not a calendar date"),
        (["--expires", "31/01/2027"], "'31/01/2027' is not a date in YYYY-MM-DD form"),
        (["--expires", "20270131"], "'20270131' is not a date in YYYY-MM-DD form"),
        (["--spend-limit", "-1"], "'-1' is negative"),
        (["--spend-limit", "five"], "not a dollar amount"),
        (["--spend-limit", "0.0000000001"], "more than nine decimals"),
        (["--models", " , "], "give at least one name"),
        (["--budget", "1", "--budget-period", "year"], "must be day, week or month"),
    ],
)
def test_key_create_refuses_bad_values_locally(admin: RealAdmin, args: list[str], message: str) -> None:
    run = gatewayctl(admin, "key", "create", "acct", "--name", "k", *args)
    assert run.exit_code == 2
    assert message in run.err
    assert "Traceback" not in run.stderr
    assert admin.requests == []


def test_key_create_for_a_model_the_daemon_does_not_have_is_its_refusal(admin: RealAdmin, ann: Made) -> None:
    run = gatewayctl(admin, "key", "create", ann.id, "--name", "k", "--models", "gpt-4.1,gpt-99")
    assert run.exit_code == 1 and run.stderr.startswith("gatewayctl: ") and "gpt-99" in run.stderr
    assert one_json(ok(admin, "key", "list", ann.id, "--json")) == []


def test_key_list_with_json_after_the_command(admin: RealAdmin, ann: Made, laptop: dict) -> None:
    run = gatewayctl(admin, "key", "list", ann.email, "--json")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", f"/admin/v1/accounts/{quote(ann.email, safe='')}/keys")
    assert one_json(run) == [{k: v for k, v in laptop.items() if k != "secret"}]


def test_key_list_table(admin: RealAdmin, ann: Made, laptop: dict) -> None:
    run = gatewayctl(admin, "key", "list", ann.id)
    assert run.exit_code == 0, run.stderr
    assert "laptop" in run.stdout and "$5.000000" in run.stdout and "enabled" in run.stdout
    assert laptop["secret"] not in run.stdout


def test_key_show(admin: RealAdmin, ann: Made, laptop: dict) -> None:
    settle(admin, ann.id, laptop["id"], "req_show", 2_000_000, Settlement("ok", 200, input_tokens=10,
                                                                          cost_nano=1_234_567))
    run = gatewayctl(admin, "key", "show", laptop["id"])
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", f"/admin/v1/keys/{laptop['id']}")
    assert "$0.001235" in run.stdout  # spent 1_234_567 nano, format_usd's six places
    assert "never" in run.stdout  # no expiry


@pytest.mark.parametrize(
    ("args", "body", "shown"),
    [
        (["--no-spend-limit"], {"spend_limit_nano": None}, {}),
        (["--spend-limit", "2.5"], {"spend_limit_nano": 2_500_000_000}, {}),
        (["--spend-limit", "0"], {"spend_limit_nano": 0}, {"state": "used_up"}),
        (["--all-models"], {"models": None}, {}),
        (["--models", "gpt-4o,o4-mini"], {"models": ["gpt-4o", "o4-mini"]}, {}),
        (["--any-ip"], {"allow_ips": None}, {}),
        (["--allow-ip", "192.0.2.0/24", "--allow-ip", "198.51.100.7"],
         {"allow_ips": ["192.0.2.0/24", "198.51.100.7"]}, {"allow_ips": ["192.0.2.0/24", "198.51.100.7/32"]}),
        (["--no-expiry"], {"expires_on": None}, {}),
        (["--expires", "2032-02-29"], {"expires_on": "2032-02-29"}, {}),
        (["--no-group"], {"group": None}, {}),
        (["--group", "default"], {"group": "default"}, {}),
        (["--budget", "3", "--budget-period", "day"], {"budget_nano": 3_000_000_000, "budget_period": "day"},
         {"budget_left_nano": 3_000_000_000}),
        (["--no-budget"], {"budget_nano": None}, {"budget_period": None}),
        (["--name", "renamed", "--no-spend-limit", "--all-models"],
         {"name": "renamed", "spend_limit_nano": None, "models": None}, {}),
    ],
)
def test_key_update_sends_only_given_fields(admin: RealAdmin, laptop: dict, args: list[str],
                                            body: dict[str, Any], shown: dict[str, Any]) -> None:
    """What was sent is what the key now says (as the daemon normalises it: ``shown``), kept in
    the store; every other setting is as it was."""
    run = gatewayctl(admin, "key", "update", laptop["id"], *args, "--json")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("PATCH", f"/admin/v1/keys/{laptop['id']}")
    assert admin.last.body == body
    updated = one_json(run)
    expected = {**body, **shown}
    assert {k: updated[k] for k in expected} == expected
    for name in expected:  # each nano-dollar field has its dollars beside it
        if name.endswith("_nano"):
            assert updated[name[:-5] + "_usd"] == nano_to_usd_str(updated[name])
    derived = {"secret", "state", "budget_period_start", "budget_left_nano", "budget_period_spent_nano"}
    unchanged = {k for k in set(laptop) - set(expected) - derived if not k.endswith("_usd")}  # dollars: derived
    assert {k: updated[k] for k in unchanged} == {k: laptop[k] for k in unchanged}
    assert one_json(ok(admin, "key", "show", laptop["id"], "--json")) == updated  # kept, not only answered


@pytest.mark.parametrize(
    "args",
    [
        ["--spend-limit", "1", "--no-spend-limit"],
        ["--expires", "2027-01-01", "--no-expiry"],
        ["--models", "a", "--all-models"],
        ["--allow-ip", "10.0.0.1", "--any-ip"],
        ["--group", "g", "--no-group"],
        ["--budget", "1", "--no-budget"],
    ],
)
def test_key_update_refuses_contradictions(admin: RealAdmin, args: list[str]) -> None:
    run = gatewayctl(admin, "key", "update", "key_1", *args)
    assert run.exit_code == 2
    assert "these cannot be used together" in run.err
    assert admin.requests == []


def test_key_update_with_nothing_to_change_is_a_usage_error(admin: RealAdmin) -> None:
    run = gatewayctl(admin, "key", "update", "key_1")
    assert run.exit_code == 2
    assert "nothing to change" in run.err
    assert admin.requests == []


@pytest.mark.parametrize(("action", "state"), [("disable", "disabled"), ("enable", "enabled"),
                                               ("revoke", "deleted")])
def test_key_state_changes(admin: RealAdmin, laptop: dict, action: str, state: str) -> None:
    run = gatewayctl(admin, "key", action, laptop["id"], "--json")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("POST", f"/admin/v1/keys/{laptop['id']}/{action}")
    assert one_json(run)["state"] == state
    assert admin.directory.key(laptop["id"]).status == state or state == "deleted"
