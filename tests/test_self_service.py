"""Sign-up and password reset by email link (issue 34, points 1 and 2), in process: the real
console on the real app, each store behind its contract (a SQLite file, a PostgreSQL
database), and a real SMTP server on loopback (aiosmtpd) that receives the links.

What a careful user of a self-service console expects, each asserted:
- an email with a link, the account made only when the link is followed, single-use and
  expiring links, a forged link refused;
- the same page for a known and an unknown email (no account enumeration);
- the throttle per email and client address;
- a reset that signs out every other session and ends the lockout of the holder;
- ``signup = "off"`` and ``"invite"`` closing the form; a mode that could send no link
  refused at start.
"""

from __future__ import annotations

import re
from contextlib import asynccontextmanager
from email.message import Message
from typing import AsyncIterator

import httpx
import pytest
import trio

from gatewayd.config import load_config
from gatewayd.config_tables import ConfigError
from gatewayd.console import mount_console
from gatewayd.app import create_app
from gatewayd.directory import Directory
from gatewayd.self_service import Links, LinkRefused, read_settings
from tests.alert_receivers import SmtpSink
from tests.console_helpers import csrf_of

PUBLIC = "https://gw.example.com"
LINK = re.compile(re.escape(PUBLIC) + r"/console/(signup|reset)/confirm\?token=([A-Za-z0-9_.\-]+)")


class Site:
    """The console of one gateway and a browser-like client (cookies kept)."""

    def __init__(self, console, http: httpx.AsyncClient, sink: SmtpSink) -> None:
        self.console = console
        self.http = http
        self.sink = sink

    async def form(self, path: str, data: dict, *, page: str | None = None) -> httpx.Response:
        token = csrf_of((await self.http.get(page or path)).text)
        return await self.http.post(path, data={**data, "csrf_token": token})

    async def mail_to(self, address: str) -> list[Message]:
        await self.console.outbox.drained()
        return self.sink.to(address)

    async def link_in_last_mail(self, address: str) -> tuple[str, str]:
        messages = await self.mail_to(address)
        assert messages, f"no mail to {address}"
        body = messages[-1].get_payload(decode=True).decode()
        match = LINK.search(body)
        assert match, body
        return match.group(1), match.group(2)


@asynccontextmanager
async def site(tmp_path, store, *, signup: str = "open", public_url: str | None = PUBLIC, extra: str = "",
               env: dict | None = None, mail: bool = True) -> AsyncIterator[Site]:
    sink = SmtpSink()
    console_table = f'[console]\nsignup = "{signup}"\n' + (f'public_url = "{public_url}/"\n' if public_url else "")
    console_table += extra
    config_file = tmp_path / "gatewayd.toml"
    config_file.write_text(
        f'[server]\ndata_dir = "{tmp_path}"\n'
        + (f'[alerts.smtp]\nhost = "127.0.0.1"\nport = {sink.port}\nfrom = "gateway@example.com"\nstarttls = false\n'
           if mail else "")
        + console_table
    )
    config = load_config(config_file, environ=env or {})
    directory = Directory(config, store)
    await directory.load()
    app = create_app()
    console = await mount_console(app, directory, store, config)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(console.outbox.run)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=("203.0.113.7", 4000)),
                                         base_url="http://gateway.test") as http:
                yield Site(console, http, sink)
            nursery.cancel_scope.cancel()
    finally:
        sink.stop()


async def test_sign_up_by_email_link_creates_the_account_once(tmp_path, store):
    async with site(tmp_path, store) as s:
        signin = await s.http.get("/console/signin")
        assert "/console/signup" in signin.text and "/console/reset" in signin.text
        sent = await s.form("/console/signup", {"email": "New.Person@Example.com"})
        assert sent.status_code == 200 and "Check the inbox" in sent.text
        assert "new.person@example.com" not in s.console.directory.accounts_by_email  # not before the link
        kind, token = await s.link_in_last_mail("New.Person@Example.com")
        assert kind == "signup"

        page = await s.http.get(f"/console/signup/confirm?token={token}")
        assert page.status_code == 200 and "new.person@example.com" in page.text
        mismatch = await s.form("/console/signup/confirm", {"token": token, "password": "long enough 1",
                                                            "password_again": "long enough 2"},
                                page=f"/console/signup/confirm?token={token}")
        assert mismatch.status_code == 400 and "differ" in mismatch.text
        bad_zone = await s.form("/console/signup/confirm", {"token": token, "password": "long enough 1",
                                                            "password_again": "long enough 1", "timezone": "Mars/Base"},
                                page=f"/console/signup/confirm?token={token}")
        assert bad_zone.status_code == 400 and "time zone" in bad_zone.text.lower()
        made = await s.form("/console/signup/confirm", {"token": token, "password": "long enough 1",
                                                        "password_again": "long enough 1", "name": "New",
                                                        "timezone": "Europe/Paris"},
                            page=f"/console/signup/confirm?token={token}")
        assert made.status_code == 302 and made.headers["location"].endswith("/console/keys")
        account = s.console.directory.accounts_by_email["new.person@example.com"]
        assert (account.name, account.timezone, account.balance_nano, account.total_paid_nano) == (
            "New", "Europe/Paris", 0, 0)
        assert (await s.http.get("/console/keys")).status_code == 200  # signed in by the confirmation

        again = await s.http.get(f"/console/signup/confirm?token={token}")
        assert again.status_code == 400 and "used already" in again.text  # single-use
        assert len([a for a in s.console.directory.accounts.values() if a.email.lower() == account.email]) == 1


async def test_known_and_unknown_emails_get_the_same_page(tmp_path, store):
    async with site(tmp_path, store) as s:
        await s.console.directory.create_account("holder@example.com", password="holder password")
        known = await s.form("/console/signup", {"email": "holder@example.com"})
        unknown = await s.form("/console/signup", {"email": "stranger@example.com"})
        assert known.status_code == unknown.status_code == 200

        def scrub(html: str, email: str) -> str:
            return re.sub(r'name="csrf_token" value="[^"]+"', "", html).replace(email, "EMAIL")

        assert scrub(known.text, "holder@example.com") == scrub(unknown.text, "stranger@example.com")
        # the difference is in the mailbox, where only the holder reads it: a reset link, no sign-up
        assert (await s.link_in_last_mail("holder@example.com"))[0] == "reset"
        assert (await s.link_in_last_mail("stranger@example.com"))[0] == "signup"
        reset_known = await s.form("/console/reset", {"email": "holder@example.com"})
        reset_unknown = await s.form("/console/reset", {"email": "nobody@example.com"})
        assert scrub(reset_known.text, "holder@example.com") == scrub(reset_unknown.text, "nobody@example.com")
        assert await s.mail_to("nobody@example.com") == []


async def test_reset_signs_out_every_session_and_ends_the_lockout(tmp_path, store):
    async with site(tmp_path, store) as s:
        account = await s.console.directory.create_account("holder@example.com", password="old password 1")
        # another browser signed in with the old password
        other = httpx.AsyncClient(transport=s.http._transport, base_url="http://gateway.test")
        token = csrf_of((await other.get("/console/signin")).text)
        signed = await other.post("/console/signin", data={"email": account.email, "password": "old password 1",
                                                           "csrf_token": token})
        assert signed.status_code == 302 and (await other.get("/console/keys")).status_code == 200
        # someone guesses from elsewhere until the email is locked
        for _ in range(25):
            await s.console.throttle.reserve(account.email, "198.51.100.9")
        assert await s.console.throttle.reserve(account.email, "198.51.100.9") is not None

        await s.form("/console/reset", {"email": "holder@example.com"})
        kind, link = await s.link_in_last_mail("holder@example.com")
        assert kind == "reset"
        done = await s.form("/console/reset/confirm", {"token": link, "password": "new password 1",
                                                       "password_again": "new password 1"},
                            page=f"/console/reset/confirm?token={link}")
        assert done.status_code == 302
        assert (await s.http.get("/console/keys")).status_code == 200  # this browser: signed in
        assert (await other.get("/console/keys")).status_code == 302  # the other: signed out
        used = await s.http.get(f"/console/reset/confirm?token={link}")
        assert used.status_code == 400 and "used already" in used.text  # single-use
        # the holder's own address is free of the lockout now
        assert await s.console.throttle.reserve(account.email, "203.0.113.7") is None
        await other.aclose()


async def test_asking_for_links_is_throttled_per_email_and_address(tmp_path, store):
    async with site(tmp_path, store) as s:
        statuses = [(await s.form("/console/signup", {"email": "flood@example.com"})).status_code for _ in range(5)]
        assert statuses[:3] == [200, 200, 200] and statuses[3] == 429
        assert len(await s.mail_to("flood@example.com")) == 3  # three letters, no more


async def test_forged_expired_and_foreign_links_are_refused(tmp_path, store):
    async with site(tmp_path, store) as s:
        await s.form("/console/signup", {"email": "someone@example.com"})
        _, token = await s.link_in_last_mail("someone@example.com")
        forged = token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")
        page = await s.http.get(f"/console/signup/confirm?token={forged}")
        assert page.status_code == 400 and "not valid" in page.text
        # a sign-up token is no reset token, and the reverse
        assert (await s.http.get(f"/console/reset/confirm?token={token}")).status_code == 400
        assert (await s.http.get("/console/signup/confirm")).status_code == 400  # no token at all
        links = Links(b"another secret entirely")
        with pytest.raises(LinkRefused):
            links.read_signup(token, 3600)
        with pytest.raises(LinkRefused) as expired:
            s.console.links.read_signup(token, -1)
        assert expired.value.expired


async def test_signup_off_and_invite_close_the_form(tmp_path, store):
    async with site(tmp_path, store, signup="off") as s:
        assert (await s.http.get("/console/signup")).status_code == 404
        assert "/console/signup" not in (await s.http.get("/console/signin")).text
        token = s.console.links.signup_token("late@example.com", invited=False)
        assert (await s.http.get(f"/console/signup/confirm?token={token}")).status_code == 403
    async with site(tmp_path, store, signup="invite") as s:
        assert (await s.http.get("/console/signup")).status_code == 403
        uninvited = s.console.links.signup_token("walkin@example.com", invited=False)
        assert (await s.http.get(f"/console/signup/confirm?token={uninvited}")).status_code == 403
        invited = s.console.links.signup_token("guest@example.com", invited=True)
        assert (await s.http.get(f"/console/signup/confirm?token={invited}")).status_code == 200


def test_a_mode_that_could_send_no_link_is_refused_at_start():
    with pytest.raises(ConfigError, match="public_url"):
        read_settings({"signup": "open"}, mail_configured=True)
    with pytest.raises(ConfigError, match="alerts.smtp"):
        read_settings({"signup": "invite", "public_url": PUBLIC}, mail_configured=False)
    with pytest.raises(ConfigError, match="console.signup"):
        read_settings({"signup": "sometimes"}, mail_configured=True)
    with pytest.raises(ConfigError, match="console.colour"):
        read_settings({"colour": "blue"}, mail_configured=True)
    assert read_settings(None, mail_configured=False).signup == "off"
    assert read_settings({"public_url": PUBLIC + "/console/"}, mail_configured=True).public_url == PUBLIC


async def test_operator_invitation_by_admin_api(tmp_path, store):
    """``gatewayctl account invite`` (POST /admin/v1/invitations): an emailed link that opens an
    account in ``invite`` mode; refused for an existing email, and while sign-up is off."""
    import time

    from gatewayd.admin.api import create_admin_app
    from gatewayd.console.views_self_service import invite

    async with site(tmp_path, store, signup="invite") as s:
        admin_app = create_admin_app(s.console.directory, store, time.time,
                                     invite=lambda email: invite(s.console, email))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=admin_app), base_url="http://admin") as admin:
            sent = await admin.post("/admin/v1/invitations", json={"email": "Guest@Example.com"})
            assert sent.status_code == 201, sent.text
            assert sent.json()["emailed"] is True and sent.json()["link"].startswith(PUBLIC + "/console/signup/confirm")
            kind, token = await s.link_in_last_mail("Guest@Example.com")
            assert kind == "signup" and token in sent.json()["link"]
            made = await s.form("/console/signup/confirm", {"token": token, "password": "guest password",
                                                            "password_again": "guest password"},
                                page=f"/console/signup/confirm?token={token}")
            assert made.status_code == 302 and "guest@example.com" in s.console.directory.accounts_by_email
            again = await admin.post("/admin/v1/invitations", json={"email": "guest@example.com"})
            assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
            bad = await admin.post("/admin/v1/invitations", json={"email": "not an email"})
            assert bad.status_code == 400
    async with site(tmp_path, store, signup="off") as s:
        admin_app = create_admin_app(s.console.directory, store, time.time,
                                     invite=lambda email: invite(s.console, email))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=admin_app), base_url="http://admin") as admin:
            off = await admin.post("/admin/v1/invitations", json={"email": "late@example.com"})
            assert off.status_code == 409 and off.json()["error"]["code"] == "signup_off"
