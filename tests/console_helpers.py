"""Helpers for the console tests: accounts with passwords, an httpx console client, the browser.

The browser is Debian's Chromium driven by Playwright (never a downloaded browser);
``docs/screenshots.py`` launches it the same way.
"""

from __future__ import annotations

import os
import re

import httpx

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
PASSWORD = "correct horse battery staple"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    return None


def launch(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)


def account_with_password(admin, email: str, *, paid_usd: str | None = "10", timezone: str = "UTC",
                          password: str = PASSWORD) -> dict:
    account = admin.call("POST", "/accounts", {"email": email, "timezone": timezone, "password": password})
    if paid_usd:
        from gatewayd.money import usd_to_nano

        admin.call("POST", f"/accounts/{account['id']}/payments", {"amount_nano": usd_to_nano(paid_usd)})
    return admin.call("GET", f"/accounts/{account['id']}")


def csrf_of(html: str) -> str:
    match = _CSRF.search(html)
    assert match, "no CSRF token on the page"
    return match.group(1)


class ConsoleClient:
    """The console over plain HTTP (cookies kept), for what a browser test need not show."""

    def __init__(self, base_url: str, **kw) -> None:
        self.http = httpx.Client(base_url=base_url, follow_redirects=False, timeout=30, **kw)

    def get(self, path: str, **kw) -> httpx.Response:
        return self.http.get(path, **kw)

    def csrf(self, path: str = "/console/signin") -> str:
        return csrf_of(self.http.get(path).text)

    def sign_in(self, email: str, password: str = PASSWORD) -> httpx.Response:
        token = self.csrf("/console/signin")
        return self.http.post("/console/signin", data={"email": email, "password": password, "csrf_token": token})

    def post(self, path: str, data: dict, *, token_from: str = "/console/keys") -> httpx.Response:
        """POST a form with the CSRF token of this session (taken from a page of the console)."""
        return self.http.post(path, data={**data, "csrf_token": self.csrf(token_from)})

    def close(self) -> None:
        self.http.close()
