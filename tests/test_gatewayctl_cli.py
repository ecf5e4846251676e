"""gatewayctl against the real admin API, in this process (tests/admin_inproc.py).

The daemon's own admin app over a real SQLite store answers every command here: a test makes
the account or key it needs, runs the command as the operator types it, and checks what the CLI
sent (the requests are recorded: method, path, JSON body, money in nano-dollars), what the API
answered and how the CLI printed it and exited. One admin serves the tests of a module (each
makes its own account, so they do not see each other's); the audit tests that break a row get
their own.

:class:`BrokenDaemon` is the one stand-in left: a few lines of stdlib HTTP for answers the real
API never sends (a 500 whose body is not JSON), to pin how the CLI takes them.
"""

from __future__ import annotations

import csv
import http.server
import io
import itertools
import json
import os
import re
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import attrs
import pytest
import typer
from click.testing import CliRunner

from gatewayctl.main import app
from gatewayd.money import usd_to_nano
from gatewayd.store.base import Hold, Settlement
from tests.admin_inproc import RealAdmin, running_admin


class BrokenDaemon:
    """NOT gatewayd: answers every request with one canned status and body (``bytes``), as a
    broken or foreign server on the admin socket would; records how many requests came."""

    def __init__(self, socket_path: str, status: int, body: bytes) -> None:
        self.socket_path = socket_path
        self.requests = 0
        broken = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                broken.requests += 1
                self.send_response(status)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet; and a Unix peer has no address for the default log line

        self.server = socketserver.ThreadingUnixStreamServer(socket_path, Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)


@pytest.fixture
def short_dir() -> Iterator[str]:
    """A short directory: Unix socket paths are limited to about 100 bytes."""
    path = tempfile.mkdtemp(prefix="gwctl-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def shared_admin(tmp_path_factory) -> Iterator[RealAdmin]:
    with running_admin(tmp_path_factory.mktemp("admin")) as real:
        yield real


@pytest.fixture
def admin(shared_admin: RealAdmin) -> RealAdmin:
    """The module's real admin API, its request log emptied for this test."""
    shared_admin.requests.clear()
    return shared_admin


@pytest.fixture
def fresh_admin(tmp_path: Path) -> Iterator[RealAdmin]:
    """An admin API over a store of its own: for the tests that break a row on purpose."""
    with running_admin(tmp_path) as real:
        yield real


runner = CliRunner()
# gatewayctl as click runs it, built once: typer builds it from the commands' type hints on
# every invoke of its own runner (~50 ms a time, a third of this file's time)
COMMAND = typer.main.get_command(app)


@attrs.frozen
class Run:
    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None

    @property
    def err(self) -> str:
        """stderr flattened: rich's error panel borders, colours and line wraps removed."""
        return flatten(self.stderr)


def flatten(text: str) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    text = re.sub(r"[│╭╮╰╯─]", " ", text)
    return " ".join(text.split())


def gatewayctl(admin: Any, *args: str, input: str | None = None,
               env: dict[str, str | None] | None = None) -> Run:
    """Run the CLI in-process, as the operator types it, with the socket given by environment."""
    environment: dict[str, str | None] = {
        "GATEWAY_ADMIN_SOCKET": admin.socket_path if admin else None,
        "COLUMNS": "80",  # not a terminal: tables still print whole, one line per row
    }
    environment.update(env or {})
    result = runner.invoke(COMMAND, list(args), prog_name="gatewayctl", input=input, env=environment)
    return Run(result.exit_code, result.stdout, result.stderr, result.exception)


def one_json(run: Run) -> Any:
    """stdout holds exactly one JSON document and nothing else."""
    return json.loads(run.stdout)


def ok(admin: Any, *args: str, input: str | None = None) -> Run:
    run = gatewayctl(admin, *args, input=input)
    assert run.exit_code == 0, run.stderr
    return run


_emails = itertools.count(1)


def new_email() -> str:
    return f"ann{next(_emails)}-{os.getpid()}@example.com"


@attrs.frozen
class Made:
    account: dict[str, Any]  # the API's account object after the payment
    payment: dict[str, Any]

    @property
    def id(self) -> str:
        return self.account["id"]

    @property
    def email(self) -> str:
        return self.account["email"]


def make_account(admin: RealAdmin, pay: str = "10.50") -> Made:
    """Ann, in Berlin, who paid ``pay`` dollars: made through the admin API (the commands that
    make them are tested on their own), then the log is emptied."""
    created = admin.api("POST", "/accounts", {"email": new_email(), "name": "Ann", "timezone": "Europe/Berlin"})
    paid = admin.api("POST", f"/accounts/{created['id']}/payments", {"amount_nano": usd_to_nano(pay),
                                                                     "note": "invoice 7"})
    admin.requests.clear()
    return Made(paid["account"], paid["payment"])


def make_key(admin: RealAdmin, account: Made, *options: str) -> dict[str, Any]:
    """A key named laptop made with gatewayctl's ``options`` (the API's object with its secret);
    the log is emptied."""
    key = one_json(ok(admin, "key", "create", account.id, "--name", "laptop", *options, "--json"))
    admin.requests.clear()
    return key


@pytest.fixture
def ann(admin: RealAdmin) -> Made:
    return make_account(admin)


@pytest.fixture
def laptop(admin: RealAdmin, ann: Made) -> dict[str, Any]:
    """Ann's key (the API's object with its secret), made through the admin API."""
    key = admin.api("POST", f"/accounts/{ann.id}/keys", {
        "name": "laptop", "spend_limit_nano": 5_000_000_000, "models": ["gpt-4.1", "claude-sonnet-4-5"],
        "allow_ips": ["10.0.0.0/8"]})
    admin.requests.clear()
    return key


def settle(admin: RealAdmin, account_id: str, key_id: str, request_id: str, hold_nano: int,
           result: Settlement) -> None:
    """One request's money as the daemon's ledger moves it: a hold, then its settlement."""

    async def run(directory, store) -> None:
        hold = await store.reserve(directory.account(account_id), directory.key(key_id), hold_nano,
                                   request_id=request_id, model="gpt-4.1", endpoint="chat", stream=True)
        assert isinstance(hold, Hold), hold
        await store.settle(hold, result)

    admin.call(run)


def stored_account(admin: RealAdmin, account_id: str) -> tuple:
    async def read(directory, store):
        return tuple(await store.write(lambda db: db.execute(
            "SELECT name, timezone, credit_nano FROM accounts WHERE id = ?", (account_id,)).fetchone()))

    return admin.call(read)


# --- accounts ---------------------------------------------------------------------------


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
                               "balance_usd": "10.500000001"}
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


# --- keys -------------------------------------------------------------------------------


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
    derived = {"secret", "state", "budget_period_start", "budget_left_nano", "budget_period_spent_nano"}
    unchanged = set(laptop) - set(expected) - derived
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


# --- balance, usage, audit -------------------------------------------------------------


def test_balance(admin: RealAdmin, ann: Made, laptop: dict) -> None:
    async def hold(directory, store):
        return await store.reserve(directory.account(ann.id), directory.key(laptop["id"]), 250_000,
                                   request_id="req_open", model="gpt-4.1", endpoint="chat", stream=False)

    assert isinstance(admin.call(hold), Hold)  # a request still running
    run = gatewayctl(admin, "balance", ann.email)
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", f"/admin/v1/accounts/{quote(ann.email, safe='')}/balance")
    assert "$10.499750" in run.stdout and "$0.000250" in run.stdout
    balance = one_json(gatewayctl(admin, "balance", ann.id, "--json"))
    assert (balance["balance_nano"], balance["held_nano"], balance["total_paid_nano"]) == (
        10_499_750_000, 250_000, 10_500_000_000)


USAGE = Settlement("ok", 200, input_tokens=1200, output_tokens=300, cached_tokens=1000, cost_nano=4_700_000)
BILLED = Settlement(
    "ok", 200, input_tokens=250_000, output_tokens=100, cost_nano=1_030_000_000 + 2_000_000 + 30_000_000,
    breakdown={"lines": [{"dimension": "input", "quantity": 250_000, "unit_nano": 4_120, "nano": 1_030_000_000},
                         {"dimension": "output", "quantity": 100, "unit_nano": 20_000, "nano": 2_000_000},
                         {"dimension": "tool:web_search", "quantity": 3, "unit_nano": 10_000_000,
                          "nano": 30_000_000}],
               "tier": "priority", "long_context": True},
)


@pytest.fixture
def used(admin: RealAdmin, ann: Made, laptop: dict) -> Made:
    """Ann's key served two requests: one with no breakdown recorded (as rows settled before
    breakdowns were kept), then one billed line by line."""
    settle(admin, ann.id, laptop["id"], f"req_plain_{ann.id}", 5_000_000, USAGE)
    settle(admin, ann.id, laptop["id"], f"req_billed_{ann.id}", 1_100_000_000, BILLED)
    return ann


def test_usage_default_limit(admin: RealAdmin, used: Made) -> None:
    run = gatewayctl(admin, "usage", used.id)
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", f"/admin/v1/accounts/{used.id}/usage")
    assert admin.last.query == {"limit": ["50"]}
    assert "gpt-4.1" in run.stdout and "$0.004700" in run.stdout


def test_usage_key_and_limit(admin: RealAdmin, used: Made, laptop: dict) -> None:
    run = gatewayctl(admin, "usage", used.id, "--key", laptop["id"], "--limit", "1", "--json")
    assert run.exit_code == 0, run.stderr
    assert admin.last.query == {"key": [laptop["id"]], "limit": ["1"]}
    [row] = one_json(run)  # the newest
    assert (row["request_id"], row["key_id"], row["cost_nano"], row["hold_nano"]) == (
        f"req_billed_{used.id}", laptop["id"], BILLED.cost_nano, 1_100_000_000)
    nobody = gatewayctl(admin, "usage", used.id, "--key", "key_nobody", "--json")
    assert nobody.exit_code == 1 and nobody.stderr == "gatewayctl: no key 'key_nobody'\n"


def test_usage_csv_writes_booleans_as_jsonl_and_the_console_do(admin: RealAdmin, used: Made) -> None:
    run = gatewayctl(admin, "usage", used.id, "--csv")
    assert run.exit_code == 0, run.stderr
    rows = {row["request_id"]: row for row in csv.DictReader(io.StringIO(run.stdout))}
    plain = rows[f"req_plain_{used.id}"]
    assert plain["stream"] == "true" and plain["cost_usd"] == "0.004700"
    jsonl = gatewayctl(admin, "usage", used.id, "--jsonl")
    assert '"stream": true' in jsonl.stdout


def test_usage_rows_carry_the_hold_and_the_breakdown(admin: RealAdmin, used: Made) -> None:
    billed, plain = one_json(gatewayctl(admin, "usage", used.id, "--json"))  # newest first, as the API sends
    assert billed["breakdown"] == BILLED.breakdown and plain.get("breakdown") is None
    assert (billed["hold_nano"], plain["hold_nano"]) == (1_100_000_000, 5_000_000)
    table = gatewayctl(admin, "usage", used.id)
    assert table.exit_code == 0, table.stderr
    assert "web_search x3 $0.030000, tier priority, long context" in table.stdout
    assert "$1.100000" in table.stdout  # held
    lines = gatewayctl(admin, "usage", used.id, "--breakdown")
    assert lines.exit_code == 0, lines.stderr
    assert "input: 250,000 x $0.00000412 = $1.030000" in lines.stdout
    assert "web_search: 3 x $0.010000 = $0.030000" in lines.stdout
    assert "service tier priority rates" in lines.stdout and "long-context rates" in lines.stdout
    assert "no breakdown recorded" in lines.stdout  # the older row
    assert gatewayctl(admin, "usage", used.id, "--breakdown", "--json").exit_code == 2


def test_usage_csv_has_a_column_per_dimension_that_adds_up_to_the_cost(admin: RealAdmin, used: Made) -> None:
    from gatewayd.billing.breakdown import CSV_COLUMNS, TOKEN_DIMENSIONS

    run = gatewayctl(admin, "usage", used.id, "--csv")
    assert run.exit_code == 0, run.stderr
    reader = csv.DictReader(io.StringIO(run.stdout))
    assert reader.fieldnames is not None and reader.fieldnames[-len(CSV_COLUMNS):] == list(CSV_COLUMNS)
    billed, older = list(reader)
    assert (billed["hold_nano"], billed["input_nano"], billed["output_nano"], billed["tools_nano"]) == (
        "1100000000", "1030000000", "2000000", "30000000")
    assert (billed["tool_calls"], billed["tier"], billed["long_context"]) == ("web_search=3", "priority", "true")
    assert billed["cached_input_nano"] == "0"
    parts = sum(int(billed[f"{d}_nano"]) for d in TOKEN_DIMENSIONS) + int(billed["tools_nano"])
    assert parts == int(billed["cost_nano"])
    assert older["hold_nano"] == "5000000"  # a row settled with no breakdown: its hold, and nothing else
    assert all(older[c] == "" for c in CSV_COLUMNS if c != "hold_nano")
    jsonl = gatewayctl(admin, "usage", used.id, "--jsonl")
    assert json.loads(jsonl.stdout.splitlines()[0])["breakdown"] == BILLED.breakdown


def test_usage_limit_must_be_positive(admin: RealAdmin) -> None:
    run = gatewayctl(admin, "usage", "acct", "--limit", "0")
    assert run.exit_code == 2
    assert admin.requests == []


def test_audit_ok(admin: RealAdmin, used: Made) -> None:
    run = gatewayctl(admin, "audit")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", "/admin/v1/audit")
    assert "audit ok" in run.stdout
    audit = one_json(ok(admin, "audit", "--json"))
    [mine] = [a for a in audit["accounts"] if a["account_id"] == used.id]
    assert mine["balance_nano"] == mine["expected_balance_nano"] == 10_500_000_000 - USAGE.cost_nano - BILLED.cost_nano


def _tamper_credit(admin: RealAdmin, account_id: str, by: int) -> None:
    async def tamper(directory, store):
        await store.write(lambda db: db.execute(  # a broken row, as a bug would leave it
            "UPDATE accounts SET credit_nano = credit_nano + ? WHERE id = ?", (by, account_id)))

    admin.call(tamper)


def test_audit_not_ok_prints_then_exits_1(fresh_admin: RealAdmin) -> None:
    bob = make_account(fresh_admin, "1")
    _tamper_credit(fresh_admin, bob.id, 1_000_000_000)
    run = gatewayctl(fresh_admin, "audit")
    assert run.exit_code == 1
    out = " ".join(run.stdout.split())  # rich wraps to the terminal's width
    assert "audit FAILED" in out and bob.email in out
    assert "stored credit 2000000000 != payments - charges 1000000000" in out


def test_audit_not_ok_json_exits_1(fresh_admin: RealAdmin) -> None:
    bob = make_account(fresh_admin, "1")
    _tamper_credit(fresh_admin, bob.id, 1)
    run = gatewayctl(fresh_admin, "audit", "--json")
    assert run.exit_code == 1
    audit = one_json(run)
    assert audit["ok"] is False and [a["ok"] for a in audit["accounts"]] == [False]


def test_audit_warnings_are_listed_and_exit_0(fresh_admin: RealAdmin) -> None:
    ann = make_account(fresh_admin, "1")
    key = make_key(fresh_admin, ann)
    # the answer cost 400 nano more than all the account had: within the hold's tolerance
    settle(fresh_admin, ann.id, key["id"], "req_over", 1_000_000_000,
           Settlement("ok", 200, output_tokens=5, cost_nano=1_000_000_400))
    run = gatewayctl(fresh_admin, "audit")
    assert run.exit_code == 0, run.stderr
    out = " ".join(run.stdout.split())
    assert "balance below zero by 400" in out and ann.email in out
    assert "audit ok" in out and "1 warning (listed above)" in out


def test_audit_ledger_wide_problem_prints_and_exits_1(fresh_admin: RealAdmin) -> None:
    ann = make_account(fresh_admin, "1")
    key = make_key(fresh_admin, ann)
    settle(fresh_admin, ann.id, key["id"], "req_1", 1_000_000, Settlement("ok", 200, cost_nano=0))

    async def duplicate(directory, store):  # a second row for the same request, charging nothing
        await store.write(lambda db: db.execute(
            "INSERT INTO usage (request_id, created_at, account_id, key_id, model, endpoint, stream, status,"
            " http_status) SELECT request_id, created_at, account_id, key_id, model, endpoint, stream, status,"
            " http_status FROM usage WHERE request_id = 'req_1'"))

    fresh_admin.call(duplicate)
    run = gatewayctl(fresh_admin, "audit")
    assert run.exit_code == 1
    out = " ".join(run.stdout.split())
    assert "request req_1 has 2 usage rows" in out
    assert "audit FAILED" in out and "1 ledger-wide problem" in out


# --- reaching the daemon, and its errors ----------------------------------------------


def assert_one_line_error(run: Run, expected: str) -> None:
    assert run.exit_code == 1
    assert run.stdout == ""
    assert run.stderr.count("\n") == 1 and run.stderr.endswith("\n")
    assert run.stderr.strip() == expected
    assert "Traceback" not in run.stderr
    assert isinstance(run.exception, SystemExit)


def test_missing_socket(short_dir: str) -> None:
    path = os.path.join(short_dir, "nothing.sock")
    run = gatewayctl(None, "account", "list", "--socket", path)
    assert_one_line_error(
        run, f"gatewayctl: cannot reach gatewayd admin socket at {path} (no such file): "
        "is gatewayd running?")


def test_refused_socket(short_dir: str) -> None:
    path = os.path.join(short_dir, "stale.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)  # a socket file nobody listens on, as after a crash
    stale.close()
    run = gatewayctl(None, "key", "show", "key_1", "--json", env={"GATEWAY_ADMIN_SOCKET": path})
    assert_one_line_error(
        run, f"gatewayctl: cannot reach gatewayd admin socket at {path} (connection refused): "
        "is gatewayd running?")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_socket_without_permission(admin: RealAdmin) -> None:
    os.chmod(admin.socket_path, 0)
    run = gatewayctl(admin, "account", "list")
    assert_one_line_error(
        run, f"gatewayctl: cannot reach gatewayd admin socket at {admin.socket_path} "
        "(permission denied): is gatewayd running?")


def test_permission_denied_is_named() -> None:
    """The reason under httpx's wrappers, for when the test above is skipped (running as root)."""
    import errno

    import httpx

    from gatewayctl.client import _connect_reason

    error = httpx.ConnectError("[Errno 13] Permission denied")
    error.__cause__ = PermissionError(errno.EACCES, "Permission denied")
    assert _connect_reason(error) == "permission denied"


def test_default_socket_path_is_var_admin_sock(short_dir: str, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    monkeypatch.chdir(short_dir)
    run = gatewayctl(None, "balance", "acct")
    assert "at var/admin.sock (no such file)" in run.stderr
    assert run.exit_code == 1


def test_socket_option_wins_over_environment(admin: RealAdmin, ann: Made, short_dir: str) -> None:
    run = gatewayctl(None, "balance", ann.id, "--socket", admin.socket_path,
                     env={"GATEWAY_ADMIN_SOCKET": os.path.join(short_dir, "elsewhere.sock")})
    assert run.exit_code == 0, run.stderr
    assert len(admin.requests) == 1


def test_api_error_message_and_exit_1(admin: RealAdmin) -> None:
    run = gatewayctl(admin, "account", "show", "nobody@example.com", "--json")
    assert (admin.last.method, admin.last.path) == ("GET", "/admin/v1/accounts/nobody%40example.com")
    message = run.stderr.strip()
    assert_one_line_error(run, message)
    assert message.startswith("gatewayctl: ") and "nobody@example.com" in message


def test_api_error_on_a_write(admin: RealAdmin, ann: Made) -> None:
    run = gatewayctl(admin, "account", "create", ann.email)
    message = run.stderr.strip()
    assert_one_line_error(run, message)
    assert message.startswith("gatewayctl: ") and ann.email in message
    assert [a for a in one_json(ok(admin, "account", "list", "--json")) if a["email"] == ann.email] == [ann.account]


def test_answer_that_is_not_json(short_dir: str) -> None:
    """A 500 whose body is an HTML page: the real API never sends it (its errors are JSON)."""
    broken = BrokenDaemon(os.path.join(short_dir, "broken.sock"), 500, b"<html>Internal Server Error</html>")
    broken.thread.start()
    try:
        run = gatewayctl(broken, "audit")
    finally:
        broken.server.shutdown()
        broken.server.server_close()
    assert broken.requests == 1
    assert_one_line_error(
        run, "gatewayctl: gatewayd answered HTTP 500 with a body that is not JSON")


@pytest.mark.live
def test_python_dash_m_unreachable_has_no_traceback(short_dir: str) -> None:
    """A real process: the operator sees one line, and the exit status is 1."""
    path = os.path.join(short_dir, "gone.sock")
    proc = subprocess.run(
        [sys.executable, "-m", "gatewayctl", "usage", "acct", "--socket", path],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "GATEWAY_ADMIN_SOCKET": ""},
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr == (
        f"gatewayctl: cannot reach gatewayd admin socket at {path} (no such file): "
        "is gatewayd running?\n")


@pytest.mark.live
def test_python_dash_m_json_against_the_real_api(admin: RealAdmin, ann: Made) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gatewayctl", "account", "pay", ann.id, "10.50", "--json"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "GATEWAY_ADMIN_SOCKET": admin.socket_path},
    )
    assert proc.returncode == 0, proc.stderr
    paid = json.loads(proc.stdout)
    assert paid["account"]["balance_nano"] == 21_000_000_000 and paid["payment"]["amount_nano"] == 10_500_000_000
    assert admin.last.body == {"amount_nano": 10_500_000_000}


# --- tables ----------------------------------------------------------------------------


def test_narrow_terminal_shows_rows_as_blocks_never_cut() -> None:
    """A usage table wider than the terminal turns into field/value blocks, amounts whole."""
    import io

    from rich.console import Console

    from gatewayctl import render

    out = io.StringIO()
    console = Console(file=out, width=60, force_terminal=True, color_system=None)
    row = {"request_id": "req_9", "created_at": "2026-11-04T10:00:00Z", "key_id": "key_1", "model": "gpt-4.1",
           "endpoint": "/v1/chat/completions", "stream": True, "status": 200, "input_tokens": 1200,
           "output_tokens": 300, "cached_tokens": 1000, "cache_write_tokens": 0, "cost_nano": 4_700_000}
    render.show_list(console, [row, {**row, "request_id": "req_8"}],
                     render.USAGE_COLUMNS, empty="No usage.")
    text = out.getvalue()
    assert "1/2" in text and "2/2" in text
    assert "$0.004700" in text and "/v1/chat/completions" in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 60


def test_names_from_the_database_are_not_rich_markup(admin: RealAdmin, ann: Made) -> None:
    ok(admin, "account", "update", ann.id, "--name", "[bold]x[/bold]")
    run = gatewayctl(admin, "account", "show", ann.id)
    assert run.exit_code == 0, run.stderr
    assert "[bold]x[/bold]" in run.stdout


# --- --socket and --json before or after the command -----------------------------------


@pytest.mark.parametrize(
    "where",
    [
        lambda ref: ["--json", "key", "list", ref],
        lambda ref: ["key", "--json", "list", ref],
        lambda ref: ["key", "list", ref, "--json"],
        lambda ref: ["--json", "key", "list", ref, "--json"],
    ],
)
def test_json_before_or_after_the_command(admin: RealAdmin, ann: Made, laptop: dict, where) -> None:
    run = gatewayctl(admin, *where(ann.email))
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", f"/admin/v1/accounts/{quote(ann.email, safe='')}/keys")
    assert [key["id"] for key in one_json(run)] == [laptop["id"]]


def test_without_json_anywhere_a_table(admin: RealAdmin, ann: Made, laptop: dict) -> None:
    run = gatewayctl(admin, "key", "list", ann.id)
    assert run.exit_code == 0, run.stderr
    assert "laptop" in run.stdout
    with pytest.raises(ValueError):
        json.loads(run.stdout)


@pytest.mark.parametrize(
    "where",
    [
        lambda path, ref: ["--socket", path, "key", "list", ref],
        lambda path, ref: ["key", "--socket", path, "list", ref],
        lambda path, ref: ["--socket", path, "--json", "key", "list", ref],
        lambda path, ref: ["--json", "balance", ref, "--socket", path],
    ],
)
def test_socket_before_or_after_the_command(admin: RealAdmin, ann: Made, short_dir: str, where) -> None:
    elsewhere = os.path.join(short_dir, "elsewhere.sock")
    run = gatewayctl(None, *where(admin.socket_path, ann.id), env={"GATEWAY_ADMIN_SOCKET": elsewhere})
    assert run.exit_code == 0, run.stderr
    assert len(admin.requests) == 1


@pytest.mark.parametrize(
    "args",
    [
        lambda good, bad, ref: ["--socket", bad, "balance", ref, "--socket", good],
        lambda good, bad, ref: ["--socket", bad, "account", "--socket", good, "list"],
    ],
)
def test_the_socket_given_last_wins(admin: RealAdmin, ann: Made, short_dir: str, args) -> None:
    bad = os.path.join(short_dir, "bad.sock")
    run = gatewayctl(None, *args(admin.socket_path, bad, ann.id))
    assert run.exit_code == 0, run.stderr
    assert len(admin.requests) == 1
    run = gatewayctl(None, *args(bad, admin.socket_path, ann.id))
    assert_one_line_error(
        run, f"gatewayctl: cannot reach gatewayd admin socket at {bad} (no such file): "
        "is gatewayd running?")


@pytest.mark.live
def test_options_before_the_command_in_a_real_process(admin: RealAdmin, ann: Made, laptop: dict) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gatewayctl", "--socket", admin.socket_path, "--json",
         "key", "list", ann.email],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "GATEWAY_ADMIN_SOCKET": ""},
    )
    assert proc.returncode == 0, proc.stderr
    assert [key["id"] for key in json.loads(proc.stdout)] == [laptop["id"]]


def _command_paths() -> list[list[str]]:
    import typer.main

    def walk(command: Any, path: list[str]) -> Iterator[list[str]]:
        yield path
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p) or "gatewayctl")
def test_help_cites_only_what_a_user_has(path: list[str]) -> None:
    """--help may point at commands and say what it means; never at files a user installing the
    wheel does not have (docs/ is not in it) nor at the developers' design notes."""
    run = gatewayctl(None, *path, "--help")
    assert run.exit_code == 0, run.stderr
    text = flatten(run.stdout)
    assert "Usage: gatewayctl" in text
    assert not re.search(r"design\.md|section \d|spec\b|issue \d", text, re.IGNORECASE), text
    assert not re.search(r"docs/|\.md\b", text), text
    assert "--socket" in text and "--json" in text  # accepted at every level
