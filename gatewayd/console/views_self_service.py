"""Sign-up and password reset by email link (``[console] signup``; ``gatewayd.self_service``).

Both start with a form that takes an email address and always answers the same page,
"check your inbox", whether or not the address has an account: the email is what differs.
An unknown address gets a sign-up link (when sign-up is open) and a known one a reset
link, sent by the daemon's outbox task (``gatewayd.mail.Outbox``) after the page has
answered, so neither the answer nor its timing tells a visitor which addresses have
accounts. Each asking takes an attempt from a throttle of its own (the sign-in throttle's
rules and store, keyed by the email and the client address), before anything is looked up.

The link leads to a second form (the password, and for sign-up the name and time zone);
posting it creates the account, or sets the password, and signs the visitor in with a
new session. A new password ends every other session of the account (their cookies carry
the old hash's fingerprint) and clears the sign-in lockouts of that email: a holder locked
out by someone else's guesses gets back in through their own mailbox.

The account made by sign-up starts as an operator's ``account create`` does: no balance,
the default group, and ``models_visible_after_paid`` applies.
"""

from __future__ import annotations

import logging
from typing import Any

from quart import Blueprint, g, redirect, request, url_for

from gatewayd.console.session import SignInThrottle, password_fingerprint
from gatewayd.console.web import Console, ConsoleError, caller_address, checked_form, page
from gatewayd.directory import DirectoryError, valid_email
from gatewayd.mail import Letter
from gatewayd.self_service import LinkRefused, ResetLink

log = logging.getLogger("gatewayd.console")

MAX_EMAIL = 254  # RFC 5321's limit on a path


def _wait_message(wait: int) -> str:
    minutes = -(-wait // 60)
    return f"Too many requests for this address. Try again in {minutes} minute{'s' if minutes != 1 else ''}."


def register(bp: Blueprint, console: Console) -> None:
    # asking for a link: 3 an email at one address, 5 an email from anywhere, 20 an address
    throttle = SignInThrottle(console.store, limit=3, account_limit=5, address_limit=20, scope="link")

    def settings():
        return console.config.console

    def links_possible() -> bool:
        alerts = console.config.alerts
        return settings().links_possible(alerts is not None and alerts.smtp is not None)

    def refused_link(error: LinkRefused, what: str, again: str) -> ConsoleError:
        if error.expired:
            return ConsoleError(400, "Link expired", f"This {what} link has expired. {again}")
        return ConsoleError(400, "Link not valid", f"This {what} link is not valid. {again}")

    async def asked_email() -> tuple[Any, str]:
        """The form and its email, after the throttle let it through."""
        form = await checked_form(console)
        email = form.get("email", "").strip()[:MAX_EMAIL]
        wait = await throttle.reserve(email, caller_address(console))
        if wait is not None:
            raise ConsoleError(429, "Too many requests", _wait_message(wait), {"Retry-After": str(wait)})
        return form, email

    def reset_letter(account) -> Letter:
        s = settings()
        token = console.links.reset_token(account.id, password_fingerprint(account.password_hash))
        minutes = s.reset_link_ttl_s // 60
        return Letter(to=account.email, kind="reset", subject="Reset your gatewayd password", text=(
            f"Someone (we hope you) asked to set a new password for {account.email}.\n\n"
            f"Set it here within {minutes} minutes:\n{s.link('reset/confirm', token)}\n\n"
            "If you did not ask, ignore this message: your password stays as it is."))

    def signup_letter(email: str, invited: bool) -> Letter:
        return _signup_letter(console, email, invited)[0]

    # -- sign-up ---------------------------------------------------------------------

    def signup_open() -> None:
        mode = settings().signup
        if mode == "off":
            raise ConsoleError(404, "Not found", "This gateway does not take sign-ups: "
                               "ask its operator for an account.")
        if mode == "invite":
            raise ConsoleError(403, "By invitation", "Accounts on this gateway are by invitation: "
                               "ask its operator for one. An invitation comes by email with its own link.")

    @bp.get("/signup")
    async def signup():
        signup_open()
        return await page(console, "signup.html", email="", sent=False)

    @bp.post("/signup")
    async def signup_post():
        signup_open()
        _form, email = await asked_email()
        if not valid_email(email):
            return await page(console, "signup.html", 400, email=email, sent=False,
                              error="That does not look like an email address.")
        account = console.directory.accounts_by_email.get(email.lower())
        if account is not None:  # already has one: tell the holder, where only they can read it
            console.outbox.post(reset_letter(account))
        else:
            console.outbox.post(signup_letter(email, invited=False))
        return await page(console, "signup.html", email=email, sent=True)

    async def signup_link(token: Any):
        try:
            link = console.links.read_signup(token, settings().signup_link_ttl_s)
        except LinkRefused as e:
            raise refused_link(e, "sign-up", "Sign up again to get a new one.") from None
        mode = settings().signup
        if mode == "off" or (mode == "invite" and not link.invited):
            raise ConsoleError(403, "Sign-up closed", "This gateway no longer takes sign-ups with this link: "
                               "ask its operator for an account.")
        if link.email in console.directory.accounts_by_email:
            raise ConsoleError(400, "Link used", "This link has been used already: the account exists. "
                               "Sign in, or reset the password if you forgot it.")
        return link

    @bp.get("/signup/confirm")
    async def signup_confirm():
        token = request.args.get("token")
        link = await signup_link(token)
        return await page(console, "signup_confirm.html", token=token, email=link.email, name="", tz="UTC")

    @bp.post("/signup/confirm")
    async def signup_confirm_post():
        form = await checked_form(console)
        token = form.get("token")
        link = await signup_link(token)
        name, tz = form.get("name", "").strip(), form.get("timezone", "UTC").strip() or "UTC"
        error = _password_mismatch(form)
        if error is None:
            try:
                account = await console.directory.create_account(link.email, name=name, timezone=tz,
                                                                 password=form.get("password", ""))
            except DirectoryError as e:
                if e.status == 409:  # a second tab posted the same link a moment ago
                    raise ConsoleError(400, "Link used", "This link has been used already: the account exists. "
                                       "Sign in.") from None
                error = f"{e.message[:1].upper()}{e.message[1:]}."
            else:
                log.info("console: account signed up", extra={"fields": {
                    "account_id": account.id, "invited": link.invited, "client": caller_address(console)}})
                g.session = console.sessions.signed_in(account.id, account.password_hash)
                return redirect(url_for("console.keys"))
        return await page(console, "signup_confirm.html", 400, token=token, email=link.email, name=name, tz=tz,
                          error=error)

    # -- password reset ------------------------------------------------------------------

    def reset_available() -> None:
        if not links_possible():
            raise ConsoleError(404, "Not available", "Passwords cannot be reset by email on this gateway: "
                               "ask its operator (gatewayctl account password).")

    @bp.get("/reset")
    async def reset():
        reset_available()
        return await page(console, "reset.html", email="", sent=False)

    @bp.post("/reset")
    async def reset_post():
        reset_available()
        _form, email = await asked_email()
        account = console.directory.accounts_by_email.get(email.lower()) if email else None
        if account is not None:
            console.outbox.post(reset_letter(account))
        return await page(console, "reset.html", email=email, sent=True)

    def reset_link(token: Any) -> tuple[ResetLink, Any]:
        try:
            link = console.links.read_reset(token, settings().reset_link_ttl_s)
        except LinkRefused as e:
            raise refused_link(e, "password reset", "Ask for a new one.") from None
        account = console.directory.accounts.get(link.account_id)
        if account is None or password_fingerprint(account.password_hash) != link.fingerprint:
            raise ConsoleError(400, "Link used", "This link has been used already, or the password was changed "
                               "since it was sent. Ask for a new one if you need it.")
        return link, account

    @bp.get("/reset/confirm")
    async def reset_confirm():
        reset_available()
        token = request.args.get("token")
        _link, account = reset_link(token)
        return await page(console, "reset_confirm.html", token=token, email=account.email)

    @bp.post("/reset/confirm")
    async def reset_confirm_post():
        reset_available()
        form = await checked_form(console)
        token = form.get("token")
        _link, account = reset_link(token)
        error = _password_mismatch(form)
        if error is None:
            try:
                await console.directory.set_password(account, form.get("password", ""))
            except DirectoryError as e:
                error = f"{e.message[:1].upper()}{e.message[1:]}."
            else:
                address = caller_address(console)
                await console.throttle.succeeded(account.email, address)  # lockouts of this email end
                log.info("console: password reset", extra={"fields": {"account_id": account.id, "client": address}})
                g.session = console.sessions.signed_in(account.id, account.password_hash)
                return redirect(url_for("console.keys"))
        return await page(console, "reset_confirm.html", 400, token=token, email=account.email, error=error)


def _signup_letter(console: Console, email: str, invited: bool) -> tuple[Letter, str]:
    """The sign-up email and the link in it."""
    s = console.config.console
    link = s.link("signup/confirm", console.links.signup_token(email, invited=invited))
    hours = s.signup_link_ttl_s // 3600
    intro = "You are invited to open an account" if invited else "Someone (we hope you) asked to open an account"
    return Letter(to=email, kind="signup", subject="Confirm your gatewayd account", text=(
        f"{intro} on gatewayd with {email}.\n\n"
        f"Confirm the address and choose a password here within {hours} hours:\n{link}\n\n"
        "If this was not you, ignore this message: no account is made without the link.")), link


async def invite(console: Console, email: Any) -> dict:
    """The operator's invitation (``gatewayctl account invite``): a sign-up link sent to
    ``email`` (and returned, to hand over another way). Refused while sign-up is off, and for
    an email that has an account already."""
    if not isinstance(email, str) or not valid_email(email):
        raise DirectoryError(f"not an email address: {email!r}")
    settings = console.config.console
    if settings.signup == "off":
        raise DirectoryError("sign-up is off on this gateway: set [console] signup = \"invite\" (or \"open\"),"
                             " with public_url and [alerts.smtp], and reload", status=409, code="signup_off")
    if email.strip().lower() in console.directory.accounts_by_email:
        raise DirectoryError(f"an account with email {email.strip()} exists already", status=409, code="conflict")
    letter, link = _signup_letter(console, email.strip(), invited=True)
    queued = console.outbox.post(letter)
    log.info("console: invitation sent", extra={"fields": {"queued": queued}})
    return {"email": email.strip(), "link": link, "emailed": queued, "expires_in_s": settings.signup_link_ttl_s}


def _password_mismatch(form: Any) -> str | None:
    if form.get("password", "") != form.get("password_again", ""):
        return "The two passwords differ."
    return None
