"""The web console over plain HTTP: sessions, the sign-in throttle, form rules, usage, CSV, chart.

The browser tests show the flows a person clicks through; these pin the rules behind
them (cookie attributes, secret file, restarts, TLS, 1,000 keys, filters and export)
against the real daemon, without a browser.
"""

from __future__ import annotations

import csv
import datetime as dt
import html
import io
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
import trustme

from gatewayd.console.formatting import local_today, usd, usd_html
from tests.console_helpers import ConsoleClient, account_with_password
from tests.live import Daemon, unique_email

BIN = Path(sys.executable).parent


@pytest.fixture
def console(gateway):
    client = ConsoleClient(gateway.url)
    yield client
    client.close()


def signed_in(gateway, **kw) -> tuple[ConsoleClient, dict]:
    email = unique_email("http")
    account = account_with_password(gateway.admin, email, **kw)
    client = ConsoleClient(gateway.url)
    assert client.sign_in(email).status_code == 302
    return client, account


def error_of(response: httpx.Response) -> str:
    start = response.text.index('role="alert"')
    return html.unescape(response.text[response.text.index(">", start) + 1:response.text.index("</div>", start)])


def test_password_set_by_gatewayctl_signs_in_and_cookie_is_safe(gateway, console):
    email = unique_email("ctlpw")
    account_with_password(gateway.admin, email, password="first password")
    run = subprocess.run([str(BIN / "gatewayctl"), "account", "password", email, "--socket", gateway.socket],
                         input="a new password\n", capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert console.sign_in(email, "first password").status_code == 400
    response = console.sign_in(email, "a new password")
    assert response.status_code == 302 and response.headers["location"] == "/console/keys"
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/console" in cookie
    assert "Secure" not in cookie  # plain HTTP here; the TLS test checks the other side
    spoofed = ConsoleClient(gateway.url, headers={"X-Forwarded-Proto": "https"})  # not from a trusted proxy
    assert "Secure" not in spoofed.get("/console/signin").headers["set-cookie"]
    spoofed.close()
    page = console.get("/console/keys")
    assert page.status_code == 200 and email in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"


def test_sign_in_throttle_per_email_and_address(gateway, console):
    email = unique_email("throttle")
    account_with_password(gateway.admin, email)
    for _ in range(5):
        wrong = console.sign_in(email, "not the password")
        assert wrong.status_code == 400 and "Wrong email or password" in wrong.text
    blocked = console.sign_in(email)  # even the right password, until the window passes
    assert blocked.status_code == 429
    assert 0 < int(blocked.headers["retry-after"]) <= 15 * 60
    assert "Too many failed sign-ins" in blocked.text
    assert console.get("/console/keys").status_code == 302
    # another email from the same address is not affected; unknown emails are counted too
    other = unique_email("fine")
    account_with_password(gateway.admin, other)
    assert console.sign_in(other).status_code == 302
    ghost = unique_email("ghost")
    stranger = ConsoleClient(gateway.url)
    assert [stranger.sign_in(ghost).status_code for _ in range(6)] == [400] * 5 + [429]
    stranger.close()


def test_sign_out_ends_the_session_and_a_new_password_ends_all(gateway):
    client, account = signed_in(gateway)
    old_cookie = client.http.cookies["gatewayd_console"]
    assert client.post("/console/signout", {}).status_code == 302
    assert client.get("/console/keys").status_code == 302
    replay = ConsoleClient(gateway.url, cookies={"gatewayd_console": old_cookie})
    assert replay.get("/console/keys").status_code == 302, "a signed-out session was accepted again"
    replay.close()

    assert client.sign_in(account["email"]).status_code == 302
    assert client.get("/console/keys").status_code == 200
    gateway.admin.call("PUT", f"/accounts/{account['id']}/password", {"password": "changed password"})
    assert client.get("/console/keys").status_code == 302
    client.close()


def test_forged_cookie_is_an_anonymous_visitor(gateway, console):
    console.http.cookies.set("gatewayd_console", "eyJzIjoiYWJjIiwiYSI6ImFjY3RfeCJ9.forged.sig")
    assert console.get("/console/keys").status_code == 302
    assert console.get("/console/usage.csv").status_code == 302


@pytest.mark.slow
def test_sessions_survive_a_restart_and_the_secret_is_kept_in_the_store(tmp_path, sim):
    daemon = Daemon(tmp_path / "d", sim.url)
    try:
        email = unique_email("restart")
        account_with_password(daemon.admin, email)
        client = ConsoleClient(daemon.url)
        assert client.sign_in(email).status_code == 302
        # shared by every instance on the database, so not a file of one instance's data dir
        assert not (tmp_path / "d" / "data" / "console-secret").exists()
        daemon.restart()
        client.http.base_url = daemon.url  # the new process listens on a new port
        assert client.get("/console/keys").status_code == 200
        client.close()
    finally:
        daemon.stop()
    configured = Daemon(tmp_path / "c", sim.url, server='console_secret = "a configured secret for the console"\n'
                                                      'trusted_proxies = ["127.0.0.1/32"]')
    try:
        email = unique_email("configured")
        account_with_password(configured.admin, email)
        client = ConsoleClient(configured.url)
        signed = client.sign_in(email)
        assert signed.status_code == 302 and "Secure" not in signed.headers["set-cookie"]
        behind_tls_proxy = ConsoleClient(configured.url, headers={"X-Forwarded-Proto": "https"})
        assert "Secure" in behind_tls_proxy.get("/console/signin").headers["set-cookie"]
        behind_tls_proxy.close()
        assert not (tmp_path / "c" / "data" / "console-secret").exists()
        configured.restart()
        client.http.base_url = configured.url
        assert client.get("/console/keys").status_code == 200
        client.close()
    finally:
        configured.stop()


@pytest.mark.slow
def test_session_cookie_is_secure_under_tls(tmp_path, sim):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_pem, key_pem, ca_pem = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_pem))
    cert.private_key_pem.write_to_path(str(key_pem))
    ca.cert_pem.write_to_path(str(ca_pem))
    daemon = Daemon(tmp_path / "d", sim.url, args=["--tls-cert", str(cert_pem), "--tls-key", str(key_pem)])
    try:
        email = unique_email("tls")
        account_with_password(daemon.admin, email)
        client = ConsoleClient(daemon.url, verify=str(ca_pem))
        response = client.sign_in(email)
        assert response.status_code == 302
        cookie = response.headers["set-cookie"]
        assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
        assert client.get("/console/keys").status_code == 200
        client.close()
    finally:
        daemon.stop()


def test_key_form_rules_come_back_as_form_errors(gateway):
    client, account = signed_in(gateway)
    cases = [
        ({"name": "x" * 51}, "key name is 51 characters; at most 50 are allowed"),
        ({"name": "  "}, "key name must not be empty"),
        ({"name": "k", "spend_limit": "ten dollars"}, "spend limit must be a dollar amount"),
        ({"name": "k", "spend_limit": "-5"}, "spend limit must not be negative"),
        ({"name": "k", "spend_limit": "2000000000"}, "at most $1,000,000,000"),
        ({"name": "k", "expires_on": "31/12/2030"}, "expiry date must be a date YYYY-MM-DD"),
        ({"name": "k", "expires_on": "2020-01-01"}, "expiry date 2020-01-01 has passed already (the key would stop at the end of that day, UTC); choose a later date"),
        ({"name": "k", "model_scope": "selected"}, "choose at least one model"),
        ({"name": "k", "model_scope": "selected", "models": "gpt-9"}, "no model 'gpt-9' in the catalogue"),
        ({"name": "k", "allow_ips": "10.0.0.1\nnot-an-ip"}, "IP allowlist: 'not-an-ip' is not an IP address"),
        ({"name": "k", "group": "vip"}, "no group named 'vip'"),
    ]
    for form, message in cases:
        response = client.post("/console/keys/new", form)
        assert response.status_code == 400, (form, response.status_code)
        assert message in error_of(response), (form, error_of(response))
    assert gateway.admin.call("GET", f"/accounts/{account['id']}/keys")["data"] == []

    created = client.post("/console/keys/new", {
        "name": "  full key  ", "spend_limit": "$1,250.5", "expires_on": "2031-01-31", "model_scope": "selected",
        "models": ["gpt-4.1-nano", "claude-haiku-4-5"], "allow_ips": "203.0.113.7, 10.0.0.0/8\n::1",
        "group": "default",
    })
    assert created.status_code == 302
    [key] = gateway.admin.call("GET", f"/accounts/{account['id']}/keys")["data"]
    assert (key["name"], key["spend_limit_nano"], key["expires_on"], key["group"]) == \
        ("full key", 1_250_500_000_000, "2031-01-31", "default")
    assert key["models"] == ["claude-haiku-4-5", "gpt-4.1-nano"]
    assert key["allow_ips"] == ["203.0.113.7/32", "10.0.0.0/8", "::1/128"]
    # clearing every optional field through the edit form
    edited = client.post(f"/console/keys/{key['id']}", {"name": "full key", "spend_limit": "", "expires_on": "",
                                                        "model_scope": "all", "allow_ips": "", "group": ""})
    assert edited.status_code == 302
    shown = gateway.admin.call("GET", f"/keys/{key['id']}")
    assert [shown[f] for f in ("spend_limit_nano", "expires_on", "models", "allow_ips", "group")] == [None] * 5
    # what people type is shown as text, never as markup
    hostile = gateway.admin.key(account["id"], name="<img src=x onerror=alert(1)>")
    listing = client.get("/console/keys").text
    assert "<img src=x" not in listing and "&lt;img src=x onerror=alert(1)&gt;" in listing
    assert client.post(f"/console/keys/{hostile['id']}/revoke", {"confirm": hostile["name"]}).status_code == 302
    # revoked keys cannot be enabled again
    assert client.post(f"/console/keys/{key['id']}/revoke", {"confirm": "full key"}).status_code == 302
    assert client.post(f"/console/keys/{key['id']}/enable", {}).status_code == 409
    assert gateway.admin.call("GET", f"/keys/{key['id']}")["state"] == "deleted"
    client.close()


@pytest.mark.slow
def test_the_thousand_keys_rule_is_a_form_error(gateway):
    client, account = signed_in(gateway)
    for i in range(1000):
        gateway.admin.key(account["id"], name=f"k{i}")
    response = client.post("/console/keys/new", {"name": "one too many"})
    assert response.status_code == 409
    assert "this account has 1000 keys, the most allowed; revoke one first" in error_of(response)
    page = client.get("/console/keys")
    assert "1000 of 1,000 keys" in page.text
    client.close()


def test_usage_log_pages_filters_csv_and_chart(gateway):
    client, account = signed_in(gateway, timezone="America/New_York")
    key_a = gateway.admin.key(account["id"], name="alpha")
    key_b = gateway.admin.key(account["id"], name="=SUM(A1)")  # a name a spreadsheet would run
    ids = {}
    for i in range(52):
        key, model = (key_a, "gpt-4.1-mini") if i < 40 else (key_b, "gpt-4.1-nano")
        raw = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key["secret"], max_retries=0) \
            .chat.completions.with_raw_response.create(model=model, messages=[{"role": "user", "content": f"n{i}"}])
        ids[raw.headers["x-request-id"]] = key["name"]
    rows = gateway.admin.usage(account["id"], limit=100)
    spent = sum(r["cost_nano"] for r in rows)
    assert len(rows) == 52 and spent == 10_000_000_000 - gateway.admin.balance(account["id"])["balance_nano"]

    first = client.get("/console/usage")
    assert first.status_code == 200
    assert first.text.count("data-request-id=") == 50 and "page 1 of 2" in first.text
    assert f"52 requests · {usd_html(spent)}" in first.text
    newest = rows[0]["request_id"]
    assert first.text.index(newest) < first.text.index(rows[49]["request_id"])
    second = client.get("/console/usage", params={"page": 2})
    assert second.text.count("data-request-id=") == 2 and rows[51]["request_id"] in second.text

    only_b = client.get("/console/usage", params={"key": key_b["id"]})
    assert only_b.text.count("data-request-id=") == 12 and "12 requests" in only_b.text
    only_mini = client.get("/console/usage", params={"model": "gpt-4.1-mini"})
    assert only_mini.text.count("data-request-id=") == 40
    today = local_today("America/New_York")
    assert client.get("/console/usage", params={"from": today.isoformat(), "to": today.isoformat()}) \
        .text.count("data-request-id=") == 50
    tomorrow = (today + dt.timedelta(days=1)).isoformat()
    assert client.get("/console/usage", params={"from": tomorrow}).text.count("data-request-id=") == 0
    bad = client.get("/console/usage", params={"from": "yesterday"})
    assert bad.status_code == 400 and "From must be a date YYYY-MM-DD" in bad.text
    assert client.get("/console/usage", params={"key": "key_doesnotexist"}).status_code == 404

    # the chart: one bar segment per model today, titled with the exact amount
    mini_today = sum(r["cost_nano"] for r in rows if r["model"] == "gpt-4.1-mini")
    assert f"{today.isoformat()} · gpt-4.1-mini: {usd(mini_today)}</title>" in first.text
    assert first.text.count("<rect x=") == 2

    export = client.get("/console/usage.csv")
    assert export.status_code == 200 and export.headers["content-type"].startswith("text/csv")
    assert "attachment" in export.headers["content-disposition"]
    table = list(csv.DictReader(io.StringIO(export.text)))
    assert len(table) == 52 and [r["request_id"] for r in table] == [r["request_id"] for r in rows]
    assert sum(int(r["cost_nano"]) for r in table) == spent
    assert {r["key_name"] for r in table} == {"alpha", "'=SUM(A1)"}
    assert table[0]["time"].endswith(("-05:00", "-04:00"))
    assert {r["stream"] for r in table} <= {"true", "false"}  # as in JSON and gatewayctl's CSV
    filtered = list(csv.DictReader(io.StringIO(client.get("/console/usage.csv", params={"key": key_a["id"]}).text)))
    assert len(filtered) == 40 and {r["model"] for r in filtered} == {"gpt-4.1-mini"}
    # what each cost is made of: the breakdown columns add up to cost_nano, and the page's tooltip says it
    from gatewayd.billing.breakdown import TOKEN_DIMENSIONS, exact_usd

    for r in table:
        assert sum(int(r[f"{d}_nano"]) for d in TOKEN_DIMENSIONS) + int(r["tools_nano"]) == int(r["cost_nano"])
        assert int(r["hold_nano"]) >= int(r["cost_nano"]) and r["long_context"] == "false"
    newest_row = rows[0]
    out = {line["dimension"]: line for line in newest_row["breakdown"]["lines"]}["output"]
    cell = first.text[first.text.index(f'data-request-id="{newest}"'):]
    cell = cell[cell.index('class="num cost breakdown"'):cell.index("</td>", cell.index('class="num cost'))]
    assert f"output: {out['quantity']:,} x {exact_usd(out['unit_nano'])} = {exact_usd(out['nano'])}" in cell
    assert f"held {usd(newest_row['hold_nano'])}" in cell and f">{usd_html(newest_row['cost_nano'])}" in cell
    client.close()


def test_balance_page_shows_balance_paid_held_and_payments(gateway):
    client, account = signed_in(gateway, paid_usd="10")
    gateway.admin.call("POST", f"/accounts/{account['id']}/payments", {"amount_nano": 2_500_000_000,
                                                                        "note": "invoice 42"})
    page = client.get("/console/balance")
    assert page.status_code == 200
    assert 'id="balance">$12.50<' in page.text and 'id="total-paid">$12.50<' in page.text
    assert 'id="held">$0.00<' in page.text
    assert page.text.index("invoice 42") < page.text.index(f"{usd_html(10 * 10**9)}</td>")  # newest payment first
    client.close()


def test_console_404_and_static(gateway, console):
    assert console.get("/console/no/such/page").status_code == 404
    css = console.get("/console/static/console.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert console.get("/console/").status_code == 302
