"""The one error a pure translation raises: the client sent something we cannot carry."""

from __future__ import annotations


class TranslationError(ValueError):
    """Becomes a 400 ``invalid_request_error`` naming ``param`` (e.g. ``messages[3].content``)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
