"""The operator console at /admin/ over HTTP in this process (tests.admin_http): sign-in with an
admin token or the operator password, the pages, CSRF, scopes and the audit log. The same
pages in Chromium, at phone width: tests/test_operator_console_browser.py."""

from __future__ import annotations

import datetime as dt
import html
import re
from pathlib import Path

import pytest

from gatewayd.admin.gate import LOCAL_OPERATOR
from gatewayd.passwords import hash_password
from gatewayd.store.admin_sql import OPERATOR_PASSWORD
from tests.admin_http import admin_http

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
USD = 10**9


@pytest.fixture
async def admin(tmp_path):
    made = await admin_http(tmp_path)
    try:
        yield made
    finally:
        await made.aclose()


async def _csrf(admin, path: str = "/admin/signin") -> str:
    page = await admin.http.get(path)
    return CSRF.search(page.text).group(1)


async def _sign_in(admin, **form: str):
    return await admin.http.post("/admin/signin", data={**form, "csrf_token": await _csrf(admin)})


async def _post(admin, path: str, data: dict, page: str) -> object:
    return await admin.http.post(path, data={**data, "csrf_token": await _csrf(admin, page)})


async def _account(admin, email="ann@example.com", paid=0) -> str:
    status, doc = await admin.gate.call(LOCAL_OPERATOR, "POST", "/admin/v1/accounts", {"email": email})
    assert status == 201
    if paid:
        await admin.gate.call(LOCAL_OPERATOR, "POST", f"/admin/v1/accounts/{doc['id']}/payments", {"amount_nano": paid})
    return doc["id"]


async def test_pages_need_a_sign_in_and_a_bad_token_or_password_is_refused(admin):
    for path in ("/admin/accounts", "/admin/codes", "/admin/usage", "/admin/audit", "/admin/routes", "/admin/prices"):
        answer = await admin.http.get(path)
        assert answer.status_code == 302 and answer.headers["location"].endswith("/admin/signin")
    assert (await _sign_in(admin, token="gwa-" + "x" * 48)).status_code == 401
    assert (await _sign_in(admin, token="sk-abc")).status_code == 401
    assert (await _sign_in(admin, password="no password set yet")).status_code == 401
    no_csrf = await admin.http.post("/admin/signin", data={"token": "gwa-x"})
    assert no_csrf.status_code == 400


async def test_a_token_signs_in_with_its_scopes_and_a_revoked_token_signs_out(admin):
    account = await _account(admin, paid=10 * USD)
    token = await admin.token("read")
    signed = await _sign_in(admin, token=token)
    assert signed.status_code == 303 and signed.headers["location"].endswith("/admin/accounts")
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/admin" in cookie
    listing = await admin.http.get("/admin/accounts?q=ann")
    assert listing.status_code == 200 and "ann@example.com" in listing.text and "$10.00" in listing.text
    assert "content-security-policy" in listing.headers
    page = await admin.http.get(f"/admin/accounts/{account}")
    assert page.status_code == 200 and 'id="pay-form"' not in page.text  # read: no money forms
    # a read token's form post is refused by the API's scope check, shown as a page
    refused = await _post(admin, f"/admin/accounts/{account}/pay", {"amount": "5", "note": "x"},
                          f"/admin/accounts/{account}")
    assert refused.status_code == 403 and "money" in refused.text
    assert admin.directory.accounts[account].total_paid_nano == 10 * USD
    [row] = await admin.store.admin_tokens()
    await admin.gate.call(LOCAL_OPERATOR, "POST", f"/admin/v1/admin-tokens/{row.id}/revoke")
    assert (await admin.http.get("/admin/accounts")).status_code == 302  # signed out at once


async def test_the_operator_password_signs_in_and_pays_adjusts_and_revokes(admin):
    account = await _account(admin)
    # (set as gatewayctl operator password stores it, with cheap scrypt parameters: the hash names
    # its own, and a full-cost hash is half a second of CPU; that path: test_gatewayctl_operators.py)
    await admin.store.set_operator_setting(OPERATOR_PASSWORD, hash_password("a long operator password", n=2**10))
    assert (await _sign_in(admin, password="a wrong operator password")).status_code == 401
    assert (await _sign_in(admin, password="a long operator password")).status_code == 303
    page = f"/admin/accounts/{account}"
    paid = await _post(admin, f"{page}/pay", {"amount": "12.50", "note": "invoice 3"}, page)
    assert paid.status_code == 303
    adjusted = await _post(admin, f"{page}/adjust", {"amount": "-2.25", "note": "refund of a failed batch"}, page)
    assert adjusted.status_code == 303
    shown = await admin.http.get(page)
    assert "$10.25" in shown.text and "invoice 3" in shown.text and "adjustment" in shown.text
    # below a zero balance: refused with the reason, unless "allow the balance below zero" is ticked
    below = await _post(admin, f"{page}/adjust", {"amount": "-10.26", "note": "chargeback"}, page)
    assert below.status_code == 409 and "would take the balance of $10.250000 below zero" in below.text
    assert 'name="force"' in shown.text
    assert admin.directory.accounts[account].balance_nano == 10_250_000_000
    bad = await _post(admin, f"{page}/pay", {"amount": "ten", "note": ""}, page)
    assert bad.status_code == 400
    _, key = await admin.gate.call(LOCAL_OPERATOR, "POST", f"/admin/v1/accounts/{account}/keys", {"name": "k1"})
    revoked = await _post(admin, f"/admin/keys/{key['id']}/revoke", {}, page)
    assert revoked.status_code == 303 and admin.directory.keys[key["id"]].status == "deleted"
    # every console action is in the audit log, as the console's operator
    status, log = await admin.gate.call(LOCAL_OPERATOR, "GET", "/admin/v1/audit-log", query={"changes": "true"})
    console_rows = [r for r in log["data"] if r["via"] == "console"]
    assert {r["path"] for r in console_rows} >= {f"/admin/v1/accounts/{account}/payments",
                                                  f"/admin/v1/accounts/{account}/adjustments",
                                                  f"/admin/v1/keys/{key['id']}/revoke"}
    assert all(r["actor"] == "operator" and r["address"] == "127.0.0.1" for r in console_rows)
    audit_page = await admin.http.get("/admin/audit?changes=1")
    assert audit_page.status_code == 200 and "/adjustments" in audit_page.text
    # a new password ends the sessions of the old one
    await admin.store.set_operator_setting(OPERATOR_PASSWORD, hash_password("another long password", n=2**10))
    assert (await admin.http.get("/admin/accounts")).status_code == 302


async def test_codes_usage_csv_routes_and_prices_pages(admin):
    await _account(admin)
    token = await admin.token("admin")
    await _sign_in(admin, token=token)
    made = await _post(admin, "/admin/codes", {"amount": "5", "count": "2", "note": "promo"}, "/admin/codes")
    assert made.status_code == 200 and made.text.count("· $5.00") == 2
    code_id = re.search(r'data-code-id="([^"]+)"', made.text).group(1)
    assert (await _post(admin, f"/admin/codes/{code_id}/revoke", {}, "/admin/codes")).status_code == 303
    assert "revoked" in (await admin.http.get("/admin/codes")).text
    usage = await admin.http.get("/admin/usage")
    assert usage.status_code == 200 and "<svg" in usage.text and 'id="revenue"' in usage.text
    csv = await admin.http.get("/admin/usage.csv?since=2026-01-01&until=2026-01-31")
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    assert csv.text.splitlines()[0].startswith("day,model,requests")
    per_account = await admin.http.get("/admin/usage.csv?since=2026-01-01&until=2026-01-31&by=account")
    assert per_account.text.splitlines()[0].startswith("day,account_id,email,requests")
    assert (await admin.http.get("/admin/usage?by=account")).status_code == 200
    assert (await admin.http.get("/admin/usage?by=nothing")).status_code == 400
    assert (await admin.http.get("/admin/usage?since=2026-01-01&until=2026-12-31")).status_code == 400
    assert (await admin.http.get("/admin/usage?since=nope")).status_code == 400
    routes = await admin.http.get("/admin/routes")
    assert routes.status_code == 200 and "gpt-4.1-mini" in routes.text
    prices = await admin.http.get("/admin/prices")
    assert prices.status_code == 200 and "gpt-4.1-mini" in prices.text
    signout = await _post(admin, "/admin/signout", {}, "/admin/accounts")
    assert signout.status_code == 303 and (await admin.http.get("/admin/accounts")).status_code == 302


async def test_a_price_list_is_diffed_then_applied_with_the_write_scope(admin):
    token = await admin.token("write")
    await _sign_in(admin, token=token)
    price_list = (Path(__file__).parent / "data" / "litellm_prices.json").read_bytes()
    diffed = await admin.http.post("/admin/prices/import", data={"csrf_token": await _csrf(admin, "/admin/prices")},
                                   files={"price_list": ("prices.json", price_list, "application/json")})
    assert diffed.status_code == 200 and 'id="diff-table"' in diffed.text, diffed.text[-2000:]
    overlay = re.search(r'name="overlay" value="([^"]+)"', diffed.text).group(1)
    assert admin.directory.config.price_overlay == {}  # a diff changes nothing
    applied = await admin.http.post("/admin/prices/apply", data={"csrf_token": await _csrf(admin, "/admin/prices"),
                                                                 "overlay": html.unescape(overlay)})
    assert applied.status_code == 200 and 'id="applied"' in applied.text
    assert admin.directory.config.price_overlay != {}
    not_json = await admin.http.post("/admin/prices/import", data={"csrf_token": await _csrf(admin, "/admin/prices")},
                                     files={"price_list": ("p.json", b"{nope", "application/json")})
    assert not_json.status_code == 400


async def test_revenue_per_day_by_model_and_by_account_in_the_page_and_the_csv(admin):
    from gatewayd.store.base import Hold, Settlement

    account_id = await _account(admin, "rev@example.com", paid=10 * USD)
    account = admin.directory.accounts[account_id]
    key, _ = await admin.directory.create_key(account, name="k")
    hold = await admin.store.reserve(account, key, 5_000_000, request_id="req_rev", model="gpt-4.1-mini",
                                     endpoint="chat", stream=False)
    assert isinstance(hold, Hold)
    await admin.store.settle(hold, Settlement("ok", 200, input_tokens=1000, output_tokens=100, cost_nano=1_234_567))
    await admin.store.flush()
    token = await admin.token("read")
    await _sign_in(admin, token=token)
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    page = await admin.http.get("/admin/usage")
    text = re.sub(r"<[^>]+>", "", page.text)  # (the sub-cent digits are in a span of their own)
    assert page.status_code == 200 and "Revenue$0.001235" in text.replace("\n", "").replace(" ", "")
    assert "gpt-4.1-mini" in text and "rev@example.com" in text  # the per-account table names the account
    by_model = (await admin.http.get(f"/admin/usage.csv?since={today}&until={today}")).text.splitlines()
    assert by_model[1] == f"{today},gpt-4.1-mini,1,1000,100,0,0,1234567,0.001234567"
    by_account = (await admin.http.get(f"/admin/usage.csv?since={today}&until={today}&by=account")).text.splitlines()
    assert by_account[1] == f"{today},{account_id},rev@example.com,1,1000,100,0,0,1234567,0.001234567"


async def test_console_forms_use_the_admin_body_budget_not_the_apis(tmp_path):
    # the account console's forms may hold 256 bytes at once: a 600-byte form would be a 503 there
    admin = await admin_http(tmp_path, "[admin]\nmax_body_bytes = 2048\n",
                             server_text="max_buffered_bytes = 1024\nconsole_buffered_bytes = 256\n")
    try:
        account = await _account(admin)
        await _sign_in(admin, token=await admin.token("money"))
        page = f"/admin/accounts/{account}"
        paid = await _post(admin, f"{page}/pay", {"amount": "1", "note": "n" * 500}, page)
        assert paid.status_code == 303, paid.text
        assert admin.directory.accounts[account].total_paid_nano == USD
        too_big = await _post(admin, f"{page}/pay", {"amount": "1", "note": "n" * 3000}, page)
        assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "request_too_large"
        assert admin.directory.accounts[account].total_paid_nano == USD and admin.gate.bodies.held == 0
    finally:
        await admin.aclose()
