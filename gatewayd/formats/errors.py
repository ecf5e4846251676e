"""The one error a pure translation raises: the client sent something we cannot carry."""

from __future__ import annotations

from typing import Any

class TranslationError(ValueError):
    """Becomes a 400 ``invalid_request_error`` naming ``param`` (e.g. ``messages[3].content``)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidAnswer(Exception):
    """The provider's answer breaks its protocol in a way the gateway checks on purpose
    (an embeddings answer without a ``data`` list, say). Like JSON that does not parse, it
    is the provider's fault: a 502. Anything else a translator raises is the gateway's own
    bug and must not be blamed on the provider (``relay`` answers those with a 500)."""


def answer_object(raw: bytes) -> dict[str, Any]:
    """A provider's non-streaming answer as a JSON object: the one shape check every finisher
    makes before reading it (JSON that does not parse raises ``orjson.JSONDecodeError``)."""
    import orjson

    doc = orjson.loads(raw)
    if not isinstance(doc, dict):
        raise InvalidAnswer(f"the provider's answer is a JSON {type(doc).__name__}, not an object")
    return doc
