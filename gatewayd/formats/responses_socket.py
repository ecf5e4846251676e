"""The Responses API's WebSocket mode, the protocol part: client events in, request bodies out.

Sans-I/O. Over a WebSocket to ``/v1/responses`` a client sends ``response.create`` events,
each the body of ``POST /v1/responses`` with a ``type`` and without ``stream`` (a socket
always streams), and gets the same event objects an SSE stream carries, one per text
message. The socket also keeps its last response in memory, so that the next
``response.create`` may name it in ``previous_response_id`` and send only the new input
items: Codex does exactly that for every request after the first on a socket (its tool
round trips included), and OpenAI serves it even with ``store: false``. gatewayd stores no
responses, so this module keeps that one response per socket (:class:`LastResponse`) and
turns such an event back into the whole body a provider needs: the earlier input, the
earlier output, then the new items.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson

from gatewayd.formats.errors import TranslationError, provider_json_or_none
from gatewayd.formats.raw_json import duplicate_key

__all__ = [
    "CREATE",
    "LastResponse",
    "socket_event",
    "create_body",
    "event_type",
    "is_warmup",
    "warmup_events",
    "finished_response",
    "remembered",
    "error_event",
]

CREATE = "response.create"
# the events that end a response and carry it whole (its ``output`` included)
FINISHED = frozenset({"response.completed", "response.incomplete"})
# every event that ends a response: after one, the socket takes the next ``response.create``
LAST = FINISHED | {"response.failed", "error"}


@attrs.frozen
class LastResponse:
    """The socket's last finished response: its id, and the input items it was made from
    followed by the output items it produced (the history a continuation extends)."""

    response_id: str
    items: tuple[Any, ...]


def socket_event(text: str | bytes) -> dict[str, Any]:
    """One client message as a JSON object with a string ``type``; the client's error otherwise."""
    try:
        event = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise TranslationError(f"the message is not valid JSON: {e}", None) from None
    if not isinstance(event, dict):
        raise TranslationError("each message must be a JSON object with a 'type'", None)
    twice = duplicate_key(text.encode() if isinstance(text, str) else text, event)
    if twice is not None:  # the body is re-encoded from the last one: refused, as over HTTP
        key, path = twice
        raise TranslationError(f"the message has the key {key!r} more than once in one object (at {path}); "
                               "send each field once", path)
    if not isinstance(event.get("type"), str):
        raise TranslationError("the message has no 'type'; send {\"type\": \"response.create\", ...}", "type")
    return event


def _as_items(value: Any) -> list[Any]:
    """A Responses ``input`` as a list of items (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def create_body(event: dict[str, Any], last: LastResponse | None) -> dict[str, Any]:
    """The ``POST /v1/responses`` body a ``response.create`` event stands for, streamed.

    A ``previous_response_id`` naming ``last`` is resolved here: the body gets the whole
    history and no ``previous_response_id`` (so a translated model, which has no stored
    responses at all, serves it like any other). Any other id is left for the endpoint's
    own rule (an id this account received may pass to a provider that stores responses).
    """
    body = {name: value for name, value in event.items() if name != "type"}
    stream = body.get("stream")
    if stream is not None and stream is not True:
        raise TranslationError("a response over a WebSocket is always streamed; leave 'stream' out", "stream")
    body["stream"] = True
    if body.get("generate") is True:
        del body["generate"]  # the default; a WebSocket-only field the HTTP API does not take
    previous = body.get("previous_response_id")
    if last is not None and isinstance(previous, str) and previous == last.response_id:
        new = body.get("input")
        if new is not None and not isinstance(new, (str, list)):
            raise TranslationError("field 'input' must be a string or an array of input items", "input")
        body["input"] = [*last.items, *_as_items(new)]
        del body["previous_response_id"]
    return body


def event_type(event_name: str | None, data: bytes) -> str | None:
    """An event's type when it ends a response, else None: by the SSE ``event:`` name when
    the stream has them, else by the ``type`` at the head of the data (no parse)."""
    if event_name is not None:
        return event_name if event_name in LAST else None
    for kind in LAST:
        if data.startswith(b'{"type":"%s"' % kind.encode()):
            return kind
    return None


def is_warmup(body: dict[str, Any]) -> bool:
    """``generate: false``: a request that asks the model nothing. Codex sends one first on a
    new socket to warm the provider's cache with its instructions and tools, then names it in
    ``previous_response_id``. gatewayd answers it itself, free (:func:`warmup_events`)."""
    return body.get("generate") is False


def warmup_events(body: dict[str, Any], response_id: str, created_at: int) -> list[bytes]:
    """A warm-up's answer: the response created and completed, with no output and no usage."""
    response: dict[str, Any] = {
        "id": response_id, "object": "response", "created_at": created_at, "status": "in_progress",
        "model": body.get("model"), "output": [], "usage": None, "error": None, "incomplete_details": None,
        "instructions": body.get("instructions"), "previous_response_id": None, "store": False,
    }
    done = {**response, "status": "completed", "usage": {
        "input_tokens": 0, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 0}}
    return [orjson.dumps({"type": "response.created", "sequence_number": 0, "response": response}),
            orjson.dumps({"type": "response.completed", "sequence_number": 1, "response": done})]


def finished_response(event_name: str | None, data: bytes) -> dict[str, Any] | None:
    """The ``response`` object of an event that ends a response, or None for any other event.

    Parses only the events :func:`event_type` finds to end a response."""
    if event_type(event_name, data) not in FINISHED:
        return None
    doc = provider_json_or_none(data)  # the provider's bytes when passed through
    if not isinstance(doc, dict) or doc.get("type") not in FINISHED:
        return None
    response = doc.get("response")
    return response if isinstance(response, dict) else None


def remembered(body: dict[str, Any], response: dict[str, Any]) -> LastResponse | None:
    """What the socket keeps of a finished response made from ``body``; None when it has no id."""
    response_id = response.get("id")
    if not isinstance(response_id, str) or not response_id:
        return None
    output = response.get("output")
    return LastResponse(response_id, (*_as_items(body.get("input")), *(output if isinstance(output, list) else ())))


def error_event(status: int, error_body: bytes) -> bytes:
    """An ``error`` event from an error answer in OpenAI's envelope (``{"error": {...}}``):
    the gateway's own (``gatewayd.errors.error_body`` wrote it) or a provider's.

    The shape OpenAI's socket uses and Codex reads: the HTTP status the same request would
    have got beside the error object, so a client maps it exactly as it maps an HTTP error."""
    doc = provider_json_or_none(error_body)  # a provider's error body may be anything
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict):  # a provider's error that is not OpenAI's envelope: its text
        error = {"type": "api_error" if status >= 500 else "invalid_request_error", "code": None,
                 "message": error_body.decode("utf-8", "replace")[:2000]}
    return orjson.dumps({"type": "error", "status": status, "error": error})
