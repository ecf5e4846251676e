"""OpenID Connect sign-in for the console: the authorization code flow with PKCE.

One ``[[console.oidc]]`` table per identity provider (Google, Microsoft Entra, Okta, any
issuer with a discovery document). The flow, and what each step checks:

1. ``start``: a fresh ``state`` (ties the answer to this browser), ``nonce`` (ties the ID
   token to this request) and PKCE ``code_verifier`` (ties the code to this client), kept in
   the browser's signed session cookie, never in the URL in clear; the browser goes to the
   issuer's ``authorization_endpoint``.
2. ``finish``: the answer's ``state`` must be the session's (compared in constant time) and
   younger than ``FLOW_TTL_S``; the code is exchanged at the ``token_endpoint`` with the
   client secret and the verifier; the ID token's signature is checked against the issuer's
   JWKS (cached; an unknown ``kid`` fetches the set again, at most once a minute: keys
   rotate), then ``iss``, ``aud`` (and ``azp`` when there are several audiences), ``exp``,
   ``iat`` and ``nonce``; the email must be there and not marked unverified, and in
   ``allowed_domain`` when one is set.

Discovery documents are cached for an hour. Every network call has a timeout and its
failure is an ``OidcError`` with a message for the person signing in (the console shows
it; nothing of the provider's answer is echoed back).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import time
from typing import Any, Mapping
from urllib.parse import urlencode

import attrs
import httpx
import jwt

from gatewayd.config_tables import ConfigError, Section

log = logging.getLogger("gatewayd.oidc")

FLOW_TTL_S = 600  # from the redirect to the issuer until the answer comes back
DISCOVERY_TTL_S = 3600
JWKS_REFETCH_S = 60  # an unknown kid fetches the key set again at most this often
LEEWAY_S = 60  # clock skew allowed on exp / iat
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


@attrs.frozen
class OidcProvider:
    """``[[console.oidc]]``: one identity provider."""

    name: str  # in the console's URLs: /console/oidc/<name>/...
    label: str  # on the sign-in button
    issuer: str
    client_id: str
    client_secret: str = attrs.field(repr=False)
    scopes: tuple[str, ...] = ("openid", "email", "profile")
    allowed_domain: str | None = None  # only emails @this domain
    create_accounts: bool = False  # a first sign-in with an unknown email opens an account


def read_providers(tables: Any, env: Mapping[str, str]) -> tuple[OidcProvider, ...]:
    if tables is None:
        return ()
    if not isinstance(tables, list):
        raise ConfigError("console.oidc: must be an array of tables ([[console.oidc]])")
    providers: list[OidcProvider] = []
    for i, table in enumerate(tables):
        s = Section(table, f"console.oidc[{i}]")
        s.unknown({"name", "label", "issuer", "client_id", "client_secret_env", "scopes", "allowed_domain",
                   "create_accounts"})
        name = s.str("name")
        if not name.replace("-", "").replace("_", "").isalnum() or len(name) > 40:
            raise ConfigError(f"console.oidc[{i}].name: letters, digits, - and _ only (got {name!r})")
        if any(p.name == name for p in providers):
            raise ConfigError(f"console.oidc[{i}].name: {name!r} is given twice")
        issuer = s.str("issuer").rstrip("/")
        if not issuer.startswith(("https://", "http://")):
            raise ConfigError(f"console.oidc[{i}].issuer: must be an https:// URL (got {issuer!r})")
        secret_env = s.str("client_secret_env")
        secret = env.get(secret_env)
        if not secret:
            raise ConfigError(f"console.oidc[{i}].client_secret_env: environment variable {secret_env} is not set")
        scopes = table.get("scopes", ["openid", "email", "profile"])
        if not (isinstance(scopes, list) and all(isinstance(x, str) and x for x in scopes)):
            raise ConfigError(f"console.oidc[{i}].scopes: must be a list of strings")
        if "openid" not in scopes:
            scopes = ["openid", *scopes]
        if "email" not in scopes:
            scopes = [*scopes, "email"]
        domain = s.str("allowed_domain", None)
        providers.append(OidcProvider(
            name=name, label=s.str("label", name), issuer=issuer, client_id=s.str("client_id"),
            client_secret=secret, scopes=tuple(scopes), allowed_domain=domain.lower().lstrip("@") if domain else None,
            create_accounts=s.bool("create_accounts", False),
        ))
    return tuple(providers)


class OidcError(Exception):
    """The sign-in did not go through; the message is for the person signing in."""


@attrs.frozen
class PendingFlow:
    """What the browser's session keeps between ``start`` and ``finish``."""

    provider: str
    state: str
    nonce: str
    verifier: str
    started: float

    def dump(self) -> list:
        return [self.provider, self.state, self.nonce, self.verifier, int(self.started)]

    @classmethod
    def load(cls, data: Any) -> "PendingFlow | None":
        if (isinstance(data, list) and len(data) == 5 and all(isinstance(x, str) for x in data[:4])
                and isinstance(data[4], int)):
            return cls(provider=data[0], state=data[1], nonce=data[2], verifier=data[3], started=float(data[4]))
        return None


@attrs.frozen
class Identity:
    """Who the issuer says signed in."""

    issuer: str
    subject: str
    email: str
    name: str
    claims: dict


class _NoAuth(httpx.Auth):
    """The client's credentials are in the form (``client_secret_post``)."""


def _challenge(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class OidcClient:
    """The relying party for every configured provider: discovery and keys cached per issuer."""

    def __init__(self, http: httpx.AsyncClient | None = None, clock=time.time) -> None:
        self._http = http or httpx.AsyncClient(timeout=httpx.Timeout(10.0), follow_redirects=False)
        self._clock = clock
        self._discovery: dict[str, tuple[float, dict]] = {}
        self._jwks: dict[str, tuple[float, jwt.PyJWKSet]] = {}

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _get_json(self, url: str, what: str) -> dict:
        try:
            response = await self._http.get(url, headers={"accept": "application/json"})
        except httpx.HTTPError as e:
            log.warning("oidc: fetch failed", extra={"fields": {"url": url, "error": f"{type(e).__name__}: {e}"}})
            raise OidcError(f"The identity provider could not be reached ({what}). Try again later.") from None
        if response.status_code != 200:
            log.warning("oidc: fetch refused", extra={"fields": {"url": url, "status": response.status_code}})
            raise OidcError(f"The identity provider answered {response.status_code} ({what}). Try again later.")
        try:
            doc = response.json()
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise OidcError(f"The identity provider's {what} is not a JSON object.")
        return doc

    async def discovery(self, provider: OidcProvider) -> dict:
        cached = self._discovery.get(provider.issuer)
        if cached is not None and self._clock() - cached[0] < DISCOVERY_TTL_S:
            return cached[1]
        doc = await self._get_json(f"{provider.issuer}/.well-known/openid-configuration", "discovery document")
        if doc.get("issuer", "").rstrip("/") != provider.issuer:
            raise OidcError("The identity provider's discovery document names another issuer.")
        for field in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            if not isinstance(doc.get(field), str) or not doc[field].startswith(("https://", "http://")):
                raise OidcError(f"The identity provider's discovery document has no {field}.")
        self._discovery[provider.issuer] = (self._clock(), doc)
        return doc

    async def _keys(self, provider: OidcProvider, jwks_uri: str, *, refresh: bool) -> jwt.PyJWKSet:
        cached = self._jwks.get(provider.issuer)
        if cached is not None and (not refresh or self._clock() - cached[0] < JWKS_REFETCH_S):
            return cached[1]
        doc = await self._get_json(jwks_uri, "signing keys")
        try:
            keys = jwt.PyJWKSet.from_dict(doc)
        except jwt.PyJWTError:
            raise OidcError("The identity provider's signing keys cannot be read.") from None
        self._jwks[provider.issuer] = (self._clock(), keys)
        return keys

    async def start(self, provider: OidcProvider, redirect_uri: str) -> tuple[str, PendingFlow]:
        """The URL to send the browser to, and what its session must keep."""
        doc = await self.discovery(provider)
        flow = PendingFlow(provider=provider.name, state=secrets.token_urlsafe(24), nonce=secrets.token_urlsafe(24),
                           verifier=secrets.token_urlsafe(48), started=self._clock())
        query = urlencode({
            "response_type": "code", "client_id": provider.client_id, "redirect_uri": redirect_uri,
            "scope": " ".join(provider.scopes), "state": flow.state, "nonce": flow.nonce,
            "code_challenge": _challenge(flow.verifier), "code_challenge_method": "S256",
        })
        endpoint = doc["authorization_endpoint"]
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}", flow

    async def finish(self, provider: OidcProvider, flow: PendingFlow | None, answer: Mapping[str, str],
                     redirect_uri: str) -> Identity:
        """The identity in the issuer's answer (the callback's query), every check passed."""
        if flow is None or flow.provider != provider.name:
            raise OidcError("This sign-in was not started here (or the browser lost its cookie). Start again.")
        if self._clock() - flow.started > FLOW_TTL_S:
            raise OidcError("This sign-in took too long. Start again.")
        if not hmac.compare_digest(str(answer.get("state", "")), flow.state):
            raise OidcError("This answer does not belong to this sign-in (state). Start again.")
        if answer.get("error"):
            raise OidcError("The identity provider refused the sign-in"
                            f" ({str(answer['error'])[:60]}).")
        code = answer.get("code")
        if not code:
            raise OidcError("The identity provider's answer has no code. Start again.")
        doc = await self.discovery(provider)
        methods = doc.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                "code_verifier": flow.verifier}
        auth: httpx.Auth = httpx.BasicAuth(provider.client_id, provider.client_secret)
        if "client_secret_basic" not in methods:  # client_secret_post
            form.update(client_id=provider.client_id, client_secret=provider.client_secret)
            auth = _NoAuth()
        try:
            response = await self._http.post(doc["token_endpoint"], data=form, auth=auth,
                                             headers={"accept": "application/json"})
        except httpx.HTTPError as e:
            log.warning("oidc: token request failed", extra={"fields": {"issuer": provider.issuer,
                                                                       "error": f"{type(e).__name__}: {e}"}})
            raise OidcError("The identity provider could not be reached. Try again later.") from None
        if response.status_code != 200:
            log.warning("oidc: code refused", extra={"fields": {"issuer": provider.issuer,
                                                               "status": response.status_code}})
            raise OidcError("The identity provider refused the sign-in code. Start again.")
        try:
            tokens = response.json()
        except ValueError:
            tokens = None
        id_token = tokens.get("id_token") if isinstance(tokens, dict) else None
        if not isinstance(id_token, str):
            raise OidcError("The identity provider sent no ID token.")
        claims = await self._verified_claims(provider, doc, id_token, flow.nonce)
        return self._identity(provider, claims)

    async def _verified_claims(self, provider: OidcProvider, doc: dict, id_token: str, nonce: str) -> dict:
        try:
            header = jwt.get_unverified_header(id_token)
        except jwt.PyJWTError:
            raise OidcError("The ID token is not a JWT.") from None
        alg, kid = str(header.get("alg")), header.get("kid")
        allowed = [a for a in doc.get("id_token_signing_alg_values_supported", ["RS256"]) if a in ALGORITHMS]
        if alg not in allowed:  # never "none", never an HMAC with a public key as its secret
            raise OidcError(f"The ID token is signed with {str(alg)[:20]!r}, which is not accepted.")
        key = None
        for refresh in (False, True):
            keys = await self._keys(provider, doc["jwks_uri"], refresh=refresh)
            key = next((k for k in keys.keys if kid is None or k.key_id == kid), None)
            if key is not None:
                break
        if key is None:
            raise OidcError("The ID token is signed with a key the identity provider does not publish.")
        try:
            claims = jwt.decode(
                id_token, key=key, algorithms=[alg], audience=provider.client_id, issuer=provider.issuer,
                leeway=LEEWAY_S, options={"require": ["iss", "aud", "exp", "iat", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise OidcError("The ID token has expired. Start again.") from None
        except jwt.PyJWTError as e:
            log.warning("oidc: ID token refused", extra={"fields": {"issuer": provider.issuer,
                                                                   "why": f"{type(e).__name__}: {e}"}})
            raise OidcError("The ID token does not check out (signature, issuer, audience or time).") from None
        aud = claims["aud"]
        audiences = aud if isinstance(aud, list) else [aud]
        if len(audiences) > 1 and claims.get("azp") != provider.client_id:
            raise OidcError("The ID token was issued to another client (azp).")
        if not isinstance(claims.get("nonce"), str) or not hmac.compare_digest(claims["nonce"], nonce):
            raise OidcError("The ID token does not belong to this sign-in (nonce). Start again.")
        return claims

    def _identity(self, provider: OidcProvider, claims: dict) -> Identity:
        email = claims.get("email")
        if not isinstance(email, str) or "@" not in email:
            raise OidcError("The identity provider did not share an email address (the email scope).")
        if claims.get("email_verified") is False or claims.get("email_verified") == "false":
            raise OidcError("The identity provider has not verified this email address.")
        email = email.strip()
        if provider.allowed_domain and email.lower().rsplit("@", 1)[1] != provider.allowed_domain:
            raise OidcError(f"Only addresses @{provider.allowed_domain} may sign in with {provider.label}.")
        name = claims.get("name")
        name = name if isinstance(name, str) else ""
        return Identity(issuer=provider.issuer, subject=str(claims["sub"]), email=email, name=name[:100],
                        claims=claims)
