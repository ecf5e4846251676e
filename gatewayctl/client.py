"""The admin API client: JSON over HTTP over gatewayd's admin Unix socket.

Everything that can go wrong between gatewayctl and the daemon ends here as one
:class:`AdminError` whose message is a single line fit to show an operator: the
socket is missing, refused or forbidden, the daemon answered with an API error,
or it answered something that is not JSON. The CLI prints that line and exits 1;
no httpx exception (and no traceback) ever reaches the operator.
"""

from __future__ import annotations

import errno
import os
import ssl
from typing import Any
from urllib.parse import quote

import httpx

DEFAULT_SOCKET = "var/admin.sock"
DEMO_SOCKET = "var/demo/admin.sock"  # `gatewayd serve --demo` (make run) in the same directory
SOCKET_ENV = "GATEWAY_ADMIN_SOCKET"

# The admin API is local and quick, but an audit of a large database is a full scan.
TIMEOUT = httpx.Timeout(60.0, connect=5.0)

_ERRNO_REASONS = {
    errno.ENOENT: "no such file",
    errno.ECONNREFUSED: "connection refused",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "no such file",
}


class AdminError(Exception):
    """The admin call failed; ``str(error)`` is one line for the operator."""


def resolve_socket(explicit: str | None) -> str:
    """``--socket`` if given, else ``$GATEWAY_ADMIN_SOCKET``, else ``var/admin.sock``; else, when
    only the demo's socket is there (``make run`` in this checkout), ``var/demo/admin.sock``."""
    chosen = explicit or os.environ.get(SOCKET_ENV)
    if chosen:
        return chosen
    if not os.path.exists(DEFAULT_SOCKET) and os.path.exists(DEMO_SOCKET):
        return DEMO_SOCKET
    return DEFAULT_SOCKET


def segment(value: str) -> str:
    """Quote one path segment (an account email, a model id) so '/' and '@' stay inside it."""
    return quote(value, safe="")


class AdminClient:
    """Thin JSON client for the admin API. One short-lived connection per call: over the Unix
    socket (``socket_path``) or, remote, over HTTPS to ``url`` with an admin token."""

    def __init__(self, socket_path: str | None = None, *, url: str | None = None, token: str | None = None,
                 cacert: str | None = None) -> None:
        self.socket_path = socket_path
        self.url = url.rstrip("/") if url else None
        self.token = token
        self.cacert = cacert

    @property
    def where(self) -> str:
        return self.url or f"admin socket at {self.socket_path}"

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body=body)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body=body)

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body=body)

    def _http(self) -> httpx.Client:
        if self.url is None:
            # plain HTTP on a Unix socket: no TLS context (loading the CA bundle for
            # one is ~20 ms, as long as the rest of a command's round trip)
            return httpx.Client(transport=httpx.HTTPTransport(uds=self.socket_path, verify=False),
                                base_url="http://gatewayd", timeout=TIMEOUT)
        verify: Any = True
        if self.cacert:
            try:
                verify = ssl.create_default_context(cafile=self.cacert)
            except (OSError, ssl.SSLError) as exc:
                raise AdminError(f"--cacert {self.cacert}: cannot be read as PEM certificates "
                                 f"({getattr(exc, 'strerror', None) or exc})") from None
        return httpx.Client(base_url=self.url, timeout=TIMEOUT, verify=verify,
                            headers={"authorization": f"Bearer {self.token}"})

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        """Send one request and return the decoded JSON answer, or raise :class:`AdminError`."""
        try:
            with self._http() as http:
                response = http.request(method, path, json=body, params=params)
        except httpx.ConnectError as exc:
            if self.url is not None:
                raise AdminError(f"cannot reach gatewayd at {self.url} ({_remote_reason(exc)})") from None
            raise AdminError(
                f"cannot reach gatewayd admin socket at {self.socket_path} "
                f"({_connect_reason(exc)}): is gatewayd running?"
            ) from None
        except httpx.TimeoutException:
            raise AdminError(
                f"gatewayd did not answer on {self.where} within "
                f"{TIMEOUT.read:g} s ({method} {path})"
            ) from None
        except httpx.TransportError as exc:
            raise AdminError(
                f"lost the connection to gatewayd at {self.where} "
                f"({exc or type(exc).__name__})"
            ) from None
        return _decode(response)


def _remote_reason(exc: BaseException) -> str:
    """A TLS failure named as one (the certificate is not trusted: --cacert), else the OS's reason."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS certificate not trusted: {cause.verify_message or cause.reason}; for a private CA give --cacert"
        if isinstance(cause, ssl.SSLError):
            return f"TLS failed: {cause.reason or cause}"
        cause = cause.__cause__ or cause.__context__
    return _connect_reason(exc)


def _decode(response: httpx.Response) -> Any:
    if response.status_code == 204 or not response.content:
        if response.is_error:
            raise AdminError(f"gatewayd answered HTTP {response.status_code} with no detail")
        return None
    try:
        document = response.json()
    except ValueError:
        raise AdminError(
            f"gatewayd answered HTTP {response.status_code} with a body that is not JSON"
        ) from None
    if response.is_error:
        raise AdminError(_error_message(response.status_code, document))
    return document


def _error_message(status: int, document: Any) -> str:
    """The contract's ``{"error": {"message", "code"}}``; anything else still yields a line."""
    error = document.get("error") if isinstance(document, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"]:
        return " ".join(error["message"].split())
    return f"gatewayd answered HTTP {status} with no error message"


def _connect_reason(exc: BaseException) -> str:
    """Find the OSError under httpx's and httpcore's wrappers and name it in a few words."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno is not None:
            return _ERRNO_REASONS.get(cause.errno) or os.strerror(cause.errno).lower()
        cause = cause.__cause__ or cause.__context__
    return str(exc) or "connection failed"
