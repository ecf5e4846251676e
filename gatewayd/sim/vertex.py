"""Google Vertex AI in the simulator: the OAuth2 token endpoint and the model endpoints.

- ``POST /token``: Google's OAuth2 token endpoint for service accounts (grant type
  ``urn:ietf:params:oauth:grant-type:jwt-bearer``). The JWT assertion is verified: RS256
  signature against the public key registered for its ``iss`` (the service account's
  ``client_email``), ``aud`` Google's token URL (or this endpoint's), ``exp`` / ``iat`` (google-auth's
  verifier, no clock skew), and a ``scope``. It answers an opaque access token that expires
  after ``token_ttl_s`` (an hour by default; tests shorten it).
- ``POST /vertex/v1/projects/{p}/locations/{r}/publishers/anthropic/models/{m}:rawPredict``
  (``:streamRawPredict``): Anthropic's Messages API as Vertex serves it (the body names no
  model and carries ``anthropic_version: "vertex-2023-10-16"``), answered by the Anthropic
  simulator (:mod:`.anthropic`); ``publishers/google/models/{m}:generateContent``
  (``:streamGenerateContent``) by the Gemini one (:mod:`.gemini`). Both need
  ``Authorization: Bearer`` with a token this simulator issued and that has not expired,
  else 401 in Google's envelope (``UNAUTHENTICATED``). Faults (``[[sim:fault=status:429]]``
  ...) answer in Google's envelope (429 ``RESOURCE_EXHAUSTED`` with a ``RetryInfo``), as
  Vertex's front end does; Claude's own request checks answer in Anthropic's shape.

Which keys are trusted: ``PUT /_sim/vertex`` with ``{"service_accounts": {email: public key
PEM}, "token_ttl_s": N}``, and always the process's demo service account
(:func:`demo_service_account`, what ``--demo`` signs with; ``GET /_sim/vertex/service-account``
hands it out with this simulator's ``token_uri``).
"""

from __future__ import annotations

import functools
import os
import re
import time
from typing import Any

import attrs
import orjson
from quart import Response, request

from gatewayd.catalogue import Provider
from gatewayd.cloud.vertex_auth import from_service_account_info
from gatewayd.protocols import PROTOCOLS

from . import anthropic
from .exchange import anthropic_error, google_error

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
# the audience Google requires of a service-account assertion, whatever ``token_uri`` it is posted to
# (google-auth always signs this one); this endpoint's own URL is taken too
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"
DEMO_EMAIL = "gatewayd-demo@sim-project.iam.gserviceaccount.com"
VERTEX_ANTHROPIC_VERSION = "vertex-2023-10-16"
_API_VERSION = re.compile(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]")
DEFAULT_TOKEN_TTL_S = 3600
MAX_ASSERTION_LIFETIME_S = 3600  # Google refuses an assertion valid for longer
_JSON = "application/json"
_MISSING_CREDENTIALS = (
    "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or "
    "other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."
)
_INVALID_CREDENTIALS = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other "
    "valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."
)


def new_key_pair() -> tuple[str, str]:
    """A fresh RSA key pair for a service account: (private key PEM, public key PEM)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


_demo_key = functools.cache(new_key_pair)  # the process's demo service account's key, made once


def demo_service_account(sim_url: str) -> dict:
    """A service-account key file's contents whose tokens come from the simulator at ``sim_url``."""
    private, _ = _demo_key()
    return {
        "type": "service_account", "project_id": "sim-project", "private_key_id": "sim-demo-key",
        "private_key": private, "client_email": DEMO_EMAIL, "client_id": "100000000000000000001",
        "token_uri": f"{sim_url}/token",
    }


def demo_provider(provider: Provider, sim_url: str) -> Provider:
    """``--demo``: a Vertex AI provider pointed at this simulator, with its demo service account
    (its tokens come from this simulator's token endpoint; ``gatewayd.protocols`` names this hook)."""
    credentials = from_service_account_info(demo_service_account(sim_url), "the simulator's demo service account")
    return attrs.evolve(provider, base_url=sim_url + PROTOCOLS["vertex"].sim_base_path, api_key=None,
                        settings={**provider.settings, "credentials": credentials})


@attrs.define
class VertexState:
    """Trusted service accounts and the access tokens issued (token -> (email, expiry))."""

    service_accounts: dict[str, str] = attrs.Factory(dict)  # client_email -> public key PEM
    token_ttl_s: int = DEFAULT_TOKEN_TTL_S
    tokens: dict[str, tuple[str, float]] = attrs.Factory(dict)
    token_requests: int = 0
    tokens_issued: int = 0

    def public_key(self, email: str) -> str | None:
        if email == DEMO_EMAIL:
            return _demo_key()[1]
        return self.service_accounts.get(email)

    def issue(self, email: str) -> str:
        now = time.time()
        for token, (_, expiry) in list(self.tokens.items()):  # forget expired tokens
            if expiry <= now:
                del self.tokens[token]
        token = "ya29.sim-" + os.urandom(18).hex()
        self.tokens[token] = (email, now + self.token_ttl_s)
        self.tokens_issued += 1
        return token

    def valid(self, token: str) -> bool:
        found = self.tokens.get(token)
        return found is not None and found[1] > time.time()

    def to_json(self) -> dict:
        return {"service_accounts": sorted(self.service_accounts), "token_ttl_s": self.token_ttl_s,
                "token_requests": self.token_requests, "tokens_issued": self.tokens_issued}


def _oauth_error(error: str, description: str, status: int = 400) -> Response:
    return Response(orjson.dumps({"error": error, "error_description": description}), status, content_type=_JSON)


def verify_assertion(state: VertexState, assertion: str, audience: list[str]) -> tuple[str | None, str]:
    """(the service account's email, "") for a valid assertion, else (None, why)."""
    import google.auth.exceptions  # here: a simulator that never sees Vertex never loads google-auth
    import google.auth.jwt

    try:
        claims = google.auth.jwt.decode(assertion, verify=False)
    except (ValueError, google.auth.exceptions.GoogleAuthError):
        return None, "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe."
    email = claims.get("iss")
    key = state.public_key(email) if isinstance(email, str) else None
    if key is None:
        return None, "Invalid grant: account not found"
    try:
        claims = google.auth.jwt.decode(assertion, certs=key, audience=audience)
    except (ValueError, google.auth.exceptions.GoogleAuthError) as e:  # bad signature, expired, future, audience
        text = str(e)
        if "signature" in text.lower():
            return None, "Invalid JWT Signature."
        return None, f"Invalid JWT: {text}"
    if not isinstance(claims.get("exp"), int) or not isinstance(claims.get("iat"), int) or \
            claims["exp"] - claims["iat"] > MAX_ASSERTION_LIFETIME_S:
        return None, "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe."
    if not claims.get("scope") and not claims.get("target_audience"):
        return None, "Invalid OAuth scope or ID token audience provided."
    return email, ""


def google_unauthenticated(message: str) -> Response:

    return google_error(401, message)


def claude_error(status: int, message: str, *, retry_after_s: int | None = None, **kwargs: Any) -> Response:
    """Claude on Vertex: the model server's request checks (400) in Anthropic's shape; what
    Vertex's front end answers (throttling, outages, auth) in Google's."""

    if status == 400:
        return anthropic_error(status, message, **kwargs)
    return google_error(status, message, retry_after_s=retry_after_s)


def validate_claude(body: dict, *, model: str) -> tuple[str, str | None] | None:
    """Vertex's rawPredict body: an ``anthropic_version`` (Vertex's ``vertex-2023-10-16``, or
    an Anthropic API version date, which recent ``AnthropicVertex`` clients send), then
    Anthropic's own checks (the model is the URL's)."""
    version = body.get("anthropic_version")
    if not isinstance(version, str) or not (version == VERTEX_ANTHROPIC_VERSION or _API_VERSION.fullmatch(version)):
        return f"anthropic_version: Input should be '{VERTEX_ANTHROPIC_VERSION}'", "anthropic_version"
    return anthropic.validate({**body, "model": model})


def register(app, sim_state, answer, wires) -> None:
    """The Vertex routes on the simulator app (called by ``create_sim_app``): ``answer`` is
    its model-request handler, ``wires`` its (messages, gemini) wire descriptions."""

    state = VertexState()
    app.extensions["gatewayd.sim.vertex"] = state
    messages_wire, gemini_wire = wires

    def bearer_check(headers) -> Response | None:
        value = headers.get("authorization", "")
        token = value[7:].strip() if value[:7].lower() == "bearer " else ""
        if not token:
            return google_unauthenticated(_MISSING_CREDENTIALS)
        if not state.valid(token):
            return google_unauthenticated(_INVALID_CREDENTIALS)
        return None

    claude = attrs.evolve(messages_wire, error=claude_error, check_headers=bearer_check)
    gemini = attrs.evolve(gemini_wire, check_headers=bearer_check)

    @app.post("/token")
    async def token() -> Response:
        state.token_requests += 1
        form = await request.form
        if form.get("grant_type") != JWT_BEARER:
            return _oauth_error("unsupported_grant_type", f"Invalid grant_type: {form.get('grant_type', '')}")
        email, why = verify_assertion(state, form.get("assertion", ""), [GOOGLE_TOKEN_AUDIENCE, request.base_url])
        if email is None:
            return _oauth_error("invalid_grant", why)
        body = {"access_token": state.issue(email), "expires_in": state.token_ttl_s, "token_type": "Bearer"}
        return Response(orjson.dumps(body), 200, content_type=_JSON)

    @app.post("/vertex/v1/projects/<project>/locations/<location>/publishers/<publisher>/models/<path:target>")
    async def model(project: str, location: str, publisher: str, target: str) -> Response:
        name, _, method = target.rpartition(":")
        if publisher == "anthropic" and name and method in ("rawPredict", "streamRawPredict"):
            wire = attrs.evolve(claude, validate=functools.partial(validate_claude, model=name))
            return await answer(sim_state, wire, url_model=name, url_stream=method == "streamRawPredict")
        if publisher == "google" and name and method in ("generateContent", "streamGenerateContent"):
            sse = request.args.get("alt") == "sse"
            streaming = method == "streamGenerateContent"
            return await answer(sim_state, gemini, url_model=name, url_stream=streaming and sse,
                                as_array=streaming and not sse)
        entry = sim_state.record(await request.get_data())
        entry.status = 404
        return google_error(404, f"Publisher Model `projects/{project}/locations/{location}/publishers/{publisher}/"
                                 f"models/{name or target}` not found or method {method!r} not supported.")

    @app.get("/_sim/vertex")
    async def get_vertex() -> Response:
        return Response(orjson.dumps(state.to_json()), 200, content_type=_JSON)

    @app.put("/_sim/vertex")
    async def put_vertex() -> Response:
        try:
            doc = orjson.loads(await request.get_data())
        except orjson.JSONDecodeError:
            doc = None
        accounts = doc.get("service_accounts", {}) if isinstance(doc, dict) else None
        ttl = doc.get("token_ttl_s", state.token_ttl_s) if isinstance(doc, dict) else None
        if (not isinstance(doc, dict) or not set(doc) <= {"service_accounts", "token_ttl_s", "revoke_tokens"}
                or not isinstance(accounts, dict) or not all(isinstance(v, str) for v in accounts.values())
                or not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 1
                or not isinstance(doc.get("revoke_tokens", False), bool)):
            return google_error(400, 'expected {"service_accounts": {"<client_email>": "<public key PEM>"}, '
                                     '"token_ttl_s": <seconds>, "revoke_tokens": true}')
        state.service_accounts.update(accounts)
        state.token_ttl_s = ttl
        if doc.get("revoke_tokens"):
            state.tokens.clear()
        return Response(orjson.dumps(state.to_json()), 200, content_type=_JSON)

    @app.get("/_sim/vertex/service-account")
    async def service_account() -> Response:
        return Response(orjson.dumps(demo_service_account(request.host_url.rstrip("/"))), 200, content_type=_JSON)
