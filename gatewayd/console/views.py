"""The console blueprint: sign-in and sign-out, the balance page, errors; keys and usage
pages come from ``views_keys`` and ``views_usage``.

Sign-in compares the password with the slow scrypt hash in a worker thread (an
unknown email costs the same work, so timing does not tell which emails exist),
counts failures per email and client address, and starts a new session id on
success.
"""

from __future__ import annotations

from importlib import resources

import trio
from quart import Blueprint, Response, g, redirect, url_for

from gatewayd.console import queries, views_keys, views_usage
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
from gatewayd.directory import DirectoryError, check_password, hash_password

# Templates and static files are package data (pyproject's package-data ships them in the wheel).
PACKAGE_FILES = resources.files(__package__)
_DECOY_HASH = hash_password("a password nobody has")  # compared against when the email is unknown
_HASHING = trio.CapacityLimiter(2)  # scrypt is CPU-bound: a burst of sign-ins waits, the API does not


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
        return await page(console, "signin.html", email="", error=None)

    @bp.post("/signin")
    async def signin_post():
        form = await checked_form(console)
        email = form.get("email", "").strip()
        password = form.get("password", "")
        address = caller_address(console)
        wait = await console.throttle.retry_after(email, address)
        if wait is not None:
            minutes = -(-wait // 60)
            raise ConsoleError(
                429, "Too many attempts",
                f"Too many failed sign-ins for {email}. Try again in {minutes} minute{'s' if minutes != 1 else ''}.",
                {"Retry-After": str(wait)},
            )
        account = console.directory.accounts_by_email.get(email.lower()) if email else None
        stored = account.password_hash if account is not None and account.password_hash else _DECOY_HASH
        ok = await trio.to_thread.run_sync(check_password, password, stored, limiter=_HASHING)
        if not ok or account is None or not account.password_hash:
            await console.throttle.failed(email, address)
            return await page(console, "signin.html", 400, email=email,
                              error="Wrong email or password.")
        await console.throttle.succeeded(email, address)
        g.session = console.sessions.signed_in(account.id, account.password_hash)
        return redirect(url_for("console.keys"))

    @bp.post("/signout")
    async def signout():
        await checked_form(console)
        g.session = await console.sessions.end(g.session)
        g.account = None
        return redirect(url_for("console.signin"))

    @bp.get("/balance")
    async def balance():
        account = signed_in()
        payments = await queries.payments(console.store, account.id)
        return await page(console, "balance.html", nav="balance", payments=payments)

    views_keys.register(bp, console)
    views_usage.register(bp, console)

    @bp.route("/<path:rest>", methods=["GET", "POST"])
    async def unknown(rest: str):
        raise not_found("This page")

    return bp

