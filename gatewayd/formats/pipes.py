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

import attrs

from gatewayd.formats import partial, usage as usage_mod
from gatewayd.formats.errors import provider_json, provider_json_or_none
from gatewayd.formats.sse import DONE, SSEEvent, encode
from gatewayd.formats.stored_objects import answer_received_ids
from gatewayd.formats.usage import Usage

_CHAT_USAGE = re.compile(rb'"usage"\s*:\s*\{')
# a chunk's top-level ``service_tier``: found by a byte search, as usage is (a quoted key
# inside generated text is escaped, \"service_tier\", and does not match)
_CHAT_TIER = re.compile(rb'"service_tier"\s*:\s*"([A-Za-z0-9_.-]{1,64})"')


class Pipe:
    _usage: Usage | None = None  # set by pipes that copy it from a translator; others override ``usage``
    complete: bool = False  # the upstream's terminal event arrived (held back until settled)
    failed: bool = False  # the upstream sent an error event
    error_message: str | None = None
    received_ids: tuple[str, ...] = ()  # response / conversation ids the stream gave out (pass-through Responses)

    @property
    def usage(self) -> Usage | None:
        """What the upstream reported so far (None until it has)."""
        return self._usage

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
        self.service_tier: str | None = None  # from the first chunk that names it
        self._reported: Usage | None = None

    @property
    def usage(self) -> Usage | None:
        """The final chunk's usage (reasoning, audio, cached parts), with the tier the
        stream's chunks named when that chunk did not."""
        usage = self._reported
        if usage is not None and usage.service_tier is None and self.service_tier is not None:
            usage = attrs.evolve(usage, service_tier=self.service_tier)
        return usage

    def feed(self, events: list[SSEEvent]) -> bytes:
        out = []
        for ev in events:
            data = ev.data
            if data == b"[DONE]":
                self.complete = True
                continue
            if self.service_tier is None:
                tier = _CHAT_TIER.search(data)
                if tier is not None:
                    self.service_tier = tier.group(1).decode()
            if _CHAT_USAGE.search(data):
                chunk = provider_json(data)
                self._reported = usage_mod.from_chat_completion(chunk)
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
    ``message_start`` and ``message_delta`` read for usage, and the ``content_block_start``
    of a server tool (found by a byte search) counted; ``message_stop`` held back."""

    def __init__(self) -> None:
        self.datas: list[bytes] = []
        self._stop: bytes = b""
        self.tally = usage_mod.MessagesTally()

    @property
    def usage(self) -> Usage | None:
        return self.tally.usage(self.complete)

    def feed(self, events: list[SSEEvent]) -> bytes:
        out = []
        for ev in events:
            name = ev.event
            if name == "message_stop":
                self.complete = True
                self._stop = ev.raw
                continue
            if name == "message_start":
                self.tally.start(provider_json(ev.data))
            elif name == "message_delta":
                self.tally.delta(provider_json(ev.data))
            elif name == "content_block_start":
                if b'"server_tool_use"' in ev.data:
                    self.tally.block_start(provider_json(ev.data))
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
_RESPONSES_ITEM_DONE = b'"response.output_item.done"'
_RESPONSES_TOOL_ITEMS = tuple(f'"{kind}"'.encode() for kind in usage_mod.RESPONSES_TOOL_ITEMS)


class ResponsesPassthrough(Pipe):
    """Responses upstream -> responses client. Usage is inside the terminal event itself,
    which is parsed, held back until settled, then sent. The ``response.output_item.done``
    events of billed tools (found by a byte search) are parsed and counted as they pass,
    so a stream cut before its terminal event still pays for the searches it made."""

    def __init__(self) -> None:
        self.datas: list[bytes] = []
        self._terminal = b""
        self.sequence = 0
        self.tally = usage_mod.ResponsesTally()  # tool items seen in output_item.done events
        self._final: Usage | None = None  # the terminal event's response, when it had usage
        self._final_tools: tuple[tuple[str, int], ...] = ()

    @property
    def usage(self) -> Usage | None:
        """The terminal response's usage, tier and tool calls; per tool, at least the calls
        counted as they streamed. Tool calls alone (no tokens) when no usage came."""
        calls = usage_mod.max_tool_calls(self._final_tools, usage_mod.tool_calls(self.tally.as_dict()))
        if self._final is not None:
            return attrs.evolve(self._final, tool_calls=calls)
        return Usage(tool_calls=calls) if calls else None

    def _item_done(self, data: bytes) -> None:
        if any(kind in data for kind in _RESPONSES_TOOL_ITEMS):
            doc = provider_json(data)
            self.tally.add(doc.get("item") if isinstance(doc, dict) else None)

    def feed(self, events: list[SSEEvent]) -> bytes:
        out = []
        for ev in events:
            name = ev.event
            data = ev.data
            if name in ("response.completed", "response.incomplete", "response.failed") or (
                name is None and any(t in data[:80] for t in _RESPONSES_TERMINAL)
            ):
                doc = provider_json(data)
                doc = doc if isinstance(doc, dict) else {}
                response = got if isinstance(got := doc.get("response"), dict) else {}
                self._final = usage_mod.from_response(response)
                self._final_tools = usage_mod.response_tool_calls(response.get("output"))
                self.received_ids = answer_received_ids(response)
                self.complete = True
                if doc.get("type") == "response.failed":
                    self.failed = True
                self._terminal = ev.raw
                continue
            if name == "error":
                self.failed = True
                self.error_message = _error_message(data)
            elif name == "response.output_item.done" or (name is None and _RESPONSES_ITEM_DONE in data[:80]):
                self._item_done(data)
            elif name in partial.RESPONSES_TEXT_EVENTS:  # kept to count after a cut
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
    doc = provider_json_or_none(data)
    if doc is None:
        return "upstream stream error"
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict) and isinstance(message := err.get("message"), str):
        return message
    if isinstance(doc, dict) and isinstance(message := doc.get("message"), str):
        return message
    return "upstream stream error"
