"""Gateway errors and the one function that puts them in an envelope.

Every check the gateway itself makes answers in the OpenAI envelope
(``{"error": {"message", "type", "code"}}``, ``param: null`` on 404), its message
ending with `` (request id: <id>)``. An endpoint names the envelope its errors use once
the request reaches the model step (``gatewayd.endpoints.Endpoint.envelope``): on
/v1/messages that is Anthropic's (``{"type": "error", "error": {...}}``). Every error body
the gateway writes comes from :func:`error_body`; on the Gemini API's endpoints it is
Google's (``{"error": {"code", "message", "status"}}``). A new envelope is one more writer
in ``ENVELOPES``.
"""

from __future__ import annotations

import logging
import time
from email.utils import parsedate_to_datetime

import orjson

from gatewayd.formats.errors import google_error, provider_json_or_none
from gatewayd.provider_identifiers import scrub_provider_identifiers

log = logging.getLogger("gatewayd.errors")

_CHAT_TYPE_BY_STATUS = {429: "rate_limit_error"}

MESSAGES_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


class GatewayError(Exception):
    """A refusal or failure the gateway answers itself."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str = "",
        *,
        type: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        model_step: bool = False,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.type = type or _CHAT_TYPE_BY_STATUS.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
        self.param = param
        self.headers = headers or {}
        self.model_step = model_step  # on /v1/messages: answer in the messages shape
        # for the operator's log line only, never the client: why (a 401's cause, which the
        # spec keeps from the client); None: the message says it
        self.reason = reason

    def log_reason(self) -> str:
        """The short reason the request log line carries (``reason``, else the message, cut)."""
        text = self.reason or self.message
        return text if len(text) <= 200 else text[:197] + "..."

    def chat_body(self, request_id: str) -> bytes:
        """The OpenAI envelope (what every check before the model step answers in)."""
        return error_body(self, request_id)


def _openai_envelope(error: GatewayError, request_id: str) -> bytes:
    doc: dict = {
        "message": f"{error.message} (request id: {request_id})",
        "type": error.type,
        "code": error.code,
    }
    if error.status == 404 or error.param is not None:
        doc["param"] = error.param
    return orjson.dumps({"error": doc})


def _anthropic_envelope(error: GatewayError, request_id: str) -> bytes:
    kind = MESSAGES_TYPE_BY_STATUS.get(error.status, "api_error" if error.status >= 500 else "invalid_request_error")
    return orjson.dumps(
        {"type": "error", "error": {"type": kind, "message": f"{error.message} (request id: {request_id})"}}
    )


def _google_envelope(error: GatewayError, request_id: str) -> bytes:
    """Google's (``{"error": {"code", "message", "status"}}``), the gateway's code as the
    ``ErrorInfo`` reason: the Gemini API's endpoints."""
    return orjson.dumps(google_error(error.status, f"{error.message} (request id: {request_id})",
                                     error.code or error.type))


ENVELOPES = {"openai": _openai_envelope, "anthropic": _anthropic_envelope, "google": _google_envelope}


def error_body(error: GatewayError, request_id: str, envelope: str = "openai") -> bytes:
    """The one writer of error bodies: ``envelope`` (an endpoint's) for an error met at the
    model step or later, the OpenAI envelope for the checks before it."""
    write = ENVELOPES[envelope] if error.model_step else _openai_envelope
    return write(error, request_id)


class BodyError(GatewayError):
    """The client's request body is wrong: 400 ``invalid_request_error`` naming the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(400, message, "invalid_request_error", param=param, model_step=True)


def invalid_token(reason: str) -> GatewayError:
    """The one 401 for every key problem: the cause is not told to the client (the spec), only
    to the operator's log line (``reason``: "no key presented", "key disabled", ...)."""
    return GatewayError(401, "Invalid token", "", reason=reason)


def not_found_path(path: str) -> GatewayError:
    return GatewayError(404, f"Invalid URL ({path})", "not_found")


def not_implemented(what: str) -> GatewayError:
    return GatewayError(501, f"{what} is not offered by this gateway", "api_not_implemented")


def model_not_found(model: str, why: str, reason: str) -> GatewayError:
    """The spec's 503 ``model_not_found``, its message naming the model and saying ``why`` (which
    case, and what to do); ``reason``: the case in a few words, for the log line."""
    return GatewayError(503, f"No available channel for model {model}: {why}", "model_not_found", reason=reason)


class UpstreamError(Exception):
    """The provider answered with an error: its status, headers and body go back to the client,
    with the operator's identifiers (organization, project, key fragment) removed from the body
    here, the one place every provider error passes (``gatewayd.provider_identifiers``).
    ``provider_body`` keeps the bytes as received, for the operator's log."""

    def __init__(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        super().__init__(f"upstream status {status}")
        self.status = status
        self.provider_body = body
        self.body = scrub_provider_identifiers(body)
        self.headers = headers

    def message(self, *, for_operator: bool = False) -> str:
        """The provider's message as a client may see it; ``for_operator``: as the provider wrote it."""
        body = self.provider_body if for_operator else self.body
        doc = provider_json_or_none(body)
        if doc is None:
            text = body.decode("utf-8", "replace").strip()
            return text[:500] or f"upstream answered {self.status}"
        err = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"]
        if isinstance(err, str):
            return err
        return f"upstream answered {self.status}"

    def error_type(self) -> str | None:
        doc = provider_json_or_none(self.body)
        err = doc.get("error") if isinstance(doc, dict) else None
        return err.get("type") if isinstance(err, dict) else None


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` in seconds (the delay form; an HTTP date is read too)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def our_fault(request_id: str, where: str, exc: BaseException) -> GatewayError:
    """gatewayd's own code raised (a translator, a pipe, the estimator, the store): log the
    traceback with the request id, and answer 500 ``internal_error``, never the provider's 502.

    ``where`` completes "the gateway failed ..." (e.g. "while translating the provider's answer").
    """
    log.error("internal error %s: %s", where, type(exc).__name__, exc_info=exc,
              extra={"fields": {"request_id": request_id}})
    return GatewayError(500, f"the gateway failed {where} ({type(exc).__name__}); this is a gateway bug, "
                        "not a provider error", "internal_error", model_step=True)
