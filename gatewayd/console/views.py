"""The console blueprint: sign-in and sign-out, the balance page, errors; keys and usage
pages come from ``views_keys`` and ``views_usage``.

Sign-in takes an attempt from the throttle first (in the store, shared by every
instance: ``SignInThrottle``), then a turn under the ceiling on password checks
(``CheckCeiling``: it may wait, or answer 429, and locks nothing), then compares the password with the slow scrypt hash in a
worker thread (an unknown email costs the same work, so timing does not tell which
emails exist; ``gatewayd.passwords``), replaces a hash made with older parameters, and
starts a new session id on success. Signing out records the session's end only for a
signed-in session: an anonymous visitor's sign-out writes nothing.
"""

from __future__ import annotations

import logging
from importlib import resources

from quart import Blueprint, Response, g, redirect, url_for

from gatewayd.console import (
    queries, views_alerts, views_codes, views_funds, views_keys, views_models, views_oidc, views_self_service, views_usage,
)
from gatewayd.console.formatting import FILTERS
from gatewayd.console.web import (
    Console,
    ConsoleError,
    SignInRequired,
    caller_address,
    checked_form,
    finish_response,
    load_session,
    not_found,
    page,
    signed_in,
    to_signin,
)
from gatewayd import passwords
from gatewayd.directory import DirectoryError

# Templates and static files are package data (pyproject's package-data ships them in the wheel).
PACKAGE_FILES = resources.files(__package__)
log = logging.getLogger("gatewayd.console")


def create_blueprint(console: Console) -> Blueprint:
    bp = Blueprint(
        "console", __name__, url_prefix="/console", template_folder=str(PACKAGE_FILES / "templates"),
        static_folder=str(PACKAGE_FILES / "static"), static_url_path="/static",
    )
    for name, fn in FILTERS.items():
        bp.add_app_template_filter(fn, name)

    @bp.before_request
    async def before() -> None:
        await load_session(console)

    @bp.after_request
    async def after(response: Response) -> Response:
        return finish_response(console, response)

    @bp.errorhandler(ConsoleError)
    async def refused(error: ConsoleError):
        response = await page(console, "error.html", error.status, title=error.title, message=error.message,
                              code=error.status)
        response.headers.update(error.headers)
        return response

    @bp.errorhandler(SignInRequired)
    async def sign_in_first(_error):
        return to_signin()

    @bp.errorhandler(DirectoryError)
    async def directory_refused(error: DirectoryError):
        if error.status == 404:
            return await refused(not_found("This key"))
        return await refused(ConsoleError(error.status, "Not possible", error.message))

    @bp.get("/")
    async def home():
        return redirect(url_for("console.keys") if g.account else url_for("console.signin"))

    @bp.get("/signin")
    async def signin():
        if g.account is not None:
            return redirect(url_for("console.keys"))
        return await page(console, "signin.html", email="", error=None, **_signin_links(console))

    @bp.post("/signin")
    async def signin_post():
        form = await checked_form(console)
        email = form.get("email", "").strip()
        password = form.get("password", "")
        address = caller_address(console)
        wait = await console.throttle.reserve(email, address)  # taken before the password is checked
        if wait is not None:
            minutes = -(-wait // 60)
            raise ConsoleError(
                429, "Too many attempts",
                f"Too many failed sign-ins for {email}. Try again in {minutes} minute{'s' if minutes != 1 else ''}.",
                {"Retry-After": str(wait)},
            )
        busy = await console.ceiling.take()  # the global ceiling on password checks: wait, or 429
        if busy is not None:
            await console.throttle.give_back(email, address)  # not checked: no failure counted
            raise ConsoleError(429, "Too many sign-ins", "The console is checking too many passwords right now. "
                               f"Try again in {busy} second{'s' if busy != 1 else ''}.", {"Retry-After": str(busy)})
        account = console.directory.accounts_by_email.get(email.lower()) if email else None
        stored = account.password_hash if account is not None else None
        if not await passwords.matches(password, stored) or account is None or not stored:
            return await page(console, "signin.html", 400, email=email,
                              error="Wrong email or password.", **_signin_links(console))
        await console.throttle.succeeded(email, address)
        if passwords.needs_rehash(stored):
            await console.directory.upgrade_password_hash(account, stored, await passwords.hashed(password))
            log.info("console: password hash upgraded", extra={"fields": {"account_id": account.id,
                                                                        "scrypt_n": passwords.N}})
        g.session = console.sessions.signed_in(account.id, account.password_hash)
        return redirect(url_for("console.keys"))

    @bp.post("/signout")
    async def signout():
        await checked_form(console)
        if g.account is not None:  # only a signed-in session has an end worth recording
            g.session = await console.sessions.end(g.session)
        g.account = None
        return redirect(url_for("console.signin"))

    @bp.get("/balance")
    async def balance():
        account = signed_in()
        payments = await queries.payments(console.store, account.id)
        return await page(console, "balance.html", nav="balance", payments=payments)

    views_keys.register(bp, console)
    views_funds.register(bp, console)
    views_usage.register(bp, console)
    views_codes.register(bp, console)
    views_alerts.register(bp, console)
    views_self_service.register(bp, console)
    views_oidc.register(bp, console)
    views_models.register(bp, console)

    @bp.route("/<path:rest>", methods=["GET", "POST"])
    async def unknown(rest: str):
        raise not_found("This page")

    return bp


def _signin_links(console: Console) -> dict:
    """What the sign-in page offers beside the form: identity providers, sign-up, reset by email."""
    alerts = console.config.alerts
    mail = alerts is not None and alerts.smtp is not None
    return {"signup_open": console.config.console.signup == "open",
            "reset_possible": console.config.console.links_possible(mail),
            "oidc_providers": console.config.console.oidc}

