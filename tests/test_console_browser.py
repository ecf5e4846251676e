"""The web console in a real browser: Debian's Chromium driven by Playwright.

An account holder signs in, creates a key, calls the API with it through the official
openai SDK, finds that request in the usage log with its exact cost, disables the key
(the SDK gets 401), enables and finally revokes it. Forged forms and another
account's key ids are refused. Everything runs against the session's real daemon.
"""

from __future__ import annotations

import openai
import pytest

from gatewayd.console.formatting import local_time, usd
from tests.console_helpers import PASSWORD, ConsoleClient, account_with_password, browser_missing, launch
from tests.live import unique_email

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MINI = {"input": 400, "output": 1600, "cached": 100}  # gpt-4.1-mini, nano-USD per token


def mini_cost(usage) -> int:
    cached = (usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0) or 0
    return (usage.prompt_tokens - cached) * MINI["input"] + cached * MINI["cached"] + \
        usage.completion_tokens * MINI["output"]


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


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    yield pg
    context.close()


def sign_in(page, gateway, email: str, password: str = PASSWORD) -> None:
    page.goto(gateway.url + "/console/")
    assert page.url.endswith("/console/signin")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    page.click("button:has-text('Sign in')")
    page.wait_for_url("**/console/keys")


def sdk(gateway, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)


def test_key_lifecycle_seen_from_the_console_and_the_sdk(page, gateway):
    from playwright.sync_api import expect

    tz = "Asia/Kathmandu"  # UTC+05:45: times must really be converted, to the quarter hour
    email = unique_email("console")
    account = account_with_password(gateway.admin, email, timezone=tz)
    sign_in(page, gateway, email)
    assert page.text_content("h1").strip() == "API keys"
    assert "$10.000000" in page.text_content(".balance-pill")

    # create a key with a spend limit and a one-model list
    page.click("#new-key")
    page.fill("#name", "browser key")
    page.fill("#spend_limit", "2.50")
    page.check("input[name=model_scope][value=selected]")
    page.check("input[name=models][value='gpt-4.1-mini']")
    page.click("#save-key")
    page.wait_for_url("**/created")
    secret = page.input_value("#secret")
    assert secret.startswith("sk-") and len(secret) == 51
    page.click("#copy-secret")
    page.wait_for_selector("#copy-secret:has-text('Copied')")
    page.reload()  # shown once: a reload does not show it again
    assert page.query_selector("#secret") is None
    assert secret not in page.content()
    assert "cannot be shown again" in page.text_content("main")

    # the secret works with the official SDK, within its model list
    raw = sdk(gateway, secret).chat.completions.with_raw_response.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": "Hello from the console test"}])
    request_id = raw.headers["x-request-id"]
    cost = mini_cost(raw.parse().usage)
    assert cost > 0
    with pytest.raises(openai.PermissionDeniedError):
        sdk(gateway, secret).chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "x"}])

    # the request is in the usage log: key name, model, tokens, exact cost, local time
    page.click("nav >> text=Usage")
    page.wait_for_url("**/console/usage")
    row = page.locator(f"tr[data-request-id='{request_id}']")
    row.wait_for()
    cells = [c.strip() for c in row.locator("td").all_text_contents()]
    usage = raw.parse().usage
    [stored] = [r for r in gateway.admin.usage(account["id"]) if r["request_id"] == request_id]
    assert cells == [
        local_time(stored["created_at"], tz), "browser key", "gpt-4.1-mini", f"{usage.prompt_tokens:,}",
        f"{usage.completion_tokens:,}", "0", usd(cost), "ok",
    ]
    assert page.locator("svg.chart rect").count() >= 1
    assert "gpt-4.1-mini" in page.text_content(".legend")

    # the key list shows what was spent against the limit, the list of models, last use
    page.click("nav >> text=Keys")
    page.wait_for_url("**/console/keys")
    key_row = page.locator("#keys-table tr", has_text="browser key")
    text = key_row.text_content()
    assert usd(cost) in text and "$2.500000" in text and "gpt-4.1-mini" in text and "Never" not in text
    assert key_row.locator(".badge").text_content().strip() == "enabled"

    # disable: the SDK gets 401; enable: it works again
    key_row.locator("button:has-text('Disable')").click()
    expect(page.locator("#keys-table tr", has_text="browser key").locator(".badge")).to_have_text("disabled")
    with pytest.raises(openai.AuthenticationError):
        sdk(gateway, secret).chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}])
    page.locator("#keys-table tr", has_text="browser key").locator("button:has-text('Enable')").click()
    expect(page.locator("#keys-table tr", has_text="browser key").locator(".badge")).to_have_text("enabled")
    sdk(gateway, secret).chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}])

    # edit: a 51-character name is refused with the rule in the form, the input kept
    page.locator("#keys-table tr", has_text="browser key").locator("td.name a").click()
    page.fill("#name", "n" * 51)
    page.fill("#spend_limit", "3")
    page.click("#save-key")
    assert "at most 50 are allowed" in page.text_content("#form-error")
    assert page.input_value("#spend_limit") == "3"
    page.fill("#name", "renamed key")
    page.click("#save-key")
    page.wait_for_url("**/console/keys")
    assert "$3.000000" in page.locator("#keys-table tr", has_text="renamed key").text_content()

    # revoke needs the confirmation; then the key is gone for good
    page.locator("#keys-table tr", has_text="renamed key").locator("a:has-text('Revoke')").click()
    page.fill("#confirm", "wrong name")
    page.click("#revoke")
    expect(page.locator(".alert-error")).to_contain_text("Type the key's name exactly")
    page.fill("#confirm", "renamed key")
    page.click("#revoke")
    page.wait_for_url("**/console/keys")
    assert page.locator("#keys-table tr", has_text="renamed key").count() == 0
    assert "1 revoked key" in page.text_content("details.revoked summary")
    with pytest.raises(openai.AuthenticationError):
        sdk(gateway, secret).chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}])

    # sign out: the console is closed again
    page.click("button:has-text('Sign out')")
    page.wait_for_url("**/console/signin")
    page.goto(gateway.url + "/console/keys")
    assert page.url.endswith("/console/signin")


def test_forged_forms_are_refused(page, gateway):
    email = unique_email("csrf")
    account = account_with_password(gateway.admin, email)
    sign_in(page, gateway, email)
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    assert cookies, "the browser holds no session cookie"
    [cookie] = [c for c in page.context.cookies() if c["name"] == "gatewayd_console"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"

    forger = ConsoleClient(gateway.url, cookies=cookies)
    try:
        assert forger.get("/console/keys").status_code == 200  # the stolen cookie alone is a session...
        no_token = forger.http.post("/console/keys/new", data={"name": "forged"})
        assert no_token.status_code == 400
        wrong = forger.http.post("/console/keys/new", data={"name": "forged", "csrf_token": "0" * 64})
        assert wrong.status_code == 403
        other = ConsoleClient(gateway.url)  # a valid token, but of another (anonymous) session
        stolen_token = other.csrf()
        other.close()
        assert forger.http.post("/console/keys/new", data={"name": "forged", "csrf_token": stolen_token}) \
            .status_code == 403
        assert forger.http.post("/console/signout", data={}).status_code == 400
    finally:
        forger.close()
    assert gateway.admin.call("GET", f"/accounts/{account['id']}/keys")["data"] == []
    page.reload()
    assert page.url.endswith("/console/keys")  # the forged sign-out did not end the session


def test_another_accounts_key_is_not_reachable(page, gateway):
    other = account_with_password(gateway.admin, unique_email("victim"))
    victim_key = gateway.admin.key(other["id"], name="victim key")
    email = unique_email("intruder")
    account_with_password(gateway.admin, email)
    sign_in(page, gateway, email)
    for path in (f"/console/keys/{victim_key['id']}", f"/console/keys/{victim_key['id']}/revoke",
                 f"/console/keys/{victim_key['id']}/created", f"/console/usage?key={victim_key['id']}",
                 f"/console/usage.csv?key={victim_key['id']}"):
        response = page.goto(gateway.url + path)
        assert response.status == 404, path
    assert "victim key" not in page.content()
    # a POST with this session's valid token cannot touch the key either
    page.goto(gateway.url + "/console/keys")
    token = page.get_attribute("input[name=csrf_token]", "value")
    for action in ("disable", "revoke"):
        response = page.request.post(gateway.url + f"/console/keys/{victim_key['id']}/{action}",
                                     form={"csrf_token": token, "confirm": "victim key"})
        assert response.status == 404
    response = page.request.post(gateway.url + f"/console/keys/{victim_key['id']}",
                                 form={"csrf_token": token, "name": "hijacked"})
    assert response.status == 404
    assert gateway.admin.call("GET", f"/keys/{victim_key['id']}")["state"] == "enabled"
    assert gateway.admin.call("GET", f"/keys/{victim_key['id']}")["name"] == "victim key"


def _inside(page, selector: str) -> dict:
    """Where ``selector``'s first element is, against the viewport: visible and not past its right edge."""
    element = page.locator(selector).first
    box = element.bounding_box() or {"x": 0, "width": 0}
    return {"visible": element.is_visible(), "left": box["x"], "right": box["x"] + box["width"],
            "width": page.viewport_size["width"]}


@pytest.mark.parametrize("width", [360, 390, 414, 1280])
def test_every_page_fits_a_phone_and_a_desktop(browser, gateway, width):
    """Issue 32 point 7: no horizontal scroll at phone widths, Sign out and the key table's spend
    and actions reachable, the chart's labels at least 11 px, the Models page there too."""
    email = unique_email("phone")
    account = account_with_password(gateway.admin, email)
    key = gateway.admin.key(account["id"], name="a rather long key name for a phone", spend_limit_nano=5 * 10**9,
                            models=["gpt-4.1-mini", "claude-sonnet-4-5"])
    sdk(gateway, key["secret"]).chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": "hello"}])
    context = browser.new_context(viewport={"width": width, "height": 800})
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        sign_in(page, gateway, email)
        for path in ("/console/keys", "/console/usage", "/console/models", "/console/balance", "/console/keys/new"):
            page.goto(gateway.url + path)
            overflow = page.evaluate("document.documentElement.scrollWidth - innerWidth")
            assert overflow <= 0, f"{path} at {width} px scrolls sideways by {overflow} px"
            signout = _inside(page, "button:has-text('Sign out')")
            assert signout["visible"] and signout["right"] <= signout["width"], (path, signout)
        page.goto(gateway.url + "/console/keys")
        row = f"#keys-table tr[data-key-id='{key['id']}']"
        for cell in (f"{row} td.num", f"{row} td.actions button", f"{row} td.actions a"):
            where = _inside(page, cell)
            assert where["visible"] and where["right"] <= where["width"] and where["left"] >= 0, (cell, where)
        page.goto(gateway.url + "/console/usage")
        scale = page.evaluate("""() => { const svg = document.querySelector('svg.chart');
                                   return svg.getBoundingClientRect().width / svg.viewBox.baseVal.width; }""")
        sizes = page.evaluate("[...document.querySelectorAll('svg.chart text')].map(t => +t.getAttribute('font-size'))")
        assert sizes and min(sizes) * scale >= 11, (width, scale, sizes)
    finally:
        context.close()
