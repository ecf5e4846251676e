"""gatewayctl account: create, list, show, update, password, pay, payments, groups, embeddings."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.admin_inproc import RealAdmin
from tests.gatewayctl_cli import Made, gatewayctl, new_email, ok, one_json
from tests.gatewayctl_cli import (  # noqa: F401  (fixtures)
    admin_fixture, ann_fixture, shared_admin_fixture,
)


def stored_account(admin: RealAdmin, account_id: str) -> tuple:
    async def read(directory, store):
        return tuple(await store.write(lambda db: db.execute(
            "SELECT name, timezone, credit_nano FROM accounts WHERE id = ?", (account_id,)).fetchone()))

    return admin.call(read)


def test_account_create_sends_fields_and_password_from_stdin(admin: RealAdmin) -> None:
    email = new_email()
    run = gatewayctl(admin, "account", "create", email, "--name", "Ann",
                     "--timezone", "Europe/Berlin", "--password-stdin", input="s3cret pass\n")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("POST", "/admin/v1/accounts")
    assert admin.last.body == {"email": email, "name": "Ann", "timezone": "Europe/Berlin", "password": "s3cret pass"}
    assert email in run.stdout
    assert "$0.000000" in run.stdout  # money shown as USD, via format_usd
    assert "s3cret" not in run.stdout
    shown = one_json(ok(admin, "account", "show", email, "--json"))
    assert (shown["name"], shown["timezone"], shown["has_password"], shown["balance_nano"]) == (
        "Ann", "Europe/Berlin", True, 0)


def test_account_create_minimal_body(admin: RealAdmin) -> None:
    email = new_email()
    run = gatewayctl(admin, "account", "create", email, "--json")
    assert run.exit_code == 0, run.stderr
    assert admin.last.body == {"email": email}
    created = one_json(run)
    assert (created["email"], created["timezone"], created["has_password"]) == (email, "UTC", False)


def test_account_create_refuses_unknown_timezone_locally(admin: RealAdmin) -> None:
    run = gatewayctl(admin, "account", "create", new_email(), "--timezone", "Mars/Olympus")
    assert run.exit_code == 2
    assert "'Mars/Olympus' is not an IANA time zone" in run.err
    assert admin.requests == []


def test_account_list_json_is_the_data_array(admin: RealAdmin, ann: Made) -> None:
    run = gatewayctl(admin, "account", "list", "--json")
    assert run.exit_code == 0, run.stderr
    listed = one_json(run)
    assert isinstance(listed, list) and [a for a in listed if a["id"] == ann.id] == [ann.account]
    assert (admin.last.method, admin.last.path) == ("GET", "/admin/v1/accounts")


def test_account_list_table(admin: RealAdmin, ann: Made) -> None:
    run = gatewayctl(admin, "account", "list")
    assert run.exit_code == 0, run.stderr
    assert ann.email in run.stdout and "$10.500000" in run.stdout


def test_account_show_quotes_email_in_path(admin: RealAdmin, ann: Made) -> None:
    run = gatewayctl(admin, "account", "show", ann.email, "--json")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", f"/admin/v1/accounts/{quote(ann.email, safe='')}")
    assert "%40" in admin.last.path
    assert one_json(run) == ann.account


def test_account_update_sends_only_given_fields(admin: RealAdmin, ann: Made) -> None:
    run = gatewayctl(admin, "account", "update", ann.id, "--timezone", "America/New_York", "--json")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("PATCH", f"/admin/v1/accounts/{ann.id}")
    assert admin.last.body == {"timezone": "America/New_York"}
    assert one_json(run) == {**ann.account, "timezone": "America/New_York"}
    assert stored_account(admin, ann.id) == ("Ann", "America/New_York", 10_500_000_000)


def test_account_update_alert_below_is_set_and_removed(admin: RealAdmin, ann: Made) -> None:
    set_ = one_json(ok(admin, "account", "update", ann.id, "--alert-below", "2.5", "--json"))
    assert admin.last.body == {"alert_below_nano": 2_500_000_000} and set_["alert_below_nano"] == 2_500_000_000
    removed = one_json(ok(admin, "account", "update", ann.id, "--no-alert-below", "--json"))
    assert admin.last.body == {"alert_below_nano": None} and removed["alert_below_nano"] is None


def test_account_update_with_nothing_to_change_is_a_usage_error(admin: RealAdmin) -> None:
    run = gatewayctl(admin, "account", "update", "acc_1")
    assert run.exit_code == 2
    assert "nothing to change" in run.err
    assert admin.requests == []


def test_account_password_reads_stdin(admin: RealAdmin, ann: Made) -> None:
    assert ann.account["has_password"] is False
    run = gatewayctl(admin, "account", "password", ann.email, input="hunter2 long enough\n")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == (
        "PUT", f"/admin/v1/accounts/{quote(ann.email, safe='')}/password")
    assert admin.last.body == {"password": "hunter2 long enough"}
    assert "hunter2" not in run.stdout
    assert one_json(ok(admin, "account", "show", ann.id, "--json"))["has_password"] is True


def test_account_password_refuses_empty_stdin(admin: RealAdmin) -> None:
    run = gatewayctl(admin, "account", "password", "acc_1", input="")
    assert run.exit_code == 2
    assert "no password on standard input" in run.err
    assert admin.requests == []


def test_pay_converts_dollars_exactly(admin: RealAdmin, ann: Made) -> None:
    run = gatewayctl(admin, "account", "pay", ann.id, "10.50", "--note", "invoice 8")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("POST", f"/admin/v1/accounts/{ann.id}/payments")
    assert admin.last.body == {"amount_nano": 10_500_000_000, "note": "invoice 8"}
    assert type(admin.last.body["amount_nano"]) is int
    assert "$21.000000" in run.stdout  # the balance after it
    assert stored_account(admin, ann.id)[2] == 21_000_000_000


def test_pay_json_is_the_api_object(admin: RealAdmin, ann: Made) -> None:
    run = gatewayctl(admin, "account", "pay", ann.id, "0.000000001", "--json")
    assert run.exit_code == 0, run.stderr
    assert admin.last.body == {"amount_nano": 1}
    paid = one_json(run)
    assert paid["account"] == {**ann.account, "balance_nano": 10_500_000_001, "total_paid_nano": 10_500_000_001,
                               "balance_usd": "10.500000001", "total_paid_usd": "10.500000001"}
    assert (paid["payment"]["amount_nano"], paid["payment"]["account_id"]) == (1, ann.id)


@pytest.mark.parametrize(
    ("amount", "why"),
    [
        ("ten", "not a dollar amount"),
        ("1.0000000001", "more than nine decimals"),
        ("0", "must be more than zero"),
        ("-5", "is negative"),
        ("NaN", "not a dollar amount"),
    ],
)
def test_pay_refuses_bad_amounts(admin: RealAdmin, amount: str, why: str) -> None:
    run = gatewayctl(admin, "account", "pay", "acct", "--", amount)
    assert run.exit_code == 2
    assert "AMOUNT_USD" in run.err and why in run.err
    assert admin.requests == []


def test_payments_list(admin: RealAdmin, ann: Made) -> None:
    run = gatewayctl(admin, "account", "payments", ann.id, "--json")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", f"/admin/v1/accounts/{ann.id}/payments")
    assert one_json(run) == [ann.payment]


@pytest.mark.parametrize(
    ("arg", "groups"), [("default", ["default"]), (" default , default ", ["default"]), ("", [])]
)
def test_groups_replaces_the_list(admin: RealAdmin, ann: Made, arg: str, groups: list[str]) -> None:
    run = gatewayctl(admin, "account", "groups", ann.id, arg, "--json")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("PUT", f"/admin/v1/accounts/{ann.id}/groups")
    assert admin.last.body == {"groups": groups}
    assert one_json(run)["groups"] == groups


def test_groups_the_daemon_does_not_have_are_its_refusal(admin: RealAdmin, ann: Made) -> None:
    run = gatewayctl(admin, "account", "groups", ann.id, "default,nosuch")
    assert run.exit_code == 1 and run.stderr.startswith("gatewayctl: ") and "nosuch" in run.stderr
    assert one_json(ok(admin, "account", "show", ann.id, "--json"))["groups"] == ann.account["groups"]


@pytest.mark.parametrize(("flag", "enabled"), [("--enable", True), ("--disable", False)])
def test_embeddings_toggle(admin: RealAdmin, ann: Made, flag: str, enabled: bool) -> None:
    run = gatewayctl(admin, "account", "embeddings", ann.email, "text-embedding-3-large", flag, "--json")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == (
        "PUT", f"/admin/v1/accounts/{quote(ann.email, safe='')}/embeddings/text-embedding-3-large")
    assert admin.last.body == {"enabled": enabled}
    assert ("text-embedding-3-large" in one_json(run)["embedding_models"]) is enabled


def test_embeddings_needs_enable_or_disable(admin: RealAdmin) -> None:
    run = gatewayctl(admin, "account", "embeddings", "acct", "text-embedding-3-small")
    assert run.exit_code == 2
    assert "--enable" in run.err
    assert admin.requests == []


def test_account_invite_posts_the_email_and_shows_why_it_was_refused(admin: RealAdmin) -> None:
    """The admin app here has no console to invite to (as a daemon with sign-up off says):
    the command sends the email and prints the API's reason; the link's happy path is in
    tests/test_self_service.py."""
    run = gatewayctl(admin, "account", "invite", "guest@example.com")
    assert (admin.last.method, admin.last.path, admin.last.body) == (
        "POST", "/admin/v1/invitations", {"email": "guest@example.com"})
    assert run.exit_code != 0 and "no console to invite to" in run.stderr
