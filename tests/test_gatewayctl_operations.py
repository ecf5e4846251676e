"""gatewayctl audit, and what every command shares: errors, exit codes, tables, --socket, --json, --help."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from gatewayctl.main import app
from gatewayd.store.base import Settlement
from tests.admin_inproc import RealAdmin
from tests.gatewayctl_cli import (
    BILLED, USAGE, BrokenDaemon, Made, Run, flatten, gatewayctl, make_account, make_key, ok, one_json, settle,
)
from tests.gatewayctl_cli import (  # noqa: F401  (fixtures)
    admin_fixture, ann_fixture, fresh_admin_fixture, laptop_fixture, shared_admin_fixture, short_dir_fixture,
    used_fixture,
)


# --- audit ------------------------------------------------------------------------------


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
