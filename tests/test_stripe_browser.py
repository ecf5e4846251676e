"""Add funds in a real browser (Debian's Chromium via Playwright): the form, the redirect to
the payment page (the loopback fake's), the webhook's credit, and the Balance page after."""

from __future__ import annotations

import pytest

from tests.console_helpers import PASSWORD, account_with_password, browser_missing, launch
from tests.live import unique_email
from tests.stripe_helpers import daemon_fixture, deliver, fake_fixture  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_add_funds_in_a_browser(daemon, fake):
    reason = browser_missing()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    email = unique_email("card-browser")
    account = account_with_password(daemon.admin, email, timezone="Asia/Kathmandu")
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page()
        page.set_default_timeout(15_000)
        page.goto(daemon.url + "/console/signin")
        page.fill("input[name=email]", email)
        page.fill("input[name=password]", PASSWORD)
        page.click("button:has-text('Sign in')")
        page.wait_for_url("**/console/keys")
        page.goto(daemon.url + "/console/balance")
        page.fill("#amount", "12.34")
        page.click("button:has-text('Pay by card')")
        page.wait_for_url(fake.url + "/c/pay/**")  # the browser followed the 303 to the payment page
        session_id = page.text_content("#checkout")
        assert fake.sessions[session_id]["amount_total"] == 1234
        assert deliver(daemon.url, "checkout.session.completed", fake.pay(session_id)).status_code == 200
        page.goto(fake.sessions[session_id]["success_url"])  # Stripe sends the browser back
        assert "Your balance shows the payment" in page.text_content("#checkout-notice")
        assert page.text_content("#balance").strip() == "$22.340000"
        rows = page.locator("#payments-table tbody tr")
        assert rows.count() == 2
        assert "Card" in rows.nth(0).text_content() and "$12.340000" in rows.nth(0).text_content()
        browser.close()
    assert daemon.admin.balance(account["id"])["balance_nano"] == 22_340_000_000
