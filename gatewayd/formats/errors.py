"""The two errors a pure translation raises, and the one boundary provider bytes cross.

``TranslationError``: the client sent something we cannot carry (a 400). ``InvalidAnswer``:
the provider sent something that breaks its protocol (a 502) -- the one provider-fault type.
Every parse of a provider's bytes goes through :func:`provider_json` (or
:func:`provider_json_or_none` where an unreadable body is expected, as in an error page),
so JSON that does not parse is the provider's fault only when it came from the provider: a
``JSONDecodeError`` anywhere else is a bug of ours and is answered as one.
"""

from __future__ import annotations

from typing import Any

import orjson


class TranslationError(ValueError):
    """Becomes a 400 ``invalid_request_error`` naming ``param`` (e.g. ``messages[3].content``)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidAnswer(Exception):
    """The provider's answer breaks its protocol: JSON that does not parse
    (:func:`provider_json`) or a shape the gateway checks on purpose (an embeddings answer
    without a ``data`` list, say). The one provider fault: a 502, and the route's failure.
    Anything else a translator raises is the gateway's own bug and must not be blamed on the
    provider (the relay answers those with a 500)."""


def provider_json(raw: bytes | str) -> Any:
    """Provider bytes (an answer, an SSE event's data) as JSON: the boundary. What does not
    parse raises :class:`InvalidAnswer`; what follows is our code reading a parsed value."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InvalidAnswer(f"the provider sent JSON that does not parse ({e})") from None


def provider_json_or_none(raw: bytes | str) -> Any:
    """:func:`provider_json` for bytes that may well not be JSON (a provider's error body, an
    HTML page from a proxy): None instead of the fault."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def answer_object(raw: bytes) -> dict[str, Any]:
    """A provider's non-streaming answer as a JSON object: the one shape check every finisher
    makes before reading it."""
    doc = provider_json(raw)
    if not isinstance(doc, dict):
        raise InvalidAnswer(f"the provider's answer is a JSON {type(doc).__name__}, not an object")
    return doc


#: HTTP status -> the gRPC status name Google's errors carry.
GRPC_STATUS = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 402: "FAILED_PRECONDITION", 403: "PERMISSION_DENIED",
    404: "NOT_FOUND", 409: "ABORTED", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED",
    500: "INTERNAL", 501: "UNIMPLEMENTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}


def google_error(status: int, message: str, reason: str | None = None) -> dict[str, Any]:
    """Google's error envelope; ``reason`` (the gateway's or the provider's error code) goes
    where Google puts a machine-readable cause, a ``google.rpc.ErrorInfo`` detail."""
    error: dict[str, Any] = {"code": status, "message": message,
                   "status": GRPC_STATUS.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")}
    if reason:
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                             "domain": "gatewayd"}]
    return {"error": error}
