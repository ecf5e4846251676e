"""The admin API over HTTP (issue 33): admin tokens, scopes per route, the audit log, the
throttle and the body budget of its own, on the public listener in this process
(``tests.admin_http``)."""

from __future__ import annotations

import re

import pytest

from gatewayd.admin import openapi
from gatewayd.admin.api import create_admin_app
from gatewayd.admin.gate import LOCAL_OPERATOR, operations_of
from tests.admin_http import admin_http

USD = 10**9


@pytest.fixture
async def admin(tmp_path):
    made = await admin_http(tmp_path)
    try:
        yield made
    finally:
        await made.aclose()


async def _account(admin, email="ann@example.com") -> str:
    status, doc = await admin.gate.call(LOCAL_OPERATOR, "POST", "/admin/v1/accounts", {"email": email})
    assert status == 201, doc
    return doc["id"]


def _error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["type"] and error["message"]
    return error


async def test_no_token_an_api_key_or_a_bad_token_is_401_in_the_gateways_envelope(admin):
    _error(await admin.as_(None, "GET", "/admin/v1/accounts"), 401, "missing_admin_token")
    account = await _account(admin)
    _, key = await admin.gate.call(LOCAL_OPERATOR, "POST", f"/admin/v1/accounts/{account}/keys", {"name": "k"})
    refused = await admin.as_(key["secret"], "GET", "/admin/v1/accounts")
    assert "API key" in _error(refused, 401, "invalid_admin_token")["message"]
    assert refused.headers["www-authenticate"].startswith("Bearer")
    _error(await admin.as_("gwa-" + "x" * 48, "GET", "/admin/v1/accounts"), 401, "invalid_admin_token")
    # and the reverse: an admin token is never an API key
    token = await admin.token("admin")
    chat = await admin.http.post("/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                                 json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 401


async def test_a_read_token_reads_and_cannot_write(admin):
    account = await _account(admin)
    token = await admin.token("read")
    listed = await admin.as_(token, "GET", "/admin/v1/accounts")
    assert listed.status_code == 200 and [a["id"] for a in listed.json()["data"]] == [account]
    for method, path, body in (("POST", "/admin/v1/accounts", {"email": "b@example.com"}),
                               ("PATCH", f"/admin/v1/accounts/{account}", {"name": "x"}),
                               ("POST", f"/admin/v1/accounts/{account}/payments", {"amount_nano": USD}),
                               ("POST", f"/admin/v1/accounts/{account}/keys", {"name": "k"}),
                               ("POST", "/admin/v1/codes", {"amount_nano": USD}),
                               ("POST", "/admin/v1/reload", None),
                               ("POST", "/admin/v1/admin-tokens", {"name": "x", "scopes": ["admin"]})):
        error = _error(await admin.as_(token, method, path, body), 403, "insufficient_scope")
        assert "scope" in error["message"]
    assert (await admin.store.payments(account)) == []
    assert len(admin.directory.accounts) == 1


async def test_only_money_records_payments_adjustments_and_codes(admin):
    account = await _account(admin)
    write, money, keys = await admin.token("write"), await admin.token("money"), await admin.token("keys")
    for token in (write, keys):
        _error(await admin.as_(token, "POST", f"/admin/v1/accounts/{account}/payments", {"amount_nano": USD}),
               403, "insufficient_scope")
        _error(await admin.as_(token, "POST", f"/admin/v1/accounts/{account}/adjustments",
                               {"amount_nano": USD, "note": "x"}), 403, "insufficient_scope")
        _error(await admin.as_(token, "POST", "/admin/v1/codes", {"amount_nano": USD}), 403, "insufficient_scope")
    paid = await admin.as_(money, "POST", f"/admin/v1/accounts/{account}/payments", {"amount_nano": 5 * USD})
    assert paid.status_code == 201
    assert paid.json()["payment"]["amount_usd"] == "5" and paid.json()["account"]["total_paid_usd"] == "5"
    down = await admin.as_(money, "POST", f"/admin/v1/accounts/{account}/adjustments",
                           {"amount_nano": -2 * USD, "note": "double charge on invoice 12"})
    assert down.status_code == 201, down.text
    assert down.json()["adjustment"]["source"] == "adjustment"
    assert down.json()["account"]["balance_nano"] == 3 * USD
    _error(await admin.as_(money, "POST", f"/admin/v1/accounts/{account}/adjustments", {"amount_nano": USD}),
           400, "invalid_request")
    # below a zero balance: refused as the floor (issue 32), and with force as more than was ever paid
    _error(await admin.as_(money, "POST", f"/admin/v1/accounts/{account}/adjustments",
                           {"amount_nano": -10 * USD, "note": "too much"}), 409, "below_floor")
    _error(await admin.as_(money, "POST", f"/admin/v1/accounts/{account}/adjustments",
                           {"amount_nano": -10 * USD, "note": "too much", "force": True}), 400, "invalid_request")
    codes = await admin.as_(money, "POST", "/admin/v1/codes", {"amount_nano": USD, "count": 2})
    assert codes.status_code == 201 and len(codes.json()["data"]) == 2
    # write changes accounts, keys manages keys
    assert (await admin.as_(write, "PATCH", f"/admin/v1/accounts/{account}", {"name": "Ann"})).status_code == 200
    made = await admin.as_(keys, "POST", f"/admin/v1/accounts/{account}/keys", {"name": "ci"})
    assert made.status_code == 201 and made.json()["secret"].startswith("sk-")
    assert (await admin.as_(keys, "POST", f"/admin/v1/keys/{made.json()['id']}/revoke")).status_code == 200
    audit = await admin.store.audit(admin.directory.accounts.values(), admin.directory.keys.values())
    assert audit["ok"], audit


async def test_a_revoked_or_expired_token_and_one_from_another_address_are_refused(admin):
    token = await admin.token("read")
    assert (await admin.as_(token, "GET", "/admin/v1/accounts")).status_code == 200
    [row] = [t for t in (await admin.store.admin_tokens())]
    status, revoked = await admin.gate.call(LOCAL_OPERATOR, "POST", f"/admin/v1/admin-tokens/{row.id}/revoke")
    assert status == 200 and revoked["state"] == "revoked"
    assert "revoked" in _error(await admin.as_(token, "GET", "/admin/v1/accounts"), 401,
                               "invalid_admin_token")["message"]
    elsewhere = await admin.token("read", allow_ips=["10.0.0.0/8"])
    _error(await admin.as_(elsewhere, "GET", "/admin/v1/accounts"), 403, "ip_not_allowed")
    here = await admin.token("read", allow_ips=["127.0.0.0/8"])
    assert (await admin.as_(here, "GET", "/admin/v1/accounts")).status_code == 200
    status, refused = await admin.gate.call(LOCAL_OPERATOR, "POST", "/admin/v1/admin-tokens",
                                            {"name": "old", "scopes": ["read"], "expires_at": "2001-01-01"})
    assert status == 400 and "past" in refused["error"]["message"]
    status, refused = await admin.gate.call(LOCAL_OPERATOR, "POST", "/admin/v1/admin-tokens",
                                            {"name": "x", "scopes": ["root"]})
    assert status == 400 and "unknown scope" in refused["error"]["message"]


async def test_every_call_is_in_the_audit_log_with_before_and_after_and_no_secret(admin):
    account = await _account(admin)
    money = await admin.token("money")
    keys = await admin.token("keys")
    await admin.as_(money, "POST", f"/admin/v1/accounts/{account}/payments", {"amount_nano": 7 * USD, "note": "inv 9"})
    made = await admin.as_(keys, "POST", f"/admin/v1/accounts/{account}/keys", {"name": "ci"})
    await admin.as_(keys, "GET", f"/admin/v1/accounts/{account}")
    await admin.as_(keys, "POST", "/admin/v1/codes", {"amount_nano": USD})  # refused: 403, logged too
    status, log = await admin.gate.call(LOCAL_OPERATOR, "GET", "/admin/v1/audit-log", query={"limit": "50"})
    assert status == 200
    rows = log["data"]
    payment = next(r for r in rows if r["path"].endswith("/payments") and r["method"] == "POST")
    assert payment["via"] == "http" and payment["address"] == "127.0.0.1" and payment["status"] == 201
    assert payment["actor"].startswith("adm_") and payment["actor_name"] == "money"
    assert payment["target"] == f"account:{account}"
    assert payment["before"]["total_paid_nano"] == 0 and payment["after"]["total_paid_nano"] == 7 * USD
    assert payment["request"] == {"amount_nano": 7 * USD, "note": "inv 9"}
    key_row = next(r for r in rows if r["path"].endswith("/keys") and r["method"] == "POST")
    assert key_row["after"]["secret"] != made.json()["secret"] and made.json()["secret"] not in str(rows)
    assert any(r["method"] == "GET" and r["path"] == f"/admin/v1/accounts/{account}" for r in rows)
    assert any(r["status"] == 403 and r["path"] == "/admin/v1/codes" for r in rows)
    token_row = next(r for r in rows if r["path"] == "/admin/v1/admin-tokens")
    assert token_row["via"] == "socket" and token_row["after"]["token"] != money and money not in str(rows)
    # filters: one target's changes only
    status, mine = await admin.gate.call(LOCAL_OPERATOR, "GET", "/admin/v1/audit-log",
                                         query={"target": f"account:{account}", "changes": "true"})
    assert {r["method"] for r in mine["data"]} == {"POST"}


async def test_the_throttle_is_per_token_and_answers_429_with_retry_after(tmp_path):
    admin = await admin_http(tmp_path, "[admin]\nrequests_per_minute = 6\n")
    try:
        first, second = await admin.token("read"), await admin.token("read")
        answers = [await admin.as_(first, "GET", "/admin/v1/me") for _ in range(12)]
        assert [a.status_code for a in answers[:10]] == [200] * 10  # the burst
        limited = answers[-1]
        _error(limited, 429, "rate_limited")
        assert int(limited.headers["retry-after"]) >= 1
        assert (await admin.as_(second, "GET", "/admin/v1/me")).status_code == 200  # its own bucket
    finally:
        await admin.aclose()


async def test_admin_bodies_have_their_own_cap_and_never_use_the_apis_budget(tmp_path):
    # the API and the console may each hold 1 KiB of bodies at once; an admin body of 3 KiB passes
    admin = await admin_http(tmp_path, "[admin]\nmax_body_bytes = 65536\n",
                             server_text="max_buffered_bytes = 1024\nconsole_buffered_bytes = 1024\n")
    try:
        token = await admin.token("admin")
        prices = {"models": {"gpt-4.1-mini": {"input_price": 1}}}
        padded = await admin.as_(token, "POST", "/admin/v1/admin-tokens",
                                 {"name": "n" * 100, "scopes": ["read"], "allow_ips": ["10.0.0.1"] * 50})
        assert padded.status_code == 201, padded.text
        big = await admin.http.post("/admin/v1/prices", content=b" " * 70_000 + b"{}",
                                    headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
        _error(big, 413, "request_too_large")
        assert admin.gate.bodies.held == 0

        async def chunks():  # no Content-Length: counted as it comes, cut at the cap
            for _ in range(20):
                yield b" " * 8192

        chunked = await admin.http.post("/admin/v1/prices", content=chunks(),
                                        headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
        _error(chunked, 413, "request_too_large")
        assert admin.gate.bodies.held == 0
        applied = await admin.as_(token, "POST", "/admin/v1/prices", prices)
        assert applied.status_code == 200, applied.text
    finally:
        await admin.aclose()


async def test_admin_bodies_held_at_once_have_a_budget_of_their_own(tmp_path):
    admin = await admin_http(tmp_path, "[admin]\nmax_body_bytes = 4096\nmax_buffered_bytes = 2048\n")
    try:
        token = await admin.token("admin")
        busy = await admin.http.post("/admin/v1/admin-tokens", content=b" " * 3000,
                                     headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
        _error(busy, 503, "server_busy")
        assert busy.headers["retry-after"] == "1" and admin.gate.bodies.held == 0
    finally:
        await admin.aclose()


async def test_answers_carry_usd_strings_beside_the_nano_integers(admin):
    account = await _account(admin)
    token = await admin.token("money")
    await admin.as_(token, "POST", f"/admin/v1/accounts/{account}/payments", {"amount_nano": 1_500_000_000})
    shown = (await admin.as_(token, "GET", f"/admin/v1/accounts/{account}")).json()
    assert (shown["total_paid_nano"], shown["total_paid_usd"]) == (1_500_000_000, "1.5")
    assert shown["held_usd"] == "0"
    balance = (await admin.as_(token, "GET", f"/admin/v1/accounts/{account}/balance")).json()
    assert balance["balance_usd"] == "1.5"


async def test_accounts_are_searched_and_limited_by_email(admin):
    for email in ("zed@example.com", "amy@example.org", "bob@example.com"):
        await _account(admin, email)
    token = await admin.token("read")
    found = (await admin.as_(token, "GET", "/admin/v1/accounts?q=EXAMPLE.COM")).json()["data"]
    assert sorted(a["email"] for a in found) == ["bob@example.com", "zed@example.com"]
    first = (await admin.as_(token, "GET", "/admin/v1/accounts?limit=2")).json()["data"]
    assert [a["email"] for a in first] == ["amy@example.org", "bob@example.com"]
    _error(await admin.as_(token, "GET", "/admin/v1/accounts?limit=0"), 400, "invalid_request")


async def test_me_names_the_caller_and_its_scopes(admin):
    token = await admin.token("read", "keys")
    me = (await admin.as_(token, "GET", "/admin/v1/me")).json()
    assert me["scopes"] == ["keys", "read"] and me["via"] == "http" and me["actor"].startswith("adm_")


def test_the_openapi_document_describes_every_route_of_the_admin_app_and_only_those():
    app = create_admin_app(None, None, lambda: 0.0)
    rules = {(method, re.sub(r"<(?:\w+:)?(\w+)>", "{}", rule.rule)) for rule in app.url_map.iter_rules()
             for method in rule.methods - {"HEAD", "OPTIONS"} if rule.rule.startswith("/admin/")}
    document = openapi.document()
    described = {(op.method, re.sub(r"\{\w+\}", "{}", op.template)) for op in operations_of(document)}
    # the key actions are one Quart rule, three documented paths
    expanded = {(m, p.replace("/{}/{}", "/{}/" + a) if p == "/admin/v1/keys/{}/{}" else p)
                for m, p in rules for a in ("disable", "enable", "revoke")}
    assert described == expanded
    for op in operations_of(document):
        assert op.scope in ("read", "write", "money", "keys", "admin")


async def test_the_openapi_document_is_served_to_a_read_token(admin):
    token = await admin.token("read")
    served = await admin.as_(token, "GET", "/admin/v1/openapi.json")
    assert served.status_code == 200 and served.json()["openapi"] == "3.1.0"
    assert served.json()["paths"]["/admin/v1/accounts/{account}/payments"]["post"]["x-scope"] == "money"
    _error(await admin.as_(None, "GET", "/admin/v1/openapi.json"), 401, "missing_admin_token")
