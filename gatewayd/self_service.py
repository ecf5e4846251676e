"""Self-service sign-up and password reset: the ``[console]`` settings and the signed links.

A link in an email is the only proof that its reader owns the address, so each link is a
payload signed with the console's secret (``itsdangerous``, a salt per purpose) and
timestamped: it expires on its own, and nothing is stored for it. Each is single-use by
what it carries:

- a sign-up link carries the email; once the account exists it is refused ("used already");
- a reset link carries the account id and a fingerprint of the password hash it was made
  for; setting a new password changes the hash, so the link (and every other reset link
  sent before, and every console session: ``password_fingerprint``) stops working.

Pure: no I/O here. The console's pages (``gatewayd.console.views_self_service``) send the
mail through ``gatewayd.mail`` and read these links back.
"""

from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import urlencode

import attrs
from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

from gatewayd.config_tables import ConfigError, Section
from gatewayd.oidc import OidcProvider, read_providers

SIGNUP_MODES = ("off", "open", "invite")


@attrs.frozen
class ConsoleSettings:
    """``[console]``: who may create an account, and where the links in emails point.

    ``signup``: ``off`` (the operator creates accounts), ``open`` (anyone with an email
    address), ``invite`` (only someone the operator invited with ``gatewayctl account
    invite``). ``public_url`` is the console's address as its users reach it (the links in
    emails start with it; it is never taken from a request's Host header, which a caller
    chooses)."""

    signup: str = "off"
    public_url: str | None = None
    signup_link_ttl_s: int = 24 * 3600
    reset_link_ttl_s: int = 3600
    oidc: tuple[OidcProvider, ...] = ()  # [[console.oidc]]: sign-in with these identity providers

    def oidc_provider(self, name: str) -> OidcProvider | None:
        return next((p for p in self.oidc if p.name == name), None)

    def links_possible(self, mail_configured: bool) -> bool:
        """Email links can be sent: a mail server and the console's public address."""
        return mail_configured and self.public_url is not None

    def url(self, path: str) -> str:
        """A console page's address as its users reach it."""
        assert self.public_url is not None
        return f"{self.public_url}/console/{path}"

    def link(self, path: str, token: str) -> str:
        return f"{self.url(path)}?{urlencode({'token': token})}"


def read_settings(table: Any, mail_configured: bool, env: Mapping[str, str] | None = None) -> ConsoleSettings:
    """``[console]`` (absent: sign-up off, no reset links), or ``ConfigError`` naming the key.
    Sign-up needs mail (``[alerts.smtp]``) and ``public_url``: a mode that could send no
    link is refused at start, not at the first visitor."""
    if table is None:
        return ConsoleSettings()
    s = Section(table, "console")
    s.unknown({"signup", "public_url", "signup_link_ttl_h", "reset_link_ttl_min", "oidc"})
    signup = s.str("signup", "off", choices=SIGNUP_MODES)
    public_url = s.str("public_url", None)
    if public_url is not None:
        if not public_url.startswith(("https://", "http://")):
            raise ConfigError(f"console.public_url: must start with https:// or http:// (got {public_url!r})")
        public_url = public_url.rstrip("/")
        if public_url.endswith("/console"):
            public_url = public_url[: -len("/console")]
    if signup != "off":
        if public_url is None:
            raise ConfigError(f"console.signup = {signup!r} needs console.public_url (the address in the emails' links)")
        if not mail_configured:
            raise ConfigError(f"console.signup = {signup!r} needs [alerts.smtp]: the confirmation links go by email")
    providers = read_providers(s.table.get("oidc"), env or {})
    if providers and public_url is None:
        raise ConfigError("[[console.oidc]] needs console.public_url (the identity provider redirects back to it)")
    return ConsoleSettings(
        oidc=providers,
        signup=signup,
        public_url=public_url,
        signup_link_ttl_s=int(s.number("signup_link_ttl_h", 24, minimum=1) * 3600),
        reset_link_ttl_s=int(s.number("reset_link_ttl_min", 60, minimum=5) * 60),
    )


class LinkRefused(Exception):
    """A link that is forged, expired or of another purpose; ``expired`` tells which to say."""

    def __init__(self, expired: bool) -> None:
        super().__init__("expired" if expired else "invalid")
        self.expired = expired


@attrs.frozen
class SignupLink:
    email: str
    invited: bool


@attrs.frozen
class ResetLink:
    account_id: str
    fingerprint: str


class Links:
    """Makes and reads the two kinds of link, each under a salt of its own (a reset token is
    never a sign-up token, nor a session cookie)."""

    def __init__(self, secret: bytes) -> None:
        self._signup = URLSafeTimedSerializer(secret, salt="gatewayd.console.signup")
        self._reset = URLSafeTimedSerializer(secret, salt="gatewayd.console.reset")

    def signup_token(self, email: str, *, invited: bool) -> str:
        return self._signup.dumps({"e": email.strip().lower(), "i": invited})

    def read_signup(self, token: Any, max_age_s: int) -> SignupLink:
        data = _loads(self._signup, token, max_age_s)
        if not (isinstance(data.get("e"), str) and isinstance(data.get("i"), bool)):
            raise LinkRefused(expired=False)
        return SignupLink(email=data["e"], invited=data["i"])

    def reset_token(self, account_id: str, fingerprint: str) -> str:
        return self._reset.dumps({"a": account_id, "p": fingerprint})

    def read_reset(self, token: Any, max_age_s: int) -> ResetLink:
        data = _loads(self._reset, token, max_age_s)
        if not (isinstance(data.get("a"), str) and isinstance(data.get("p"), str)):
            raise LinkRefused(expired=False)
        return ResetLink(account_id=data["a"], fingerprint=data["p"])


def _loads(serializer: URLSafeTimedSerializer, token: Any, max_age_s: int) -> dict:
    if not isinstance(token, str) or not token or len(token) > 2048:
        raise LinkRefused(expired=False)
    try:
        data = serializer.loads(token, max_age=max_age_s)
    except SignatureExpired:
        raise LinkRefused(expired=True) from None
    except BadSignature:
        raise LinkRefused(expired=False) from None
    if not isinstance(data, dict):
        raise LinkRefused(expired=False)
    return data
