"""An answer's facts for its span, read from the bytes the client gets: response id, model,
finish reasons. Pure; used only for sampled requests.

The answer is in the client's format, whichever provider served it: chat and embeddings
(``id``, ``model``, ``choices[].finish_reason``), messages (``id``, ``model``,
``stop_reason``), responses (``id``, ``model``, ``status``) and the Gemini API
(``responseId``, ``modelVersion``, ``finishReason``). A byte search rather than a parse,
so a stream is read chunk by chunk without decoding its events: the first ``id`` and
``model`` keys of an answer are its own in every one of these formats (they come before any
content), and a key quoted inside generated text is escaped (``\\"id\\"``), so it does not match.
"""

from __future__ import annotations

import re

import orjson

_ID = re.compile(rb'"(?:id|responseId)"\s*:\s*"([^"\\]{1,200})"')
_MODEL = re.compile(rb'"(?:model|modelVersion)"\s*:\s*"([^"\\]{1,200})"')
# chat, messages, Gemini; the Responses API's final status ("completed", "incomplete", "failed")
_FINISH = re.compile(rb'"(?:finish_reason|stop_reason|finishReason)"\s*:\s*"([^"\\]{1,64})"'
                     rb'|"type"\s*:\s*"response\.(completed|incomplete|failed)"')
MAX_REASONS = 16


class AnswerFacts:
    """What the spans say about the answer; fed the client's bytes in order."""

    __slots__ = ("response_id", "model", "finish_reasons")

    def __init__(self) -> None:
        self.response_id: str | None = None
        self.model: str | None = None
        self.finish_reasons: list[str] = []

    def feed(self, data: bytes) -> None:
        if self.response_id is None:
            found = _ID.search(data)
            if found:
                self.response_id = found.group(1).decode("utf-8", "replace")
        if self.model is None:
            found = _MODEL.search(data)
            if found:
                self.model = found.group(1).decode("utf-8", "replace")
        if len(self.finish_reasons) < MAX_REASONS:
            for match in _FINISH.finditer(data):
                reason = (match.group(1) or match.group(2)).decode("utf-8", "replace")
                if len(self.finish_reasons) < MAX_REASONS:
                    self.finish_reasons.append(reason)


def from_body(body: bytes) -> AnswerFacts:
    """A plain answer's facts, parsed (the whole answer is at hand)."""
    facts = AnswerFacts()
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return facts
    if not isinstance(doc, dict):
        return facts
    found_id = doc.get("id", doc.get("responseId"))
    facts.response_id = found_id if isinstance(found_id, str) else None
    model = doc.get("model", doc.get("modelVersion"))
    facts.model = model if isinstance(model, str) else None
    reasons: list = []
    for choice in doc.get("choices") or doc.get("candidates") or ():
        if isinstance(choice, dict):
            reasons.append(choice.get("finish_reason", choice.get("finishReason")))
    if isinstance(doc.get("stop_reason"), str):
        reasons.append(doc["stop_reason"])
    if doc.get("object") == "response" and isinstance(doc.get("status"), str):
        reasons.append(doc["status"])
    facts.finish_reasons = [r for r in reasons if isinstance(r, str)][:MAX_REASONS]
    return facts
