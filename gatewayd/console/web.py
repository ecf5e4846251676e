"""The console's plumbing shared by every page: the session per request, CSRF, errors.

``before_request`` reads the session cookie into ``g.session`` (and the signed-in
account into ``g.account``); ``after_request`` writes the cookie back when it changed
and adds the security headers. A page that needs an account calls ``signed_in()``;
every POST handler calls ``await checked_form()``, which refuses a missing CSRF token
with 400 and a wrong one with 403 before the handler sees any field.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import attrs
from quart import Response, g, redirect, render_template, request, url_for
from werkzeug.wrappers.response import Response as WerkzeugResponse  # what redirect() makes

from gatewayd.access import client_address
from gatewayd.config import Config
from gatewayd.console.formatting import zone_label
from gatewayd.console.session import (
    COOKIE, MAX_AGE_S, CheckCeiling, Session, Sessions, SignInThrottle, password_fingerprint,
)
from gatewayd.directory import Directory
from gatewayd.mail import Outbox
from gatewayd.oidc import OidcClient
from gatewayd.records import Account
from gatewayd.self_service import Links

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


@attrs.define
class Console:
    """Everything a console page needs, built once by ``mount_console``."""

    directory: Directory
    store: Any  # the store (gatewayd.store): usage and payments for the pages
    config: Config
    sessions: Sessions
    throttle: SignInThrottle
    links: Links  # sign-up and reset links (gatewayd.self_service)
    outbox: Outbox  # their emails, sent by a task of the daemon (gatewayd.mail)
    oidc: OidcClient  # sign-in with identity providers ([[console.oidc]])
    ceiling: CheckCeiling  # password checks a second, whoever asks ([server] password_checks_per_s)
    checkouts: Any = None  # Checkout Sessions made per account (gatewayd.ratelimit windows; views_funds)


class ConsoleError(Exception):
    """A page-level refusal rendered as the console's error page."""

    def __init__(self, status: int, title: str, message: str, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message
        self.headers = headers or {}


class SignInRequired(Exception):
    """No signed-in account: the page redirects to the sign-in form."""


def not_found(what: str = "This page") -> ConsoleError:
    return ConsoleError(404, "Not found", f"{what} does not exist, or it belongs to another account.")


async def load_session(console: Console) -> None:
    session = await console.sessions.read(request.cookies.get(COOKIE))
    account = None
    if session.account_id:
        account = console.directory.accounts.get(session.account_id)
        if account is None or password_fingerprint(account.password_hash) != session.fingerprint:
            session = console.sessions.new()  # password changed (or account gone): signed out
            account = None
        else:
            # every page shows the balance; with several instances, others have moved it since
            await console.store.refresh_balance(account)
    g.session = session
    g.account = account


def finish_response(console: Console, response: Response) -> Response:
    session: Session | None = getattr(g, "session", None)
    if session is not None and session.dirty:
        response.set_cookie(
            COOKIE, console.sessions.dump(session), max_age=MAX_AGE_S, path="/console", httponly=True,
            samesite="Lax", secure=is_tls(console),
        )
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    if not request.path.startswith("/console/static/"):
        response.headers["Cache-Control"] = "no-store"
    return response


def is_tls(console: Console) -> bool:
    """HTTPS here, or HTTPS at a trusted proxy in front (``X-Forwarded-Proto: https``)."""
    if request.scheme == "https" or console.config.server.tls_cert is not None:
        return True
    proto = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return proto == "https" and _from_trusted_proxy(console)


def _from_trusted_proxy(console: Console) -> bool:
    client = request.scope.get("client")
    try:
        peer = ipaddress.ip_address(client[0]) if client else None
    except ValueError:
        return False
    return peer is not None and any(peer in net for net in console.config.server.trusted_proxies)


def caller_address(console: Console) -> str:
    """The API's rule (``access.client_address``): several X-Forwarded-For lines are one list
    (RFC 9110 5.3), so a line the client sent before the proxy's own cannot pick the address."""
    client = request.scope.get("client")
    peer = client[0] if client else None
    forwarded = ", ".join(request.headers.getlist("x-forwarded-for")) or None
    return client_address(peer, forwarded, console.config.server.trusted_proxies) or ""


def signed_in() -> Account:
    if g.account is None:
        raise SignInRequired()
    return g.account


async def checked_form(console: Console) -> Any:
    """The POSTed form, after its CSRF token matched this session's."""
    form = await request.form
    refusal = console.sessions.form_refusal(g.session, form.get("csrf_token"))
    if refusal is not None:
        raise ConsoleError(refusal[0], "Form refused", refusal[1])
    return form


async def page(console: Console, template: str, status: int = 200, **context: Any) -> Response:
    """Render a console template with what every page shows (account, zone, nav, CSRF token)."""
    account: Account | None = g.account
    html = await render_template(
        template,
        account=account,
        timezone=account.timezone if account else "UTC",
        zone_label=zone_label(account.timezone) if account else "",
        csrf_token=console.sessions.csrf_token(g.session),
        alert_channels=alert_channels(console.config),
        **context,
    )
    return Response(html, status=status, content_type="text/html; charset=utf-8")


def alert_channels(config: Config) -> dict[str, bool]:
    """Which ways a balance alert can leave this gateway (``[alerts]``), for forms that must
    not promise an email no server will send."""
    alerts = config.alerts
    return {"email": alerts is not None and alerts.smtp is not None,
            "webhook": alerts is not None and alerts.webhook is not None}


def to_signin() -> WerkzeugResponse:
    return redirect(url_for("console.signin"))
