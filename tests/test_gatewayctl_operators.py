"""gatewayctl admin-token, audit-log, operator password, and every command against a remote
gateway (--url, --token, --cacert) over HTTPS, against the real admin API and its gate in this
process (tests/admin_inproc.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.admin_inproc import RealAdmin, running_admin
from tests.gatewayctl_cli import Made, flatten, gatewayctl, make_account, ok, one_json
from tests.gatewayctl_cli import admin_fixture, shared_admin_fixture  # noqa: F401  (fixtures)


@pytest.fixture(scope="module", name="ca")
def ca_fixture() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module", name="remote")
def remote_fixture(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealAdmin]:
    """An admin API on its socket and over HTTPS (a certificate for 127.0.0.1 from a private CA)."""
    folder = tmp_path_factory.mktemp("remote")
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(str(folder / "server.pem"))
    with running_admin(folder, tls=(str(folder / "server.pem"), str(folder / "server.pem"))) as real:
        yield real


@pytest.fixture(name="ca_file")
def ca_file_fixture(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def _token(admin: RealAdmin, *scopes: str) -> str:
    args = [a for s in scopes for a in ("--scope", s)]
    return one_json(ok(admin, "admin-token", "create", "-".join(scopes), *args, "--json"))["token"]


def test_admin_token_create_prints_the_token_once_and_list_never(admin: RealAdmin) -> None:
    run = ok(admin, "admin-token", "create", "billing", "--scope", "money", "--scope", "read",
             "--expires", "2099-12-31", "--allow-ip", "10.0.0.0/8")
    assert admin.last.body == {"name": "billing", "scopes": ["money", "read"], "expires_at": "2099-12-31",
                               "allow_ips": ["10.0.0.0/8"]}
    token = next(word for word in run.stdout.split() if word.startswith("gwa-"))
    assert len(token) == 52 and "shown once" in run.stdout
    listed = ok(admin, "admin-token", "list")
    assert "billing" in listed.stdout and "read, money" in listed.stdout and token not in listed.stdout
    as_json = one_json(ok(admin, "admin-token", "list", "--json"))
    made = next(t for t in as_json if t["name"] == "billing")
    assert made["state"] == "active" and made["expires_at"] == "2099-12-31T23:59:59.999Z" and "token" not in made
    revoked = one_json(ok(admin, "admin-token", "revoke", made["id"], "--json"))
    assert revoked["state"] == "revoked"


@pytest.mark.parametrize(("args", "why"), [
    (["x", "--scope", "root"], "not a scope"),
    (["x"], "Missing option '--scope'"),
    (["x", "--scope", "read", "--allow-ip", "nope"], "not an IP address"),
    (["x", "--scope", "read", "--expires", "2026-02-30"], "not a calendar date"),
])
def test_admin_token_create_refuses_bad_options(admin: RealAdmin, args: list[str], why: str) -> None:
    run = gatewayctl(admin, "admin-token", "create", *args)
    assert run.exit_code == 2 and why in run.err and not admin.requests


def test_audit_log_shows_who_did_what_from_the_socket(admin: RealAdmin) -> None:
    ann = make_account(admin)
    ok(admin, "account", "pay", ann.id, "2", "--note", "invoice 8")
    run = ok(admin, "audit-log", "--changes", "--target", f"account:{ann.id}")
    assert "local operator" in run.stdout and f"/admin/v1/accounts/{ann.id}/payments" in run.stdout
    rows = one_json(ok(admin, "audit-log", "--changes", "--target", f"account:{ann.id}", "--json"))
    paid = next(r for r in rows if r["path"].endswith("/payments"))
    assert paid["via"] == "socket" and paid["request"] == {"amount_nano": 2_000_000_000, "note": "invoice 8"}
    assert paid["after"]["total_paid_nano"] - paid["before"]["total_paid_nano"] == 2_000_000_000
    assert admin.last.query == {"target": [f"account:{ann.id}"], "changes": ["true"], "limit": ["50"]}


def test_operator_password_reads_stdin_and_refuses_a_short_one(admin: RealAdmin) -> None:
    ok(admin, "operator", "password", input="correct horse battery\n")
    assert admin.last.body == {"password": "correct horse battery"}
    short = gatewayctl(admin, "operator", "password", input="short\n")
    assert short.exit_code == 1 and "12" in short.err


def test_every_command_runs_against_a_remote_gateway_with_the_same_output(remote: RealAdmin, ca_file: str) -> None:
    ann: Made = make_account(remote)
    token = _token(remote, "admin")
    over = ["--url", remote.https_url, "--token", token, "--cacert", ca_file]
    for command in (["account", "show", ann.id], ["account", "list"], ["balance", ann.id], ["usage", ann.id],
                    ["key", "list", ann.id], ["codes", "list"], ["prices", "show", "gpt-4.1"], ["routes"]):
        local = ok(remote, *command, "--json")
        far = gatewayctl(None, *over, *command, "--json")
        assert far.exit_code == 0, (command, far.stderr)
        assert far.stdout == local.stdout, command
        assert remote.requests[-1].path == remote.requests[-2].path
    table_local = ok(remote, "account", "show", ann.id).stdout
    table_far = gatewayctl(None, *over, "account", "show", ann.id)
    assert table_far.stdout == table_local
    # a change made remotely is a change, and the audit log says who made it and from where
    created = gatewayctl(None, *over, "key", "create", ann.id, "--name", "ci", "--json")
    assert created.exit_code == 0, created.stderr
    key = one_json(created)
    assert key["secret"].startswith("sk-") and [k["id"] for k in one_json(ok(remote, "key", "list", ann.id, "--json"))] \
        == [key["id"]]
    rows = one_json(ok(remote, "audit-log", "--target", f"key:{key['id']}", "--json"))
    assert rows[0]["via"] == "http" and rows[0]["address"] == "127.0.0.1" and rows[0]["actor_name"] == "admin"


def test_remote_settings_come_from_the_environment_too(remote: RealAdmin, ca_file: str) -> None:
    token = _token(remote, "read")
    env = {"GATEWAYCTL_URL": remote.https_url, "GATEWAYCTL_TOKEN": token, "GATEWAYCTL_CACERT": ca_file,
           "GATEWAY_ADMIN_SOCKET": None}
    listed = gatewayctl(None, "account", "list", "--json", env=env)
    assert listed.exit_code == 0, listed.stderr
    # a read token cannot write: the daemon's refusal, one line, exit 1
    refused = gatewayctl(None, "account", "create", "x@example.com", env=env)
    assert refused.exit_code == 1 and "needs the 'write' scope" in refused.err


def test_remote_tls_is_verified_and_tokens_are_checked(remote: RealAdmin, ca_file: str) -> None:
    token = _token(remote, "read")
    untrusted = gatewayctl(None, "--url", remote.https_url, "--token", token, "account", "list")
    assert untrusted.exit_code == 1 and "TLS certificate not trusted" in untrusted.err and "--cacert" in untrusted.err
    api_key = gatewayctl(None, "--url", remote.https_url, "--token", "sk-abc", "account", "list")
    assert api_key.exit_code == 2 and "gwa-" in api_key.err
    no_token = gatewayctl(None, "--url", remote.https_url, "account", "list", env={"GATEWAYCTL_TOKEN": None})
    assert no_token.exit_code == 2 and "admin token" in no_token.err
    wrong = gatewayctl(None, "--url", remote.https_url, "--token", "gwa-" + "y" * 48, "--cacert", ca_file,
                       "account", "list")
    assert wrong.exit_code == 1 and "invalid admin token" in wrong.err
    clear = gatewayctl(None, "--url", "http://gateway.example.com", "--token", token, "account", "list")
    assert clear.exit_code == 2 and "in clear" in flatten(clear.stderr)
    both = gatewayctl(None, "--url", remote.https_url, "--token", token, "--socket", "/tmp/x.sock", "account", "list")
    assert both.exit_code == 2 and "not both" in both.err
    bad_ca = gatewayctl(None, "--url", remote.https_url, "--token", token, "--cacert", "/nonexistent.pem",
                        "account", "list")
    assert bad_ca.exit_code == 1 and "--cacert" in bad_ca.err
