"""gatewayctl against a stand-in admin server on a real Unix socket.

The stand-in (:class:`StandInAdmin`) is NOT gatewayd: it is a few lines of stdlib
HTTP that record each request and answer canned, contract-shaped JSON (design.md
section 3). It lets these tests pin down exactly what the CLI sends (method, path,
JSON body, money in nano-dollars) and how it prints and exits, including answers the
real API never gives (a 500 page, a body that is not JSON). The canned documents are
checked against the real admin API's answers in tests/test_gatewayctl_real_admin.py,
which also runs every command group against the real API in-process.
"""

from __future__ import annotations

import copy
import csv
import http.server
import io
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
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs
import pytest
from typer.testing import CliRunner

from gatewayctl.main import app

ACCOUNT = {
    "id": "acc_1",
    "email": "ann@example.com",
    "name": "Ann",
    "timezone": "Europe/Berlin",
    "balance_nano": 10_500_000_000,
    "balance_usd": "10.5",
    "held_nano": 250_000,
    "total_paid_nano": 10_500_000_000,
    "has_password": True,
    "max_concurrent": None,
    "groups": ["default"],
    "embedding_models": ["text-embedding-3-small"],
    "created_at": "2026-11-01T10:00:00Z",
}
KEY = {
    "id": "key_1",
    "account_id": "acc_1",
    "name": "laptop",
    "state": "enabled",
    "secret_hint": "sk-test...GHIJ",
    "spend_limit_nano": 5_000_000_000,
    "spent_nano": 1_234_567,
    "held_nano": 0,
    "max_concurrent": None,
    "expires_on": "2027-01-31",
    "models": ["gpt-4.1", "claude-sonnet-4-5"],
    "allow_ips": ["10.0.0.0/8"],
    "group": None,
    "created_at": "2026-11-02T10:00:00Z",
    "last_used_at": None,
}
SECRET = "sk-test-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"
PAYMENT = {
    "id": "pay_1",
    "account_id": "acc_1",
    "amount_nano": 10_500_000_000,
    "note": "invoice 7",
    "created_at": "2026-11-03T10:00:00Z",
}
BALANCE = {"balance_nano": 10_500_000_000, "held_nano": 250_000, "total_paid_nano": 10_500_000_000}
USAGE_ROW = {
    "request_id": "req_9",
    "created_at": "2026-11-04T10:00:00Z",
    "key_id": "key_1",
    "model": "gpt-4.1",
    "endpoint": "/v1/chat/completions",
    "stream": True,
    "status": 200,
    "input_tokens": 1200,
    "output_tokens": 300,
    "cached_tokens": 1000,
    "cache_write_tokens": 0,
    "cost_nano": 4_700_000,
}
AUDIT_OK = {
    "ok": True,
    "hold_tolerance": "1/10",
    "problems": [],
    "accounts": [
        {"account_id": "acc_1", "email": "ann@example.com", "balance_nano": 10_500_000_000,
         "expected_balance_nano": 10_500_000_000, "held_nano": 0, "open_holds_nano": 0,
         "lowest_allowed_balance_nano": -1_050_000_000, "ok": True, "problems": [], "warnings": []},
    ],
    "keys": [{"key_id": "key_1", "spent_nano": 1_234_567, "held_nano": 0, "spend_limit_nano": 5_000_000_000,
              "highest_allowed_spent_nano": 5_500_000_000, "ok": True, "problems": [], "warnings": []}],
}
AUDIT_BAD = {
    "ok": False,
    "hold_tolerance": "1/10",
    "problems": [],
    "accounts": [
        {"account_id": "acc_2", "email": "bob@example.com", "balance_nano": 2_000_000_000,
         "expected_balance_nano": 1_000_000_000, "held_nano": 0, "open_holds_nano": 0,
         "lowest_allowed_balance_nano": 0, "ok": False,
         "problems": ["balance differs from payments - charges - open holds"], "warnings": []},
    ],
    "keys": [],
}


def canned(method: str, path: str) -> tuple[int, Any]:
    """The stand-in's default answer for each contract route."""
    routes: list[tuple[str, str, Any]] = [
        ("POST", r"/admin/v1/accounts", ACCOUNT),
        ("GET", r"/admin/v1/accounts", {"data": [ACCOUNT]}),
        ("GET|PATCH", r"/admin/v1/accounts/[^/]+", ACCOUNT),
        ("PUT", r"/admin/v1/accounts/[^/]+/(password|groups|embeddings/[^/]+)", ACCOUNT),
        ("POST", r"/admin/v1/accounts/[^/]+/payments", {"account": ACCOUNT, "payment": PAYMENT}),
        ("GET", r"/admin/v1/accounts/[^/]+/payments", {"data": [PAYMENT]}),
        ("POST", r"/admin/v1/accounts/[^/]+/keys", {**KEY, "secret": SECRET}),
        ("GET", r"/admin/v1/accounts/[^/]+/keys", {"data": [KEY]}),
        ("GET|PATCH", r"/admin/v1/keys/[^/]+", KEY),
        ("POST", r"/admin/v1/keys/[^/]+/(disable|enable|revoke)", KEY),
        ("GET", r"/admin/v1/accounts/[^/]+/balance", BALANCE),
        ("GET", r"/admin/v1/accounts/[^/]+/usage", {"data": [USAGE_ROW]}),
        ("GET", r"/admin/v1/audit", AUDIT_OK),
    ]
    for methods, pattern, body in routes:
        if re.fullmatch(methods, method) and re.fullmatch(pattern, path):
            return 200, copy.deepcopy(body)
    return 404, {"error": {"message": f"no route {method} {path}", "code": "not_found"}}


@attrs.define
class Recorded:
    method: str
    path: str  # raw, still percent-encoded, without the query
    query: dict[str, list[str]]
    body: Any  # decoded JSON, or None when no body was sent


class StandInAdmin:
    """Stand-in for gatewayd's admin API (not the daemon): records requests, answers canned JSON.

    ``answer(method, path, status, body)`` overrides one route's answer; ``body`` may be
    ``bytes`` to send something that is not JSON.
    """

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.requests: list[Recorded] = []
        self.overrides: dict[tuple[str, str], tuple[int, Any]] = {}
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                target = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                stand_in.requests.append(Recorded(
                    self.command, target.path, parse_qs(target.query),
                    json.loads(raw) if raw else None,
                ))
                status, body = stand_in.overrides.get(
                    (self.command, target.path), canned(self.command, target.path))
                payload = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet; and a Unix peer has no address for the default log line

        self.server = socketserver.ThreadingUnixStreamServer(socket_path, Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def answer(self, method: str, path: str, status: int, body: Any) -> None:
        self.overrides[(method, path)] = (status, body)

    @property
    def last(self) -> Recorded:
        assert self.requests, "the CLI sent no request"
        return self.requests[-1]


@pytest.fixture
def short_dir() -> Iterator[str]:
    """A short directory: Unix socket paths are limited to about 100 bytes."""
    path = tempfile.mkdtemp(prefix="gwctl-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def admin(short_dir: str) -> Iterator[StandInAdmin]:
    stand_in = StandInAdmin(os.path.join(short_dir, "admin.sock"))
    stand_in.thread.start()
    yield stand_in
    stand_in.server.shutdown()
    stand_in.server.server_close()


runner = CliRunner()


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


def gatewayctl(admin: StandInAdmin | None, *args: str, input: str | None = None,
               env: dict[str, str | None] | None = None) -> Run:
    """Run the CLI in-process, as the operator types it, with the socket given by environment."""
    environment: dict[str, str | None] = {
        "GATEWAY_ADMIN_SOCKET": admin.socket_path if admin else None,
        "COLUMNS": "80",  # not a terminal: tables still print whole, one line per row
    }
    environment.update(env or {})
    result = runner.invoke(app, list(args), input=input, env=environment)
    return Run(result.exit_code, result.stdout, result.stderr, result.exception)


def one_json(run: Run) -> Any:
    """stdout holds exactly one JSON document and nothing else."""
    return json.loads(run.stdout)


# --- accounts ---------------------------------------------------------------------------


def test_account_create_sends_fields_and_password_from_stdin(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "account", "create", "ann@example.com", "--name", "Ann",
                     "--timezone", "Europe/Berlin", "--password-stdin", input="s3cret pass\n")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("POST", "/admin/v1/accounts")
    assert admin.last.body == {"email": "ann@example.com", "name": "Ann",
                               "timezone": "Europe/Berlin", "password": "s3cret pass"}
    assert "ann@example.com" in run.stdout
    assert "$10.500000" in run.stdout  # money shown as USD, via format_usd
    assert "s3cret" not in run.stdout


def test_account_create_minimal_body(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "account", "create", "ann@example.com")
    assert run.exit_code == 0, run.stderr
    assert admin.last.body == {"email": "ann@example.com"}


def test_account_create_refuses_unknown_timezone_locally(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "account", "create", "ann@example.com", "--timezone", "Mars/Olympus")
    assert run.exit_code == 2
    assert "'Mars/Olympus' is not an IANA time zone" in run.err
    assert admin.requests == []


def test_account_list_json_is_the_data_array(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "account", "list", "--json")
    assert run.exit_code == 0, run.stderr
    assert one_json(run) == [ACCOUNT]
    assert (admin.last.method, admin.last.path) == ("GET", "/admin/v1/accounts")


def test_account_list_table(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "account", "list")
    assert run.exit_code == 0, run.stderr
    assert "ann@example.com" in run.stdout and "$10.500000" in run.stdout


def test_account_show_quotes_email_in_path(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "account", "show", "ann@example.com", "--json")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", "/admin/v1/accounts/ann%40example.com")
    assert one_json(run) == ACCOUNT


def test_account_update_sends_only_given_fields(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "account", "update", "acc_1", "--timezone", "America/New_York")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("PATCH", "/admin/v1/accounts/acc_1")
    assert admin.last.body == {"timezone": "America/New_York"}


def test_account_update_with_nothing_to_change_is_a_usage_error(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "account", "update", "acc_1")
    assert run.exit_code == 2
    assert "nothing to change" in run.err
    assert admin.requests == []


def test_account_password_reads_stdin(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "account", "password", "ann@example.com", input="hunter2\n")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == (
        "PUT", "/admin/v1/accounts/ann%40example.com/password")
    assert admin.last.body == {"password": "hunter2"}
    assert "hunter2" not in run.stdout


def test_account_password_refuses_empty_stdin(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "account", "password", "acc_1", input="")
    assert run.exit_code == 2
    assert "no password on standard input" in run.err
    assert admin.requests == []


def test_pay_converts_dollars_exactly(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "account", "pay", "acct", "10.50", "--note", "invoice 7")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("POST", "/admin/v1/accounts/acct/payments")
    assert admin.last.body == {"amount_nano": 10_500_000_000, "note": "invoice 7"}
    assert type(admin.last.body["amount_nano"]) is int
    assert "$10.500000" in run.stdout


def test_pay_json_is_the_api_object(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "account", "pay", "acct", "0.000000001", "--json")
    assert run.exit_code == 0, run.stderr
    assert admin.last.body == {"amount_nano": 1}
    assert one_json(run) == {"account": ACCOUNT, "payment": PAYMENT}


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
def test_pay_refuses_bad_amounts(admin: StandInAdmin, amount: str, why: str) -> None:
    run = gatewayctl(admin, "account", "pay", "acct", "--", amount)
    assert run.exit_code == 2
    assert "AMOUNT_USD" in run.err and why in run.err
    assert admin.requests == []


def test_payments_list(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "account", "payments", "acct", "--json")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", "/admin/v1/accounts/acct/payments")
    assert one_json(run) == [PAYMENT]


@pytest.mark.parametrize(
    ("arg", "groups"), [("g1,g2", ["g1", "g2"]), (" g1 , g2,g1 ", ["g1", "g2"]), ("", [])]
)
def test_groups_replaces_the_list(admin: StandInAdmin, arg: str, groups: list[str]) -> None:
    run = gatewayctl(admin, "account", "groups", "acct", arg)
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("PUT", "/admin/v1/accounts/acct/groups")
    assert admin.last.body == {"groups": groups}


@pytest.mark.parametrize(("flag", "enabled"), [("--enable", True), ("--disable", False)])
def test_embeddings_toggle(admin: StandInAdmin, flag: str, enabled: bool) -> None:
    run = gatewayctl(admin, "account", "embeddings", "ann@example.com",
                     "text-embedding-3-small", flag)
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == (
        "PUT", "/admin/v1/accounts/ann%40example.com/embeddings/text-embedding-3-small")
    assert admin.last.body == {"enabled": enabled}


def test_embeddings_needs_enable_or_disable(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "account", "embeddings", "acct", "text-embedding-3-small")
    assert run.exit_code == 2
    assert "--enable" in run.err
    assert admin.requests == []


# --- keys -------------------------------------------------------------------------------


def test_key_create_sends_every_option(admin: StandInAdmin) -> None:
    run = gatewayctl(
        admin, "key", "create", "ann@example.com", "--name", "laptop",
        "--spend-limit", "5", "--expires", "2027-01-31", "--models", "gpt-4.1,claude-sonnet-4-5",
        "--allow-ip", "10.0.0.0/8", "--allow-ip", "2001:db8::1", "--group", "cheap",
    )
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == (
        "POST", "/admin/v1/accounts/ann%40example.com/keys")
    assert admin.last.body == {
        "name": "laptop",
        "spend_limit_nano": 5_000_000_000,
        "expires_on": "2027-01-31",
        "models": ["gpt-4.1", "claude-sonnet-4-5"],
        "allow_ips": ["10.0.0.0/8", "2001:db8::1"],
        "group": "cheap",
    }
    # The secret is printed whole on a line of its own, with the shown-once warning.
    assert SECRET in run.stdout.splitlines()
    assert "shown once" in run.stdout


def test_key_create_minimal_and_json_includes_secret(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "key", "create", "acct", "--name", "ci", "--json")
    assert run.exit_code == 0, run.stderr
    assert admin.last.body == {"name": "ci"}
    assert one_json(run) == {**KEY, "secret": SECRET}


def test_key_create_requires_a_name(admin: StandInAdmin) -> None:
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
    ],
)
def test_key_create_refuses_bad_values_locally(
    admin: StandInAdmin, args: list[str], message: str
) -> None:
    run = gatewayctl(admin, "key", "create", "acct", "--name", "k", *args)
    assert run.exit_code == 2
    assert message in run.err
    assert "Traceback" not in run.stderr
    assert admin.requests == []


def test_key_list_with_json_after_the_command(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "key", "list", "ann@example.com", "--json")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == (
        "GET", "/admin/v1/accounts/ann%40example.com/keys")
    assert one_json(run) == [KEY]


def test_key_list_table(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "key", "list", "acct")
    assert run.exit_code == 0, run.stderr
    assert "laptop" in run.stdout and "$5.000000" in run.stdout and "enabled" in run.stdout


def test_key_show(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "key", "show", "key_1")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", "/admin/v1/keys/key_1")
    assert "$0.001235" in run.stdout  # spent 1_234_567 nano, format_usd's six places
    assert "never" in run.stdout  # last_used_at null


@pytest.mark.parametrize(
    ("args", "body"),
    [
        (["--no-spend-limit"], {"spend_limit_nano": None}),
        (["--spend-limit", "2.5"], {"spend_limit_nano": 2_500_000_000}),
        (["--spend-limit", "0"], {"spend_limit_nano": 0}),
        (["--all-models"], {"models": None}),
        (["--models", "a,b"], {"models": ["a", "b"]}),
        (["--any-ip"], {"allow_ips": None}),
        (["--allow-ip", "192.0.2.0/24", "--allow-ip", "198.51.100.7"],
         {"allow_ips": ["192.0.2.0/24", "198.51.100.7"]}),
        (["--no-expiry"], {"expires_on": None}),
        (["--expires", "2028-02-29"], {"expires_on": "2028-02-29"}),
        (["--no-group"], {"group": None}),
        (["--group", "g"], {"group": "g"}),
        (["--name", "renamed", "--no-spend-limit", "--all-models"],
         {"name": "renamed", "spend_limit_nano": None, "models": None}),
    ],
)
def test_key_update_sends_only_given_fields(
    admin: StandInAdmin, args: list[str], body: dict[str, Any]
) -> None:
    run = gatewayctl(admin, "key", "update", "key_1", *args, "--json")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("PATCH", "/admin/v1/keys/key_1")
    assert admin.last.body == body
    assert one_json(run) == KEY


@pytest.mark.parametrize(
    "args",
    [
        ["--spend-limit", "1", "--no-spend-limit"],
        ["--expires", "2027-01-01", "--no-expiry"],
        ["--models", "a", "--all-models"],
        ["--allow-ip", "10.0.0.1", "--any-ip"],
        ["--group", "g", "--no-group"],
    ],
)
def test_key_update_refuses_contradictions(admin: StandInAdmin, args: list[str]) -> None:
    run = gatewayctl(admin, "key", "update", "key_1", *args)
    assert run.exit_code == 2
    assert "these cannot be used together" in run.err
    assert admin.requests == []


def test_key_update_with_nothing_to_change_is_a_usage_error(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "key", "update", "key_1")
    assert run.exit_code == 2
    assert "nothing to change" in run.err
    assert admin.requests == []


@pytest.mark.parametrize("action", ["disable", "enable", "revoke"])
def test_key_state_changes(admin: StandInAdmin, action: str) -> None:
    run = gatewayctl(admin, "key", action, "key_1", "--json")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("POST", f"/admin/v1/keys/key_1/{action}")
    assert one_json(run) == KEY


# --- balance, usage, audit -------------------------------------------------------------


def test_balance(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "balance", "ann@example.com")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == (
        "GET", "/admin/v1/accounts/ann%40example.com/balance")
    assert "$10.500000" in run.stdout and "$0.000250" in run.stdout
    run = gatewayctl(admin, "balance", "acct", "--json")
    assert one_json(run) == BALANCE


def test_usage_default_limit(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "usage", "acct")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", "/admin/v1/accounts/acct/usage")
    assert admin.last.query == {"limit": ["50"]}
    assert "gpt-4.1" in run.stdout and "$0.004700" in run.stdout


def test_usage_key_and_limit(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "usage", "acct", "--key", "key_1", "--limit", "5", "--json")
    assert run.exit_code == 0, run.stderr
    assert admin.last.query == {"key": ["key_1"], "limit": ["5"]}
    assert one_json(run) == [USAGE_ROW]


def test_usage_csv_writes_booleans_as_jsonl_and_the_console_do(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "usage", "acct", "--csv")
    assert run.exit_code == 0, run.stderr
    [row] = list(csv.DictReader(io.StringIO(run.stdout)))
    assert row["stream"] == "true" and row["cost_usd"] == "0.004700"
    jsonl = gatewayctl(admin, "usage", "acct", "--jsonl")
    assert '"stream": true' in jsonl.stdout


BILLED_ROW = {
    **USAGE_ROW, "request_id": "req_10", "input_tokens": 250_000, "output_tokens": 100, "cached_tokens": 0,
    "cost_nano": 1_030_000_000 + 2_000_000 + 30_000_000, "hold_nano": 1_100_000_000,
    "breakdown": {"lines": [{"dimension": "input", "quantity": 250_000, "unit_nano": 4_120, "nano": 1_030_000_000},
                            {"dimension": "output", "quantity": 100, "unit_nano": 20_000, "nano": 2_000_000},
                            {"dimension": "tool:web_search", "quantity": 3, "unit_nano": 10_000_000,
                             "nano": 30_000_000}],
                  "tier": "priority", "long_context": True},
}


def test_usage_rows_carry_the_hold_and_the_breakdown(admin: StandInAdmin) -> None:
    admin.answer("GET", "/admin/v1/accounts/acct/usage", 200, {"data": [BILLED_ROW, USAGE_ROW]})
    assert one_json(gatewayctl(admin, "usage", "acct", "--json")) == [BILLED_ROW, USAGE_ROW]  # as the API sends
    table = gatewayctl(admin, "usage", "acct")
    assert table.exit_code == 0, table.stderr
    assert "web_search x3 $0.030000, tier priority, long context" in table.stdout
    assert "$1.100000" in table.stdout  # held
    lines = gatewayctl(admin, "usage", "acct", "--breakdown")
    assert lines.exit_code == 0, lines.stderr
    assert "input: 250,000 x $0.00000412 = $1.030000" in lines.stdout
    assert "web_search: 3 x $0.010000 = $0.030000" in lines.stdout
    assert "service tier priority rates" in lines.stdout and "long-context rates" in lines.stdout
    assert "no breakdown recorded" in lines.stdout  # the older row
    assert gatewayctl(admin, "usage", "acct", "--breakdown", "--json").exit_code == 2


def test_usage_csv_has_a_column_per_dimension_that_adds_up_to_the_cost(admin: StandInAdmin) -> None:
    from gatewayd.billing.breakdown import CSV_COLUMNS, TOKEN_DIMENSIONS

    admin.answer("GET", "/admin/v1/accounts/acct/usage", 200, {"data": [BILLED_ROW, USAGE_ROW]})
    run = gatewayctl(admin, "usage", "acct", "--csv")
    assert run.exit_code == 0, run.stderr
    reader = csv.DictReader(io.StringIO(run.stdout))
    assert reader.fieldnames[-len(CSV_COLUMNS):] == list(CSV_COLUMNS)
    billed, older = list(reader)
    assert (billed["hold_nano"], billed["input_nano"], billed["output_nano"], billed["tools_nano"]) == (
        "1100000000", "1030000000", "2000000", "30000000")
    assert (billed["tool_calls"], billed["tier"], billed["long_context"]) == ("web_search=3", "priority", "true")
    assert billed["cached_input_nano"] == "0"
    parts = sum(int(billed[f"{d}_nano"]) for d in TOKEN_DIMENSIONS) + int(billed["tools_nano"])
    assert parts == int(billed["cost_nano"])
    assert all(older[c] == "" for c in CSV_COLUMNS)  # a row settled before breakdowns were kept
    jsonl = gatewayctl(admin, "usage", "acct", "--jsonl")
    assert json.loads(jsonl.stdout.splitlines()[0])["breakdown"] == BILLED_ROW["breakdown"]


def test_usage_limit_must_be_positive(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "usage", "acct", "--limit", "0")
    assert run.exit_code == 2
    assert admin.requests == []


def test_audit_ok(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "audit")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", "/admin/v1/audit")
    assert "audit ok" in run.stdout


def test_audit_not_ok_prints_then_exits_1(admin: StandInAdmin) -> None:
    admin.answer("GET", "/admin/v1/audit", 200, AUDIT_BAD)
    run = gatewayctl(admin, "audit")
    assert run.exit_code == 1
    assert "audit FAILED" in run.stdout
    assert "bob@example.com" in run.stdout
    assert "balance differs" in run.stdout


def test_audit_warnings_are_listed_and_exit_0(admin: StandInAdmin) -> None:
    warned = {**AUDIT_OK, "problems": [], "accounts": [
        {**AUDIT_OK["accounts"][0], "balance_nano": -400, "warnings": ["balance below zero by 400 (charges exceeded"
                                                                       " their holds)"]}]}
    admin.answer("GET", "/admin/v1/audit", 200, warned)
    run = gatewayctl(admin, "audit")
    assert run.exit_code == 0, run.stderr
    out = " ".join(run.stdout.split())  # rich wraps to the terminal's width
    assert "balance below zero by 400" in out and "ann@example.com" in out
    assert "audit ok" in out and "1 warning (listed above)" in out


def test_audit_ledger_wide_problem_prints_and_exits_1(admin: StandInAdmin) -> None:
    admin.answer("GET", "/admin/v1/audit", 200, {**AUDIT_OK, "ok": False, "problems": [
        "request req_1 has 2 usage rows (one settlement, one row per request)"]})
    run = gatewayctl(admin, "audit")
    assert run.exit_code == 1
    out = " ".join(run.stdout.split())
    assert "request req_1 has 2 usage rows" in out
    assert "audit FAILED" in out and "1 ledger-wide problem" in out


def test_audit_not_ok_json_exits_1(admin: StandInAdmin) -> None:
    admin.answer("GET", "/admin/v1/audit", 200, AUDIT_BAD)
    run = gatewayctl(admin, "audit", "--json")
    assert run.exit_code == 1
    assert one_json(run) == AUDIT_BAD


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
def test_socket_without_permission(admin: StandInAdmin) -> None:
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


def test_socket_option_wins_over_environment(admin: StandInAdmin, short_dir: str) -> None:
    run = gatewayctl(None, "balance", "acct", "--socket", admin.socket_path,
                     env={"GATEWAY_ADMIN_SOCKET": os.path.join(short_dir, "elsewhere.sock")})
    assert run.exit_code == 0, run.stderr
    assert len(admin.requests) == 1


def test_api_error_message_and_exit_1(admin: StandInAdmin) -> None:
    admin.answer("GET", "/admin/v1/accounts/nobody%40example.com", 404,
                 {"error": {"message": "no account nobody@example.com", "code": "not_found"}})
    run = gatewayctl(admin, "account", "show", "nobody@example.com", "--json")
    assert_one_line_error(run, "gatewayctl: no account nobody@example.com")


def test_api_error_on_a_write(admin: StandInAdmin) -> None:
    admin.answer("POST", "/admin/v1/accounts", 409,
                 {"error": {"message": "email already in use", "code": "conflict"}})
    run = gatewayctl(admin, "account", "create", "ann@example.com")
    assert_one_line_error(run, "gatewayctl: email already in use")


def test_answer_that_is_not_json(admin: StandInAdmin) -> None:
    admin.answer("GET", "/admin/v1/audit", 500, b"<html>Internal Server Error</html>")
    run = gatewayctl(admin, "audit")
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
def test_python_dash_m_json_against_stand_in(admin: StandInAdmin) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gatewayctl", "account", "pay", "acct", "10.50", "--json"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "GATEWAY_ADMIN_SOCKET": admin.socket_path},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"account": ACCOUNT, "payment": PAYMENT}
    assert admin.last.body == {"amount_nano": 10_500_000_000}


# --- tables ----------------------------------------------------------------------------


def test_narrow_terminal_shows_rows_as_blocks_never_cut() -> None:
    """A usage table wider than the terminal turns into field/value blocks, amounts whole."""
    import io

    from rich.console import Console

    from gatewayctl import render

    out = io.StringIO()
    console = Console(file=out, width=60, force_terminal=True, color_system=None)
    render.show_list(console, [USAGE_ROW, {**USAGE_ROW, "request_id": "req_8"}],
                     render.USAGE_COLUMNS, empty="No usage.")
    text = out.getvalue()
    assert "1/2" in text and "2/2" in text
    assert "$0.004700" in text and "/v1/chat/completions" in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 60


def test_names_from_the_database_are_not_rich_markup(admin: StandInAdmin) -> None:
    admin.answer("GET", "/admin/v1/accounts/acct", 200, {**ACCOUNT, "name": "[bold]x[/bold]"})
    run = gatewayctl(admin, "account", "show", "acct")
    assert run.exit_code == 0, run.stderr
    assert "[bold]x[/bold]" in run.stdout


# --- --socket and --json before or after the command -----------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--json", "key", "list", "ann@example.com"],
        ["key", "--json", "list", "ann@example.com"],
        ["key", "list", "ann@example.com", "--json"],
        ["--json", "key", "list", "ann@example.com", "--json"],
    ],
)
def test_json_before_or_after_the_command(admin: StandInAdmin, args: list[str]) -> None:
    run = gatewayctl(admin, *args)
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == (
        "GET", "/admin/v1/accounts/ann%40example.com/keys")
    assert one_json(run) == [KEY]


def test_without_json_anywhere_a_table(admin: StandInAdmin) -> None:
    run = gatewayctl(admin, "key", "list", "acct")
    assert run.exit_code == 0, run.stderr
    with pytest.raises(ValueError):
        json.loads(run.stdout)


@pytest.mark.parametrize(
    "where",
    [
        lambda path: ["--socket", path, "key", "list", "acct"],
        lambda path: ["key", "--socket", path, "list", "acct"],
        lambda path: ["--socket", path, "--json", "key", "list", "acct"],
        lambda path: ["--json", "balance", "acct", "--socket", path],
    ],
)
def test_socket_before_or_after_the_command(admin: StandInAdmin, short_dir: str, where) -> None:
    elsewhere = os.path.join(short_dir, "elsewhere.sock")
    run = gatewayctl(None, *where(admin.socket_path), env={"GATEWAY_ADMIN_SOCKET": elsewhere})
    assert run.exit_code == 0, run.stderr
    assert len(admin.requests) == 1


@pytest.mark.parametrize(
    "args",
    [
        lambda good, bad: ["--socket", bad, "balance", "acct", "--socket", good],
        lambda good, bad: ["--socket", bad, "account", "--socket", good, "list"],
    ],
)
def test_the_socket_given_last_wins(admin: StandInAdmin, short_dir: str, args) -> None:
    bad = os.path.join(short_dir, "bad.sock")
    run = gatewayctl(None, *args(admin.socket_path, bad))
    assert run.exit_code == 0, run.stderr
    assert len(admin.requests) == 1
    run = gatewayctl(None, *args(bad, admin.socket_path))
    assert_one_line_error(
        run, f"gatewayctl: cannot reach gatewayd admin socket at {bad} (no such file): "
        "is gatewayd running?")


@pytest.mark.live
def test_options_before_the_command_in_a_real_process(admin: StandInAdmin) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gatewayctl", "--socket", admin.socket_path, "--json",
         "key", "list", "ann@example.com"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "GATEWAY_ADMIN_SOCKET": ""},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [KEY]


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
