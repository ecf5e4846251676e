"""Responses compaction on translated routes: the gateway summarises with the routed model.

OpenAI's Responses API compacts a long conversation two ways, and agent clients use both:

- ``POST /v1/responses/compact`` (the OpenAI SDK's ``responses.compact()``): the answer is a
  ``response.compaction`` object whose ``output`` is the conversation's user messages
  followed by one ``compaction`` item;
- a ``/v1/responses`` request whose last input item is ``{"type": "compaction_trigger"}``
  (Codex's remote compaction): the answer's output is exactly one ``compaction`` item
  (streamed: ``response.output_item.added`` / ``.done`` of it, then ``response.completed``).

A ``compaction`` item (``{type, id, encrypted_content}``) is opaque to the client, which sends
it back as input on the next turn in place of the history it summarises. OpenAI's content is
encrypted for its own models; a model the gateway translates to cannot read it. So on those
routes the gateway compacts itself: :func:`summarising_request` is the conversation with a
last user turn asking for a handoff summary (same instructions and tools, so the provider's
prompt cache still serves the prefix; no tool may be called, no reasoning asked), sent to the
routed model as an ordinary request (one request, one usage row, the same hold);
:class:`CompactionStream` and :func:`compaction_response` turn its answer into the one
``compaction`` item, whose ``encrypted_content`` is the summary in the gateway's own wrapping
(:func:`wrap_summary`, not encrypted: it is the client's own conversation). Given back as
input, :func:`summary_message` makes it a user message carrying the summary, which is how the
summary reaches the model.

Pure: events and documents in, events and documents out.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any

import orjson

from gatewayd.formats.errors import TranslationError
from gatewayd.formats.pipes import Pipe
from gatewayd.formats.sse import SSEEvent, SSESplitter, encode

__all__ = [
    "COMPACTION_PROMPT",
    "CompactionPipe",
    "CompactionStream",
    "compacted_response",
    "compaction_response",
    "summarising_request",
    "summary_message",
    "wants_compaction",
    "wrap_summary",
]

TRIGGER = "compaction_trigger"

#: The last user turn of a summarising request.
COMPACTION_PROMPT = (
    "The conversation above is about to be replaced by a summary, to free the context window. "
    "Write that summary for another instance of yourself who will continue the work without seeing "
    "the conversation: the user's goal and constraints, what has been done and decided so far, the "
    "current state (files, commands and their results, errors still open), and what remains to do "
    "next. Be concise and specific; write only the summary, and call no tool."
)

#: How a summary reads when it comes back as input.
SUMMARY_HEADING = "Summary of the earlier conversation, which was compacted to save context:"

#: The gateway's wrapping of a summary in ``encrypted_content`` (versioned, so an item another
#: provider made is told apart and refused rather than shown to the model as text).
_WRAPPING = "gatewayd-compaction-v1."

#: Fields of a responses body a summarising request keeps: what the model needs to read the
#: conversation the same way (and its provider to serve the cached prefix), and the delivery.
_KEPT = ("model", "instructions", "tools", "max_output_tokens", "stream", "store", "metadata", "user",
         "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "service_tier", "temperature", "top_p")


def wants_compaction(body: dict[str, Any]) -> bool:
    """Whether a ``/v1/responses`` body asks for compaction (its last input item is the trigger)."""
    items = body.get("input")
    return isinstance(items, list) and bool(items) and isinstance(items[-1], dict) and items[-1].get("type") == TRIGGER


def summarising_request(body: dict[str, Any]) -> dict[str, Any]:
    """The responses body that asks the routed model for the summary of ``body``'s
    conversation (everything before the trigger, or all of a ``/v1/responses/compact`` input)."""
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    if not isinstance(items, list):
        raise TranslationError("input must be a string or an array of input items", "input")
    if wants_compaction(body):
        items = items[:-1]
    for k, item in enumerate(items):
        if isinstance(item, dict) and item.get("type") == TRIGGER:
            raise TranslationError("compaction_trigger must be the last input item", f"input[{k}]")
    if not items:
        raise TranslationError("there is nothing to compact: the input holds no conversation", "input")
    if not body.get("tools"):
        items = [_transcribed(item) for item in items]
    out = {k: body[k] for k in _KEPT if k in body}
    out["input"] = [*items, {"type": "message", "role": "user",
                             "content": [{"type": "input_text", "text": COMPACTION_PROMPT}]}]
    if out.get("tools"):
        out["tool_choice"] = "none"
    return out


_CALLS = frozenset({"function_call", "custom_tool_call"})
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})


def _transcribed(item: Any) -> Any:
    """A tool call or its output as plain text, for a summarising request that declares no
    tools (``/v1/responses/compact`` takes none): Anthropic refuses tool blocks in a request
    without tools, and the summary needs only what was called and what came back."""
    if not isinstance(item, dict):
        return item
    kind = item.get("type")
    if kind in _CALLS:
        arguments = item.get("arguments", item.get("input", ""))
        return {"type": "message", "role": "assistant",
                "content": f"[called the tool {item.get('name')} with {arguments}]"}
    if kind in _OUTPUTS:
        output = item.get("output")
        text = output if isinstance(output, str) else orjson.dumps(output).decode()
        return {"type": "message", "role": "user", "content": f"[the tool call {item.get('call_id')} returned: {text}]"}
    return item


# --- the item ---------------------------------------------------------------------------------


def wrap_summary(summary: str) -> str:
    """A summary as a compaction item's ``encrypted_content``."""
    return _WRAPPING + base64.urlsafe_b64encode(summary.encode()).decode("ascii")


def _compaction_item(summary: str, item_id: str) -> dict[str, Any]:
    return {"type": "compaction", "id": item_id, "encrypted_content": wrap_summary(summary)}


def _item_id() -> str:
    return "cmp_" + os.urandom(12).hex()


def summary_message(item: dict[str, Any], where: str) -> dict[str, Any]:
    """A ``compaction`` input item as the user message that gives the model its summary
    (chat format). An item the gateway did not make (OpenAI's encrypted content) is refused:
    no model but the one that made it can read it."""
    content = item.get("encrypted_content")
    if not isinstance(content, str) or not content.startswith(_WRAPPING):
        raise TranslationError("this compaction item was made by another provider's model and cannot be read by this "
                               "model; compact the conversation again through this model", f"{where}.encrypted_content")
    try:
        summary = base64.b64decode(content[len(_WRAPPING):].encode("ascii"), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeError, ValueError):
        raise TranslationError("the compaction item's encrypted_content is damaged", f"{where}.encrypted_content") \
            from None
    return {"role": "user", "content": f"{SUMMARY_HEADING}\n\n{summary}"}


def _output_text(output: Any) -> str:
    """The text of a response's ``message`` output items."""
    texts = []
    for item in output if isinstance(output, list) else ():
        if isinstance(item, dict) and item.get("type") == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    texts.append(part["text"])
    return "".join(texts)


# --- answers ----------------------------------------------------------------------------------


def compaction_response(doc: dict[str, Any]) -> dict[str, Any]:
    """A translated route's responses answer to a summarising request as the answer to a
    ``compaction_trigger`` request: its output, exactly one ``compaction`` item."""
    return {**doc, "output": [_compaction_item(_output_text(doc.get("output")), _item_id())]}


def compacted_response(doc: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The same, as ``POST /v1/responses/compact`` answers: a ``response.compaction`` object
    whose output is the request's user messages, then the ``compaction`` item."""
    items = request.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": items}]}]
    users = [item for item in items or () if isinstance(item, dict) and item.get("role") == "user"
             and item.get("type", "message") == "message"]
    return {"id": doc.get("id"), "object": "response.compaction", "created_at": doc.get("created_at"),
            "output": [*users, _compaction_item(_output_text(doc.get("output")), _item_id())],
            "usage": doc.get("usage")}


class CompactionStream:
    """A translated route's responses events for a summarising request -> the events of a
    ``compaction_trigger`` answer: ``response.created`` and ``response.in_progress`` as they
    come, the summary's own items and deltas held back, then at the end the one
    ``compaction`` item (``response.output_item.added``, ``response.output_item.done``) and
    the terminal event with it as the output. Errors and failures pass as they are.
    Sequence numbers are renumbered, so they still count up from 0."""

    _PASSED = frozenset({"response.created", "response.in_progress", "response.failed", "error"})
    _TERMINAL = frozenset({"response.completed", "response.incomplete"})

    def __init__(self) -> None:
        self.item_id = _item_id()
        self._sequence = 0

    def _numbered(self, event: dict[str, Any]) -> dict[str, Any]:
        if "sequence_number" in event:
            event = {**event, "sequence_number": self._sequence}
            self._sequence += 1
        return event

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        if kind in self._PASSED:
            return [self._numbered(event)]
        if kind not in self._TERMINAL:
            return []
        got = event.get("response")
        response: dict[str, Any] = got if isinstance(got, dict) else {}
        item = _compaction_item(_output_text(response.get("output")), self.item_id)
        added = {"type": "response.output_item.added", "output_index": 0, "sequence_number": 0,
                 "item": {"type": "compaction", "id": self.item_id, "encrypted_content": ""}}
        done = {"type": "response.output_item.done", "output_index": 0, "sequence_number": 0, "item": item}
        terminal = {**event, "response": {**response, "output": [item]}}
        return [self._numbered(added), self._numbered(done), self._numbered(terminal)]


class CompactionPipe(Pipe):
    """A translated route's responses pipe (:class:`~gatewayd.formats.translating_pipes.
    ToResponsesPipe`, or one wrapping it), its events rewritten by :class:`CompactionStream`.
    Usage, completeness and the text produced so far (what a broken stream is charged) are the
    inner pipe's: the summarising request is billed as the request it is."""

    def __init__(self, inner: Pipe) -> None:
        self.inner = inner
        self.stream = CompactionStream()
        self._splitter = SSESplitter()

    def _rewrite(self, raw: bytes) -> bytes:
        out = []
        for event in self._splitter.feed(raw):
            doc = event.json()
            for rewritten in self.stream.feed(doc if isinstance(doc, dict) else {}):
                out.append(encode(rewritten, event=rewritten.get("type")))
        return b"".join(out)

    def feed(self, events: list[SSEEvent]) -> bytes:
        return self._rewrite(self.inner.feed(events))

    def closing(self) -> bytes:
        return self._rewrite(self.inner.closing())

    def error_event(self, message: str, kind: str = "api_error") -> bytes:
        return self._rewrite(self.inner.error_event(message, kind))

    def produced_text(self) -> str:
        return self.inner.produced_text()

    usage = property(lambda self: self.inner.usage)
    complete = property(lambda self: self.inner.complete)
    failed = property(lambda self: self.inner.failed)
    error_message = property(lambda self: self.inner.error_message)
