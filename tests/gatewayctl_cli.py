"""Helpers and fixtures for the gatewayctl tests: the CLI against the real admin API, in this
process (tests/admin_inproc.py).

The daemon's own admin app over a real SQLite store answers every command here: a test makes
the account or key it needs, runs the command as the operator types it, and checks what the CLI
sent (the requests are recorded: method, path, JSON body, money in nano-dollars), what the API
answered and how the CLI printed it and exited. One admin serves the tests of a module (each
makes its own account, so they do not see each other's); the audit tests that break a row get
their own.

:class:`BrokenDaemon` is the one stand-in left: a few lines of stdlib HTTP for answers the real
API never sends (a 500 whose body is not JSON), to pin how the CLI takes them.

The tests are split by command group, as gatewayctl/ is: test_gatewayctl_accounts.py,
test_gatewayctl_keys.py, test_gatewayctl_usage.py (balance, usage) and
test_gatewayctl_operations.py (audit, and what every command shares: reaching the daemon, errors
and exit codes, tables, where --socket and --json go, help texts). This module is not a test
file, so pytest sees its fixtures only in a module that imports them: each test module imports
those it uses and those they use in turn (``admin`` needs ``shared_admin``). They are defined
with ``name=`` (``admin_fixture`` is the fixture ``admin``), so a test's ``admin`` parameter
does not shadow an import. ``shared_admin`` is module-scoped: each test module gets an admin
of its own.
"""

from __future__ import annotations

import http.server
import itertools
import json
import os
import re
import shutil
import socketserver
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(name="short_dir")
def short_dir_fixture() -> Iterator[str]:
    """A short directory: Unix socket paths are limited to about 100 bytes."""
    path = tempfile.mkdtemp(prefix="gwctl-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module", name="shared_admin")
def shared_admin_fixture(tmp_path_factory) -> Iterator[RealAdmin]:
    with running_admin(tmp_path_factory.mktemp("admin")) as real:
        yield real


@pytest.fixture(name="admin")
def admin_fixture(shared_admin: RealAdmin) -> RealAdmin:
    """The module's real admin API, its request log emptied for this test."""
    shared_admin.requests.clear()
    return shared_admin


@pytest.fixture(name="fresh_admin")
def fresh_admin_fixture(tmp_path: Path) -> Iterator[RealAdmin]:
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


@pytest.fixture(name="ann")
def ann_fixture(admin: RealAdmin) -> Made:
    return make_account(admin)


@pytest.fixture(name="laptop")
def laptop_fixture(admin: RealAdmin, ann: Made) -> dict[str, Any]:
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


USAGE = Settlement("ok", 200, input_tokens=1200, output_tokens=300, cached_tokens=1000, cost_nano=4_700_000)
BILLED = Settlement(
    "ok", 200, input_tokens=250_000, output_tokens=100, cost_nano=1_030_000_000 + 2_000_000 + 30_000_000,
    breakdown={"lines": [{"dimension": "input", "quantity": 250_000, "unit_nano": 4_120, "nano": 1_030_000_000},
                         {"dimension": "output", "quantity": 100, "unit_nano": 20_000, "nano": 2_000_000},
                         {"dimension": "tool:web_search", "quantity": 3, "unit_nano": 10_000_000,
                          "nano": 30_000_000}],
               "tier": "priority", "long_context": True},
)


@pytest.fixture(name="used")
def used_fixture(admin: RealAdmin, ann: Made, laptop: dict) -> Made:
    """Ann's key served two requests: one with no breakdown recorded (as rows settled before
    breakdowns were kept), then one billed line by line."""
    settle(admin, ann.id, laptop["id"], f"req_plain_{ann.id}", 5_000_000, USAGE)
    settle(admin, ann.id, laptop["id"], f"req_billed_{ann.id}", 1_100_000_000, BILLED)
    return ann
