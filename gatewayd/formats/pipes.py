"""Stream pipes: upstream SSE events in, the client's bytes out, usage noticed on the way.

Sans-I/O. One pipe per (upstream format -> client format) route. Pass-through pipes
forward each event's raw bytes untouched and parse only the few events that carry
usage or end the stream (found by a byte search, not by parsing every chunk).
Translating pipes parse every event, because translating needs it.

The relay drives a pipe the same way whatever the route:
``feed(events) -> bytes`` as upstream events arrive; once ``complete``, it settles the
bill, then sends ``closing()``; on a failure it sends ``error_event(message)``.
"""

from __future__ import annotations

import re

import orjson

from gatewayd.formats import partial, usage as usage_mod
from gatewayd.formats.sse import DONE, SSEEvent, encode
from gatewayd.formats.stored_objects import answer_received_ids
from gatewayd.formats.usage import Usage

_CHAT_USAGE = re.compile(rb'"usage"\s*:\s*\{')


class Pipe:
    usage: Usage | None = None
    complete: bool = False  # the upstream's terminal event arrived (held back until settled)
    failed: bool = False  # the upstream sent an error event
    error_message: str | None = None
    received_ids: tuple[str, ...] = ()  # response / conversation ids the stream gave out (pass-through Responses)

    def feed(self, events: list[SSEEvent]) -> bytes:
        raise NotImplementedError

    def closing(self) -> bytes:
        """The terminal bytes, sent after settlement."""
        raise NotImplementedError

    def error_event(self, message: str, kind: str = "api_error") -> bytes:
        raise NotImplementedError

    def produced_text(self) -> str:
        raise NotImplementedError


def chat_error_event(message: str, kind: str = "api_error", code: str | None = None) -> bytes:
    return encode({"error": {"message": message, "type": kind, "code": code}})


def messages_error_event(message: str, kind: str = "api_error") -> bytes:
    return encode({"type": "error", "error": {"type": kind, "message": message}}, event="error")


class ChatClientPipe(Pipe):
    """Any pipe whose client speaks the chat format: ends with ``[DONE]``, errors as a data chunk."""

    def closing(self) -> bytes:
        return DONE

    def error_event(self, message: str, kind: str = "api_error") -> bytes:
        return chat_error_event(message, kind)


class ChatPassthrough(ChatClientPipe):
    """Chat upstream -> chat client. The gateway always asks the upstream for usage; the
    usage-only chunk reaches the client only if the client asked for it."""

    def __init__(self, client_wants_usage: bool) -> None:
        self.client_wants_usage = client_wants_usage
        self.datas: list[bytes] = []

    def feed(self, events: list[SSEEvent]) -> bytes:
        out = []
        for ev in events:
            data = ev.data
            if data == b"[DONE]":
                self.complete = True
                continue
            if _CHAT_USAGE.search(data):
                chunk = orjson.loads(data)
                self.usage = usage_mod.from_chat(chunk.get("usage"))
                if not self.client_wants_usage and not chunk.get("choices"):
                    continue
            elif data.startswith(b'{"error"'):
                self.failed = True
                self.error_message = _error_message(data)
            self.datas.append(data)
            out.append(ev.raw)
        return b"".join(out)

    def produced_text(self) -> str:
        return partial.chat_stream_text(self.datas)


class MessagesPassthrough(Pipe):
    """Messages upstream -> messages client: every event (pings included) forwarded as is;
    ``message_start`` and ``message_delta`` read for usage; ``message_stop`` held back."""

    def __init__(self) -> None:
        self.datas: list[bytes] = []
        self._stop: bytes = b""

    def feed(self, events: list[SSEEvent]) -> bytes:
        out = []
        for ev in events:
            name = ev.event
            if name == "message_stop":
                self.complete = True
                self._stop = ev.raw
                continue
            if name == "message_start":
                message = orjson.loads(ev.data).get("message") or {}
                self.usage = usage_mod.from_messages(message.get("usage"))
            elif name == "message_delta":
                self.usage = usage_mod.merge_messages_stream(self.usage, orjson.loads(ev.data).get("usage"))
            elif name == "error":
                self.failed = True
                self.error_message = _error_message(ev.data)
            elif name == "content_block_delta":
                self.datas.append(ev.data)
            out.append(ev.raw)
        return b"".join(out)

    def closing(self) -> bytes:
        return self._stop

    def error_event(self, message: str, kind: str = "api_error") -> bytes:
        return messages_error_event(message, kind)

    def produced_text(self) -> str:
        return partial.messages_stream_text(self.datas)


_RESPONSES_TERMINAL = (b'"response.completed"', b'"response.incomplete"', b'"response.failed"')


class ResponsesPassthrough(Pipe):
    """Responses upstream -> responses client. Usage is inside the terminal event itself,
    which is parsed, held back until settled, then sent."""

    def __init__(self) -> None:
        self.datas: list[bytes] = []
        self._terminal = b""
        self.sequence = 0

    def feed(self, events: list[SSEEvent]) -> bytes:
        out = []
        for ev in events:
            name = ev.event
            data = ev.data
            if name in ("response.completed", "response.incomplete", "response.failed") or (
                name is None and any(t in data[:80] for t in _RESPONSES_TERMINAL)
            ):
                doc = orjson.loads(data)
                self.usage = usage_mod.from_responses((doc.get("response") or {}).get("usage"))
                self.received_ids = answer_received_ids(doc.get("response"))
                self.complete = True
                if doc.get("type") == "response.failed":
                    self.failed = True
                self._terminal = ev.raw
                continue
            if name == "error":
                self.failed = True
                self.error_message = _error_message(data)
            elif name in ("response.output_text.delta", "response.function_call_arguments.delta"):
                self.datas.append(data)
            self.sequence += 1
            out.append(ev.raw)
        return b"".join(out)

    def closing(self) -> bytes:
        return self._terminal

    def error_event(self, message: str, kind: str = "api_error") -> bytes:
        return encode(
            {"type": "error", "code": kind, "message": message, "param": None, "sequence_number": self.sequence},
            event="error",
        )

    def produced_text(self) -> str:
        return partial.responses_stream_text(self.datas)


def _error_message(data: bytes) -> str:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return "upstream stream error"
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return err["message"]
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return doc["message"]
    return "upstream stream error"
