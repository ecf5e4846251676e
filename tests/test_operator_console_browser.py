"""The operator console in a real browser (Debian's Chromium, Playwright), against the session's
daemon: sign in with an admin token, find an account, record a payment, revoke its key (the
SDK then gets 401), read it all in the audit log; and every page at phone width (390 px)
without the page scrolling sideways, the sign-out button on screen."""

from __future__ import annotations

import openai
import pytest

from tests.console_helpers import browser_missing, launch
from tests.live import unique_email

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def browser():
    reason = browser_missing()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


def _page(browser, width: int, height: int):
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(15_000)
    return context, page


def _sign_in(page, gateway, token: str) -> None:
    page.goto(gateway.url + "/admin/")
    assert page.url.endswith("/admin/signin")
    page.fill("#token", token)
    page.click("#signin")
    page.wait_for_url("**/admin/accounts")


def test_an_operator_pays_revokes_a_key_and_reads_the_audit_log(browser, gateway):
    from playwright.sync_api import expect

    email = unique_email("operator")
    account = gateway.admin.account(email, paid_usd="3")
    key = gateway.admin.key(account["id"], "to revoke")
    token = gateway.admin.call("POST", "/admin-tokens", {"name": "browser", "scopes": ["read", "money", "keys"]})
    context, page = _page(browser, 1280, 900)
    try:
        _sign_in(page, gateway, token["token"])
        page.fill("#search", email)
        page.press("#search", "Enter")
        page.click(f"a:has-text('{email}')")
        expect(page.locator("#total-paid")).to_have_text("$3.000000")
        page.fill("#pay-form input[name=amount]", "7.25")
        page.fill("#pay-form input[name=note]", "wire 42")
        page.click("#pay-form button")
        expect(page.locator("#notice")).to_have_text("Payment recorded.")
        expect(page.locator("#total-paid")).to_have_text("$10.250000")
        assert gateway.admin.balance(account["id"])["total_paid_nano"] == 10_250_000_000
        page.click(f"tr[data-key-id='{key['id']}'] button:has-text('Revoke')")
        expect(page.locator(f"tr[data-key-id='{key['id']}'] .badge")).to_have_text("deleted")
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key["secret"], max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            client.models.list()
        page.click("#operator-nav a:has-text('Audit log')")
        expect(page.locator("#audit-table")).to_contain_text(f"/admin/v1/keys/{key['id']}/revoke")
        expect(page.locator("#audit-table")).to_contain_text(f"/admin/v1/accounts/{account['id']}/payments")
        # a forged form (no CSRF token) changes nothing
        status = page.evaluate("""async (path) => (await fetch(path, {method: 'POST',
            headers: {'content-type': 'application/x-www-form-urlencoded'}, body: 'amount=100'})).status""",
                               f"/admin/accounts/{account['id']}/pay")
        assert status == 400
        assert gateway.admin.balance(account["id"])["total_paid_nano"] == 10_250_000_000
    finally:
        context.close()


def test_every_page_fits_a_phone(browser, gateway):
    account = gateway.admin.account(unique_email("phone"), paid_usd="1")
    gateway.admin.key(account["id"], "a key with a rather long name for a phone screen")
    token = gateway.admin.call("POST", "/admin-tokens", {"name": "phone", "scopes": ["admin"]})
    context, page = _page(browser, 390, 844)
    try:
        _sign_in(page, gateway, token["token"])
        for path in ("/admin/accounts", f"/admin/accounts/{account['id']}", "/admin/codes", "/admin/usage",
                     "/admin/routes", "/admin/prices", "/admin/audit"):
            page.goto(gateway.url + path)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, (path, width)
            box = page.locator("#signout").bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, (path, box)
            # on top, not under the page's content: what is at its centre is the button itself
            on_top = page.evaluate("""(b) => document.elementFromPoint(b.x + b.width / 2, b.y + b.height / 2)?.id""",
                                   box)
            assert on_top == "signout", (path, on_top)
    finally:
        context.close()
