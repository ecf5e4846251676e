"""gatewayctl against the real admin API, in this process (tests/admin_inproc.py).

Every command group runs as the operator types it, against the daemon's own admin app over
a real SQLite store: what the CLI sends is what the API takes, and what the API answers is
what the CLI prints: each test here walks one object through its life over a store of its own
(the test_gatewayctl_*.py files of each command group, with tests/gatewayctl_cli.py, pin each
command's options against one shared store).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.admin_inproc import RealAdmin
from tests.gatewayctl_cli import gatewayctl, one_json


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[RealAdmin]:
    short = tempfile.mkdtemp(prefix="gwctl-", dir="/tmp")  # Unix socket paths: about 100 bytes at most
    real = RealAdmin(os.path.join(short, "admin.sock"), tmp_path)
    real.start()
    try:
        yield real
    finally:
        real.stop()
        shutil.rmtree(short, ignore_errors=True)


def ok(admin: RealAdmin, *args: str, input: str | None = None):
    run = gatewayctl(admin, *args, input=input)
    assert run.exit_code == 0, run.stderr
    return run


def test_an_account_from_creation_to_payment(admin: RealAdmin) -> None:
    created = one_json(ok(admin, "account", "create", "ann@example.com", "--name", "Ann", "--timezone",
                          "Europe/Berlin", "--password-stdin", "--json", input="s3cret pass\n"))
    assert (created["email"], created["name"], created["timezone"], created["balance_nano"]) == (
        "ann@example.com", "Ann", "Europe/Berlin", 0)
    assert admin.last.body == {"email": "ann@example.com", "name": "Ann", "timezone": "Europe/Berlin",
                               "password": "s3cret pass"}
    paid = ok(admin, "account", "pay", "ann@example.com", "10.50", "--note", "invoice 7")
    assert "$10.500000" in paid.stdout
    balance = one_json(ok(admin, "balance", "ann@example.com", "--json"))
    assert (balance["balance_nano"], balance["total_paid_nano"], balance["held_nano"]) == (10_500_000_000,) * 2 + (0,)
    [payment] = one_json(ok(admin, "account", "payments", created["id"], "--json"))
    assert (payment["amount_nano"], payment["note"]) == (10_500_000_000, "invoice 7")
    [listed] = one_json(ok(admin, "account", "list", "--json"))
    assert listed["id"] == created["id"] and listed["balance_nano"] == 10_500_000_000
    updated = one_json(ok(admin, "account", "update", "ann@example.com", "--timezone", "America/New_York", "--json"))
    assert updated["timezone"] == "America/New_York"

    async def stored(directory, store):
        return await store.write(lambda db: db.execute(
            "SELECT timezone, credit_nano FROM accounts WHERE id = ?", (created["id"],)).fetchone())

    assert tuple(admin.call(stored)) == ("America/New_York", 10_500_000_000)  # in the database, not only answered


def test_the_api_refusals_reach_the_operator_as_one_line(admin: RealAdmin) -> None:
    ok(admin, "account", "create", "ann@example.com")
    again = gatewayctl(admin, "account", "create", "ann@example.com")
    assert again.exit_code == 1 and again.stderr.startswith("gatewayctl: ") and len(again.stderr.splitlines()) == 1
    assert "ann@example.com" in again.stderr
    missing = gatewayctl(admin, "account", "show", "nobody@example.com")
    assert missing.exit_code == 1 and len(missing.stderr.splitlines()) == 1


def test_a_key_from_creation_to_revocation(admin: RealAdmin) -> None:
    account = one_json(ok(admin, "account", "create", "ann@example.com", "--json"))
    created = one_json(ok(admin, "key", "create", account["id"], "--name", "laptop", "--spend-limit", "5",
                          "--allow-ip", "10.0.0.0/8", "--json"))
    assert created["secret"].startswith("sk-") and created["spend_limit_nano"] == 5_000_000_000
    assert created["allow_ips"] == ["10.0.0.0/8"] and created["name"] == "laptop"
    [listed] = one_json(ok(admin, "key", "list", account["id"], "--json"))
    assert listed["id"] == created["id"] and "secret" not in listed
    for action, state in (("disable", "disabled"), ("enable", "enabled"), ("revoke", "deleted")):
        assert one_json(ok(admin, "key", action, created["id"], "--json"))["state"] == state
    assert gatewayctl(admin, "key", "enable", created["id"]).exit_code == 1  # revoked for good


def test_usage_report_and_audit_of_a_fresh_store(admin: RealAdmin) -> None:
    account = one_json(ok(admin, "account", "create", "ann@example.com", "--json"))
    ok(admin, "account", "pay", account["id"], "3")
    assert one_json(ok(admin, "usage", account["id"], "--json")) == []
    assert "ok" in ok(admin, "audit").stdout
    audit = one_json(ok(admin, "audit", "--json"))
    assert audit["ok"] is True and [a["account_id"] for a in audit["accounts"]] == [account["id"]]


def test_audit_finds_a_balance_that_does_not_add_up(admin: RealAdmin) -> None:
    account = one_json(ok(admin, "account", "create", "ann@example.com", "--json"))
    ok(admin, "account", "pay", account["id"], "1")

    async def tamper(directory, store):
        await store.write(lambda db: db.execute(  # a broken row, as a bug would leave it
            "UPDATE accounts SET credit_nano = credit_nano + 1 WHERE id = ?", (account["id"],)))

    admin.call(tamper)
    run = gatewayctl(admin, "audit")
    assert run.exit_code == 1 and account["id"] in run.stdout + run.stderr


def test_reload_reaches_the_daemon(admin: RealAdmin) -> None:
    reloaded = one_json(ok(admin, "reload", "--json"))
    assert reloaded["ok"] is True and reloaded["models"] == len(admin.directory.config.models)
    assert (admin.last.method, admin.last.path) == ("POST", "/admin/v1/reload")


def test_prices_show_reads_the_real_schedule(admin: RealAdmin) -> None:
    model = next(iter(admin.directory.config.models))
    shown = one_json(ok(admin, "prices", "show", model, "--json"))
    assert shown["model"] == model and (admin.last.method, admin.last.path) == ("GET", f"/admin/v1/prices/{model}")


def test_account_password_groups_and_embeddings(admin: RealAdmin) -> None:
    account = one_json(ok(admin, "account", "create", "ann@example.com", "--json"))
    assert account["has_password"] is False
    ok(admin, "account", "password", account["id"], input="hunter2 long enough\n")
    assert one_json(ok(admin, "account", "show", "ann@example.com", "--json"))["has_password"] is True
    groups = [g for g in admin.directory.config.groups][:1]
    assert one_json(ok(admin, "account", "groups", account["id"], ",".join(groups), "--json"))["groups"] == groups
    embedding = next(m for m, model in admin.directory.config.models.items() if model.kind == "embedding")
    shown = one_json(ok(admin, "account", "embeddings", account["id"], embedding, "--enable", "--json"))
    assert embedding in shown["embedding_models"]
    shown = one_json(ok(admin, "account", "embeddings", account["id"], embedding, "--disable", "--json"))
    assert embedding not in shown["embedding_models"]


def test_key_show_and_update(admin: RealAdmin) -> None:
    account = one_json(ok(admin, "account", "create", "ann@example.com", "--json"))
    key = one_json(ok(admin, "key", "create", account["id"], "--name", "laptop", "--json"))
    updated = one_json(ok(admin, "key", "update", key["id"], "--name", "desk", "--spend-limit", "2.5", "--json"))
    assert (updated["name"], updated["spend_limit_nano"]) == ("desk", 2_500_000_000)
    assert admin.last.body == {"name": "desk", "spend_limit_nano": 2_500_000_000}
    shown = one_json(ok(admin, "key", "show", key["id"], "--json"))
    assert (shown["name"], shown["spend_limit_nano"]) == ("desk", 2_500_000_000) and "secret" not in shown
    assert one_json(ok(admin, "key", "update", key["id"], "--no-spend-limit", "--json"))["spend_limit_nano"] is None


def test_report_and_routes(admin: RealAdmin) -> None:
    account = one_json(ok(admin, "account", "create", "ann@example.com", "--json"))
    report = one_json(ok(admin, "report", account["id"], "--since", "2026-01-01", "--json"))
    assert admin.last.path == "/admin/v1/report" and admin.last.query == {"since": ["2026-01-01"],
                                                                          "account": [account["id"]]}
    assert report["range"]["account_id"] == account["id"] and report["total"]["requests"] == 0
    routes = one_json(ok(admin, "routes", "--json"))
    assert {row["model"] for row in routes} == set(admin.directory.config.models)
    assert {row["state"] for row in routes} == {"healthy"}


def test_prices_import_apply_and_reset_change_what_the_daemon_charges(admin: RealAdmin) -> None:
    price_list = str(Path(__file__).parent / "data" / "litellm_prices.json")
    diff = one_json(ok(admin, "prices", "import", price_list, "--json"))
    assert diff["applied"] is False and diff["changes"]
    change = diff["changes"][0]
    applied = one_json(ok(admin, "prices", "import", price_list, "--apply", "--json"))
    assert applied["applied"] is True and Path(applied["prices_file"]).parent == admin.data_dir
    assert change["field"] in admin.directory.config.price_overlay[change["model"]]  # reloaded with the file
    ok(admin, "prices", "reset", change["model"])
    assert change["model"] not in admin.directory.config.price_overlay
