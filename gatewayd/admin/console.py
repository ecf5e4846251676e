"""The operator console at ``/admin/``: the admin API in a browser.

Server-rendered pages like the account holders' console (``gatewayd.console``), with the
same machinery: a signed session cookie (``Sessions``, under a key of its own, path
``/admin``, SameSite=Strict), a CSRF token on every form, the sign-in throttle (scope
``operator``), the same Content-Security-Policy. Every page reads and changes through
the admin API's gate (``AdminGate.call``), so the console is one more caller: its scopes
are enforced per route and every call is in the audit log (``via: console``).

Sign-in: an admin token (its scopes; the session holds the token's id, checked at each
request, so a revoked or expired token ends the session at once), or the operator's
password set with ``gatewayctl operator password`` (every scope; a new password ends every
session made with the old one).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import attrs
from quart import Response, g, redirect, render_template, request, url_for
from werkzeug.wrappers.response import Response as WerkzeugResponse

from gatewayd import passwords
from gatewayd.admin import tokens
from gatewayd.admin.gate import AdminGate, Principal
from gatewayd.console.session import Sessions, SignInThrottle, password_fingerprint
from gatewayd.console.web import CSP, caller_address, is_tls
from gatewayd.records import utc_now_iso
from gatewayd.store.admin_sql import OPERATOR_PASSWORD

PACKAGE_FILES = resources.files(__package__)
COOKIE = "gatewayd_operator"
MAX_AGE_S = 12 * 3600  # an operator session lasts half a day
PASSWORD_ACTOR = "operator"


@attrs.define
class OperatorConsole:
    gate: AdminGate
    store: Any
    console: Any  # the account console (gatewayd.console.web.Console): its config in force
    sessions: Sessions
    throttle: SignInThrottle

    @property
    def config(self):
        return self.console.config


class PageError(Exception):
    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status, self.title, self.message = status, title, message


class SignInRequired(Exception):
    pass


async def load_session(operator: OperatorConsole) -> None:
    """``g.session`` and ``g.principal`` (None: not signed in). A token session holds only while
    its token is active; a password session only while the password is the one it began with."""
    session = await operator.sessions.read(request.cookies.get(COOKIE))
    principal = None
    address = caller_address(operator.console)
    if session.account_id and session.account_id.startswith("token:"):
        token_id = session.account_id.removeprefix("token:")
        token = next((t for t in await operator.store.admin_tokens() if t.id == token_id), None)
        if token is not None and token.state(utc_now_iso()) == "active" and token.allows_address(address):
            principal = Principal(token.id, token.name, frozenset(token.scopes), "console", address)
    elif session.account_id == PASSWORD_ACTOR:
        stored = await operator.store.operator_setting(OPERATOR_PASSWORD)
        if stored is not None and password_fingerprint(stored) == session.fingerprint:
            principal = Principal(PASSWORD_ACTOR, "operator (console password)", frozenset({tokens.ADMIN}),
                                  "console", address)
    if session.account_id and principal is None:
        session = operator.sessions.new()  # token revoked or expired, password changed: signed out
    g.session = session
    g.principal = principal


def finish(operator: OperatorConsole, response: Response) -> Response:
    session = getattr(g, "session", None)
    if session is not None and session.dirty:
        response.set_cookie(COOKIE, operator.sessions.dump(session), max_age=MAX_AGE_S, path="/admin",
                            httponly=True, samesite="Strict", secure=is_tls(operator.console))
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    if not request.path.startswith("/admin/static/"):
        response.headers["Cache-Control"] = "no-store"
    return response


def signed_in() -> Principal:
    if g.principal is None:
        raise SignInRequired()
    return g.principal


async def checked_form(operator: OperatorConsole) -> Any:
    """The POSTed form, after its CSRF token matched this session's."""
    form = await request.form
    refusal = operator.sessions.form_refusal(g.session, form.get("csrf_token"))
    if refusal is not None:
        raise PageError(refusal[0], "Form refused", refusal[1])
    return form


async def api(operator: OperatorConsole, method: str, path: str, body: Any = None,
              query: dict[str, Any] | None = None, *, ok: tuple[int, ...] = (200, 201)) -> Any:
    """One admin call as the signed-in operator; a refusal becomes the error page."""
    status, doc = await operator.gate.call(signed_in(), method, path, body, query)
    if status not in ok:
        message = doc["error"]["message"] if isinstance(doc, dict) and "error" in doc else f"HTTP {status}"
        title = {403: "Not allowed", 404: "Not found", 429: "Slow down"}.get(status, "Not possible")
        raise PageError(status if status >= 400 else 400, title, message)
    return doc


async def page(operator: OperatorConsole, template: str, status: int = 200, **context: Any) -> Response:
    principal: Principal | None = getattr(g, "principal", None)
    session = getattr(g, "session", None)
    html = await render_template(template, principal=principal,
                                 scopes=sorted(principal.scopes) if principal else [],
                                 may=(lambda scope: principal is not None and principal.may(scope)),
                                 csrf_token=operator.sessions.csrf_token(session) if session else "", **context)
    return Response(html, status=status, content_type="text/html; charset=utf-8")


def back(endpoint: str, **values: Any) -> WerkzeugResponse:
    return redirect(url_for(endpoint, **values), 303)


async def password_matches(operator: OperatorConsole, password: str) -> tuple[bool, str | None]:
    stored = await operator.store.operator_setting(OPERATOR_PASSWORD)
    return await passwords.matches(password, stored), stored
