"""How a Bedrock request is authorized: SigV4 (botocore) or a Bedrock API key; and the
``[[providers]]`` settings of ``protocol = "bedrock"`` (:func:`provider_settings`).

The config loader imports this module (through ``gatewayd.protocols``) only when a Bedrock
provider is configured; it imports no adapter and nothing of ``gatewayd.formats``, so
reading a config stays cheap (``tests/test_import_graph.py``).

The provider's credentials are resolved once, when the config is read:

- ``api_key_env``: a Bedrock API key, sent as ``Authorization: Bearer`` (no signing);
- ``aws_access_key_id_env`` / ``aws_secret_access_key_env`` (/ ``aws_session_token_env``):
  static keys read from those environment variables;
- otherwise botocore's default chain (environment, shared config and credentials files,
  SSO, container and instance roles). The chain may read files and call the instance
  metadata service, so it runs once per process (at start-up, before any request) and
  is shared by later reloads.

Signing is CPU only: an HMAC chain (about 0.1 ms) and the SHA-256 of the body, which grows
with it (1 ms a megabyte; ``bench/bedrock_signing.py``). :meth:`AwsAuth.signed_headers`, what
a request calls just before it is sent, hashes a body over :data:`HASH_IN_THREAD_OVER` bytes
in a worker thread (``hashlib`` releases the GIL) and hands the digest to the signer, so the
loop only does the HMACs. Temporary
credentials (a role's) are kept frozen and refreshed ahead of expiry *off* the event loop:
a request that finds them inside botocore's advisory window starts one refresh in a worker
thread (``trio.to_thread``) and signs with the still-valid frozen ones meanwhile.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any, Mapping

import trio
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials, RefreshableCredentials
from botocore.exceptions import BotoCoreError
from botocore.session import Session

from gatewayd.protocols import SettingError

log = logging.getLogger("gatewayd")

SERVICE = "bedrock"
#: bodies larger than this are hashed off the event loop (a 256 kB SHA-256 costs ~0.3 ms)
HASH_IN_THREAD_OVER = 256 * 1024
_chain: object | None = None  # the default chain's credentials, resolved once per process
REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$")


def provider_settings(table: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """``region`` (checked: ``us-east-1``, ``eu-central-2``, ``us-gov-west-1`` ...) and the
    credentials (:class:`AwsAuth`), resolved now: a missing one is a start-up error, not a
    failed request. ``environ`` is the config loader's: where the ``*_env`` keys' variables
    are read (botocore's default chain reads the process's own)."""
    region = table.get("region")
    if not isinstance(region, str) or not REGION.match(region):
        raise SettingError("region", f"must be an AWS region such as us-east-1 (got {region!r})")
    return {"region": region, "auth": AwsAuth.from_table(table, region, environ)}


def _env(table: Mapping, key: str, environ: Mapping[str, str], required: bool = True) -> str | None:
    name = table.get(key)
    if name is None:
        if required:
            raise SettingError(key, "required with the other aws_*_env settings")
        return None
    if not isinstance(name, str) or not name:
        raise SettingError(key, "must name an environment variable")
    value = environ.get(name)
    if not value:
        raise SettingError(key, f"environment variable {name} is not set")
    return value


def _default_chain():
    global _chain
    if _chain is None:
        try:
            _chain = Session().get_credentials() or False
        except BotoCoreError as e:
            raise SettingError("credentials", f"the AWS credential chain failed: {e}") from None
    return _chain or None


class AwsAuth:
    """One provider's Bedrock credentials; :meth:`headers` authorizes a request."""

    def __init__(self, *, region: str, api_key: str | None = None, source=None) -> None:
        self.region = region
        self.api_key = api_key
        self.source = source  # botocore Credentials / RefreshableCredentials, when signing
        self._frozen: ReadOnlyCredentials | None = source.get_frozen_credentials() if source is not None else None
        self._refreshing = False

    @classmethod
    def from_table(cls, table: Mapping, region: str, environ: Mapping[str, str]) -> "AwsAuth":
        if table.get("api_key_env") is not None:
            return cls(region=region, api_key=_env(table, "api_key_env", environ))
        if table.get("api_key") is not None:
            return cls(region=region, api_key=str(table["api_key"]))
        keys = ("aws_access_key_id_env", "aws_secret_access_key_env")
        if any(table.get(k) is not None for k in (*keys, "aws_session_token_env")):
            access, secret = (_env(table, k, environ) for k in keys)
            token = _env(table, "aws_session_token_env", environ, required=False)
            return cls(region=region, source=Credentials(access, secret, token))
        chain = _default_chain()
        if chain is None:
            raise SettingError("credentials", "no AWS credentials found (set aws_access_key_id_env and "
                                              "aws_secret_access_key_env, api_key_env, or configure the AWS chain)")
        return cls(region=region, source=chain)

    def __eq__(self, other) -> bool:
        return isinstance(other, AwsAuth) and (self.region, self.api_key, self._frozen) == (
            other.region, other.api_key, other._frozen)

    __hash__ = None  # type: ignore[assignment]

    def credentials(self) -> ReadOnlyCredentials | None:
        """The frozen credentials to sign with; starts a refresh off the loop when they near expiry."""
        source = self.source
        if isinstance(source, RefreshableCredentials) and not self._refreshing and source.refresh_needed():
            try:
                trio.lowlevel.spawn_system_task(self._refresh)
                self._refreshing = True
            except RuntimeError:  # outside trio (a script): nothing to refresh on
                pass
        return self._frozen

    async def _refresh(self) -> None:
        try:
            self._frozen = await trio.to_thread.run_sync(self.source.get_frozen_credentials)
        except Exception:  # noqa: BLE001 - any failure of the chain: logged, the old credentials kept
            log.exception("gatewayd: refreshing the AWS credentials failed; retrying on the next request")
        finally:
            self._refreshing = False

    def headers(self, url: str, body: bytes, headers: dict[str, str],
                payload_hash: str | None = None) -> dict[str, str]:
        """``headers`` plus the authorization: the Bearer key, or SigV4 over the method, the
        URL as sent (its path percent-encoded as it goes on the wire), these headers, the
        host and the body's SHA-256 (``payload_hash``, its hex digest, when already known)."""
        if self.api_key is not None:
            return {**headers, "authorization": f"Bearer {self.api_key}"}
        request = AWSRequest(method="POST", url=url, data=body, headers=dict(headers))
        _SigV4(self.credentials(), SERVICE, self.region, payload_hash).add_auth(request)
        return dict(request.headers.items())

    async def signed_headers(self, url: str, body: bytes, headers: dict[str, str]) -> dict[str, str]:
        """:meth:`headers`, with a large body's SHA-256 computed in a worker thread."""
        if self.api_key is not None or len(body) <= HASH_IN_THREAD_OVER:
            return self.headers(url, body, headers)
        digest = await trio.to_thread.run_sync(_sha256_hex, body)
        return self.headers(url, body, headers, digest)


def _sha256_hex(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


class _SigV4(SigV4Auth):
    """botocore's SigV4, told the payload's hash instead of computing it (on the loop). The
    hash is not sent as ``X-Amz-Content-SHA256``: the request is the one botocore would sign."""

    def __init__(self, credentials: ReadOnlyCredentials | None, service: str, region: str,
                 payload_hash: str | None) -> None:
        super().__init__(credentials, service, region)
        self._payload_hash = payload_hash

    def payload(self, request: AWSRequest) -> str:
        if self._payload_hash is None:
            return str(super().payload(request))
        return self._payload_hash
