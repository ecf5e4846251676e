"""OAuth2 access tokens for Vertex AI, from a service-account JSON file or the machine's
application default credentials (google-auth does the JWT signing and the token exchange);
and the ``[[providers]]`` settings of ``protocol = "vertex"`` (:func:`provider_settings`).

The config loader imports this module (through ``gatewayd.protocols``) only when a Vertex AI
provider is configured; it imports no adapter and nothing of ``gatewayd.formats``
(``tests/test_import_graph.py``).

google-auth's refresh is synchronous (it posts to the credentials' ``token_uri`` with
``requests``), so it runs in a worker thread (``trio.to_thread``), never on the event loop,
one refresh at a time per provider (a ``trio.Lock``: a burst of requests on an expired
token makes one token request, not a hundred). The token is cached and refreshed before it
expires: when less than a quarter of its lifetime, at most :data:`REFRESH_MARGIN_S`, is left
(Google's tokens live an hour: refreshed with five minutes to go).

Loading is done once, when the config is read: a file that cannot be read or is not a
credentials file, or no application default credentials, is a config error naming the
``credentials_file`` key (one line, exit 2 at start-up; a reload refuses it).
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import re
import time
from typing import Any, Mapping

import attrs
import httpx
import trio

from gatewayd.protocols import SettingError

log = logging.getLogger("gatewayd.providers.vertex")

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
REFRESH_MARGIN_S = 300.0
TOKEN_REQUEST_TIMEOUT_S = 10.0  # google-auth's own default is 120 s: a hung token endpoint would hold requests
# "global", or a Google Cloud region: us-east5, europe-west1, asia-northeast1, northamerica-northeast2
_REGION = re.compile(r"[a-z]+-[a-z]+[0-9]+")
# what Google allows in a project id (6-30 characters), and the older "domain:project" form
_PROJECT = re.compile(r"(?:[a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]")


def provider_settings(table: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """``project`` and ``region`` (required), ``credentials_file`` (optional: a
    service-account JSON; default: application default credentials, which google-auth
    finds from the process's own environment), loaded here so bad credentials are a config
    error, not a failed request. No key of a Vertex provider names a variable: ``environ``
    (the config loader's) is not read."""
    project = table.get("project")
    if not isinstance(project, str) or not project:
        raise SettingError("project", 'required for protocol vertex: the Google Cloud project id (e.g. "my-project")')
    if not _PROJECT.fullmatch(project):
        raise SettingError("project", f"{project!r} is not a Google Cloud project id (6-30 lower-case letters, "
                                      "digits and hyphens)")
    region = table.get("region")
    if not isinstance(region, str) or not (region == "global" or _REGION.fullmatch(region)):
        raise SettingError("region", f'must be "global" or a Google Cloud region such as "us-east5" or '
                                     f'"europe-west1" (got {region!r})')
    credentials_file = table.get("credentials_file")
    if credentials_file is not None and (not isinstance(credentials_file, str) or not credentials_file):
        raise SettingError("credentials_file", "must be the path of a service-account JSON file")
    return {"project": project, "region": region, "credentials_file": credentials_file,
            "credentials": load(credentials_file)}


class TokenUnavailable(httpx.ConnectError):
    """No access token could be had (the token endpoint refused the credentials, or could
    not be reached): the route cannot be reached, as when its host refuses connections, so
    the relay fails over to the next route and cools this one down."""


@functools.cache
def _timed_request_class():
    """google-auth's requests transport with a short timeout on the token request (google-auth
    and requests are imported only when a Vertex provider is configured: 0.3 s of imports)."""
    import google.auth.transport.requests

    class TimedRequest(google.auth.transport.requests.Request):
        def __call__(self, url, method="GET", body=None, headers=None, timeout=None, **kwargs):
            timeout = TOKEN_REQUEST_TIMEOUT_S if timeout is None else min(timeout, TOKEN_REQUEST_TIMEOUT_S)
            return super().__call__(url, method=method, body=body, headers=headers, timeout=timeout, **kwargs)

    return TimedRequest


@attrs.define(eq=False)
class AccessTokens:
    """One provider's Google credentials and its cached access token.

    Compared by where the credentials come from (a reload that keeps the same file keeps
    an equal provider), not by the token of the moment."""

    source: str  # the credentials file's path and its service account, or "application default credentials"
    credentials: object = attrs.field(repr=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, repr=False)
    _token: str | None = attrs.field(default=None, repr=False)
    _expires_at: float = 0.0  # time.time() when the cached token expires
    _refresh_at: float = 0.0  # time.time() from when it is refreshed before use
    refreshes: int = 0  # how many tokens were fetched (tests and logs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AccessTokens) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)

    def _fresh(self) -> str | None:
        return self._token if self._token is not None and time.time() < self._refresh_at else None

    async def token(self) -> str:
        """A valid access token: the cached one, or a new one fetched in a worker thread."""
        token = self._fresh()
        if token is not None:
            return token
        async with self._lock:
            token = self._fresh()  # another task refreshed it while this one waited
            if token is not None:
                return token
            await trio.to_thread.run_sync(self._refresh)
            assert self._token is not None
            return self._token

    def forget(self, token: str) -> None:
        """Vertex refused ``token`` (401): the next request fetches a new one (unless another
        refresh already replaced it)."""
        if self._token == token:
            self._token = None

    def _refresh(self) -> None:
        """In a worker thread: one token request through google-auth."""
        import google.auth.exceptions

        creds = self.credentials
        try:
            creds.refresh(_timed_request_class()())  # type: ignore[attr-defined]
        except (google.auth.exceptions.RefreshError, google.auth.exceptions.TransportError) as e:
            log.warning("vertex: no access token from %s: %s", self.source, e)
            raise TokenUnavailable(f"no access token for {self.source}: {e}") from None
        now = time.time()
        expiry = getattr(creds, "expiry", None)  # naive UTC, google-auth's convention
        if isinstance(expiry, datetime.datetime):
            expires_at = expiry.replace(tzinfo=datetime.timezone.utc).timestamp()
        else:
            expires_at = now + 3600.0
        lifetime = max(0.0, expires_at - now)
        self._token = creds.token  # type: ignore[attr-defined]
        self._expires_at = expires_at
        self._refresh_at = expires_at - min(REFRESH_MARGIN_S, lifetime / 4)
        self.refreshes += 1


def from_service_account_info(info: dict, source: str) -> AccessTokens:
    """Credentials from a parsed service-account (or other google-auth) JSON document."""
    import google.auth
    import google.auth.exceptions

    try:
        credentials, _ = google.auth.load_credentials_from_dict(info, scopes=list(SCOPES))
    except (google.auth.exceptions.DefaultCredentialsError, ValueError) as e:
        raise SettingError("credentials_file", f"{source}: not usable Google credentials ({e})") from None
    email = getattr(credentials, "service_account_email", None)
    return AccessTokens(source=f"{source} ({email})" if email else source, credentials=credentials)


def load(credentials_file: str | None) -> AccessTokens:
    """The provider's credentials: the file's, else the application default credentials
    (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's ADC file, the metadata server)."""
    import google.auth
    import google.auth.exceptions

    if credentials_file is not None:
        try:
            with open(credentials_file, "rb") as f:
                text = f.read()
        except OSError as e:
            raise SettingError("credentials_file", f"cannot read {credentials_file}: {e.strerror or e}") from None
        try:
            info = json.loads(text)
        except ValueError:
            raise SettingError("credentials_file",
                               f"{credentials_file} is not JSON (a service-account key file?)") from None
        if not isinstance(info, dict):
            raise SettingError("credentials_file", f"{credentials_file} is not a JSON object")
        return from_service_account_info(info, credentials_file)
    try:
        credentials, _ = google.auth.default(scopes=list(SCOPES))
    except google.auth.exceptions.DefaultCredentialsError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SettingError("credentials_file", f"not set, and no application default credentials were found "
                                               f"({first})") from None
    return AccessTokens(source="application default credentials", credentials=credentials)
