"""HTTPS with a certificate made in the test, and gatewayctl against the real daemon."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import trustme

from tests.live import Daemon, unique_email

BIN = Path(sys.executable).parent


def test_openai_sdk_over_https(tmp_path, sim):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_pem, key_pem, ca_pem = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_pem))
    cert.private_key_pem.write_to_path(str(key_pem))
    ca.cert_pem.write_to_path(str(ca_pem))
    daemon = Daemon(tmp_path / "d", sim.url, args=["--tls-cert", str(cert_pem), "--tls-key", str(key_pem)])
    try:
        assert daemon.url.startswith("https://")
        account = daemon.admin.account(unique_email("tls"))
        secret = daemon.admin.key(account["id"])["secret"]
        client = openai.OpenAI(base_url=daemon.url + "/v1", api_key=secret, max_retries=0,
                               http_client=httpx.Client(verify=str(ca_pem)))
        reply = client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "tls"}])
        assert reply.choices[0].message.content
        # plain HTTP to the TLS port is not served
        try:
            plain = httpx.get(daemon.url.replace("https://", "http://") + "/healthz", timeout=5)
            assert plain.status_code != 200
        except httpx.HTTPError:
            pass
    finally:
        daemon.stop()


def ctl(gateway, *args, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "gatewayctl"), *args, "--socket", gateway.socket], input=stdin,
                          capture_output=True, text=True, timeout=30)


def test_gatewayctl_end_to_end(gateway):
    assert stat.S_IMODE(os.stat(gateway.socket).st_mode) == 0o600
    email = unique_email("ctl")
    created = ctl(gateway, "account", "create", email, "--timezone", "Europe/Paris", "--json")
    assert created.returncode == 0, created.stderr
    account = json.loads(created.stdout)
    assert account["timezone"] == "Europe/Paris" and account["balance_nano"] == 0
    paid = ctl(gateway, "account", "pay", email, "12.50", "--note", "card", "--json")
    assert paid.returncode == 0, paid.stderr
    balance = json.loads(ctl(gateway, "balance", email, "--json").stdout)
    assert balance == {"balance_nano": 12_500_000_000, "held_nano": 0, "total_paid_nano": 12_500_000_000,
                       "balance_usd": "12.5", "held_usd": "0", "total_paid_usd": "12.5"}
    key = json.loads(ctl(gateway, "key", "create", email, "--name", "cli", "--spend-limit", "1.5",
                         "--models", "gpt-4.1-mini,claude-haiku-4-5", "--json").stdout)
    assert key["secret"].startswith("sk-") and key["spend_limit_nano"] == 1_500_000_000
    assert key["models"] == ["claude-haiku-4-5", "gpt-4.1-mini"]
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key["secret"], max_retries=0)
    client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "ctl"}])
    rows = json.loads(ctl(gateway, "usage", email, "--json").stdout)
    assert len(rows) == 1 and rows[0]["model"] == "gpt-4.1-mini" and rows[0]["cost_nano"] > 0
    assert ctl(gateway, "key", "disable", key["id"]).returncode == 0
    try:
        client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "ctl"}])
        raise AssertionError("a disabled key was accepted")
    except openai.AuthenticationError:
        pass
    shown = json.loads(ctl(gateway, "key", "show", key["id"], "--json").stdout)
    assert shown["state"] == "disabled"
    table = ctl(gateway, "key", "list", email)
    assert table.returncode == 0 and "cli" in table.stdout
    audit = ctl(gateway, "audit", "--json")
    assert audit.returncode == 0 and json.loads(audit.stdout)["ok"] is True


def test_gatewayctl_unreachable_socket(tmp_path):
    result = subprocess.run([str(BIN / "gatewayctl"), "account", "list", "--socket", str(tmp_path / "none.sock")],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
