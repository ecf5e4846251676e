"""Sign-in with an OpenID Connect provider (``[[console.oidc]]``; the protocol: ``gatewayd.oidc``).

``/console/oidc/<name>/start`` keeps the flow's secrets in the session cookie and sends the
browser to the issuer; ``/console/oidc/<name>/callback`` checks the answer and signs in the
account whose email the issuer vouched for. An email with no account opens one when the
provider's ``create_accounts`` is true (no password: the holder signs in through the issuer,
or sets one by the reset link), and is refused otherwise. Every sign-in and refusal is logged
with the issuer and the subject, never a token.
"""

from __future__ import annotations

import logging

from quart import Blueprint, g, redirect, request, url_for

from gatewayd.console.web import Console, ConsoleError, caller_address
from gatewayd.directory import DirectoryError
from gatewayd.oidc import OidcError, OidcProvider, PendingFlow

log = logging.getLogger("gatewayd.console")


def register(bp: Blueprint, console: Console) -> None:
    def provider_named(name: str) -> OidcProvider:
        provider = console.config.console.oidc_provider(name)
        if provider is None:
            raise ConsoleError(404, "Not found", "This gateway has no such sign-in provider.")
        return provider

    def redirect_uri(provider: OidcProvider) -> str:
        return console.config.console.url(f"oidc/{provider.name}/callback")

    @bp.get("/oidc/<name>/start")
    async def oidc_start(name: str):
        provider = provider_named(name)
        try:
            url, flow = await console.oidc.start(provider, redirect_uri(provider))
        except OidcError as e:
            raise ConsoleError(502, "Sign-in not possible", str(e)) from None
        g.session.oidc = flow.dump()
        g.session.dirty = True
        return redirect(url)

    @bp.get("/oidc/<name>/callback")
    async def oidc_callback(name: str):
        provider = provider_named(name)
        flow = PendingFlow.load(g.session.oidc)
        g.session.oidc = None  # one answer per start, whatever it is
        g.session.dirty = True
        address = caller_address(console)
        try:
            identity = await console.oidc.finish(provider, flow, request.args, redirect_uri(provider))
        except OidcError as e:
            log.info("console: OIDC sign-in refused", extra={"fields": {"provider": provider.name, "why": str(e),
                                                                        "client": address}})
            raise ConsoleError(400, "Sign-in refused", str(e)) from None
        account = console.directory.accounts_by_email.get(identity.email.lower())
        created = False
        if account is None:
            if not provider.create_accounts:
                log.info("console: OIDC sign-in without an account", extra={"fields": {
                    "provider": provider.name, "subject": identity.subject, "client": address}})
                raise ConsoleError(403, "No account", f"{identity.email} has no account on this gateway. "
                                   "Ask its operator for one.")
            try:
                account = await console.directory.create_account(identity.email, name=identity.name)
            except DirectoryError as e:
                if e.status != 409:
                    raise ConsoleError(400, "Not possible", e.message) from None
                account = console.directory.accounts_by_email[identity.email.lower()]  # made meanwhile
            else:
                created = True
        log.info("console: OIDC sign-in", extra={"fields": {
            "provider": provider.name, "subject": identity.subject, "account_id": account.id, "created": created,
            "client": address}})
        g.session = console.sessions.signed_in(account.id, account.password_hash)
        return redirect(url_for("console.keys"))
