"""Stream pipes that translate: messages upstream -> chat client, chat or messages upstream ->
responses client.

Sans-I/O like the pass-through pipes in :mod:`.pipes`: the clock reading (``created``) and
the response id a translated stream needs are handed in by the adapter that builds the
route, so these are plain data in, bytes out, and testable as such.
"""

from __future__ import annotations

from typing import Any, Iterator

import attrs

from gatewayd.formats import partial, usage as usage_mod
from gatewayd.formats.errors import provider_json
from gatewayd.formats.messages_to_chat import MessagesToChatStream
from gatewayd.formats.pipes import ChatClientPipe, Pipe
from gatewayd.formats.responses import ChatToResponsesStream
from gatewayd.formats.sse import SSEEvent, encode


class MessagesToChatPipe(ChatClientPipe):
    """Messages upstream -> chat client."""

    def __init__(self, model: str, include_usage: bool, *, created: int) -> None:
        self.translator = MessagesToChatStream(model=model, created=created, include_usage=include_usage)

    @property
    def usage(self) -> usage_mod.Usage | None:
        return self.translator.usage

    def feed(self, events: list[SSEEvent]) -> bytes:
        out = []
        for ev in events:
            if ev.event is None:
                continue
            for chunk in self.translator.feed(ev.event, provider_json(ev.data)):
                out.append(encode(chunk))
        self.complete = self.translator.finished
        self.failed = self.translator.failed
        return b"".join(out)

    def produced_text(self) -> str:
        return self.translator.output_text


def tell_cache_writes(chat: dict[str, Any], usage: usage_mod.Usage | None) -> dict[str, Any]:
    """Chat usage has no place for cache writes, but the Responses usage does
    (``input_tokens_details.cache_write_tokens``) and they are billed at their own rate:
    carry them across from the messages usage so a responses client sees what it paid for."""
    if usage is not None and usage.cache_write_tokens and isinstance(chat.get("usage"), dict):
        details = chat["usage"].get("prompt_tokens_details") or {}
        chat["usage"]["prompt_tokens_details"] = {**details, "cache_write_tokens": usage.cache_write_tokens}
    return chat


class ToResponsesPipe(Pipe):
    """Chat chunks (from a chat upstream, or translated from a messages upstream) -> responses events."""

    def __init__(self, request: dict[str, Any], *, messages_upstream: bool, model: str, response_id: str,
                 created: int) -> None:
        self.responses = ChatToResponsesStream(request=request, response_id=response_id, created_at=created)
        self.messages = (
            MessagesToChatStream(model=model, created=created, include_usage=True) if messages_upstream else None
        )
        self.chat_datas: list[bytes] = []
        self._chat_usage: usage_mod.Usage | None = None  # a chat upstream's final usage chunk
        self._chat_tier: str | None = None  # the first tier a chat upstream's chunks named

    @property
    def usage(self) -> usage_mod.Usage | None:
        """From a messages upstream, its own usage so far (chat usage drops cache writes, and
        its input is known from ``message_start``); from a chat upstream, the usage chunk's,
        with the tier its chunks named."""
        if self.messages is not None:
            return self.messages.usage
        usage = self._chat_usage
        if usage is not None and usage.service_tier is None and self._chat_tier is not None:
            usage = attrs.evolve(usage, service_tier=self._chat_tier)
        return usage

    def _chunks(self, events: list[SSEEvent]) -> Iterator[dict[str, Any]]:
        for ev in events:
            if self.messages is not None:
                if ev.event is None:
                    continue
                for chunk in self.messages.feed(ev.event, provider_json(ev.data)):
                    yield tell_cache_writes(chunk, self.messages.usage)
                if self.messages.finished:
                    self.complete = True
            elif ev.data == b"[DONE]":
                self.complete = True
            else:
                self.chat_datas.append(ev.data)
                yield provider_json(ev.data)

    def feed(self, events: list[SSEEvent]) -> bytes:
        out = []
        for chunk in self._chunks(events):
            if "error" in chunk:
                self.failed = True
                out.extend(self._encode(self.responses.fail(chunk["error"])))
                continue
            if self.messages is None and isinstance(chunk, dict):
                self._chat_tier = self._chat_tier or usage_mod.tier_of(chunk.get("service_tier"))
                if chunk.get("usage"):
                    self._chat_usage = usage_mod.from_chat_completion(chunk)
            out.extend(self._encode(self.responses.feed(chunk)))
        return b"".join(out)

    @staticmethod
    def _encode(events: list[dict[str, Any]]) -> list[bytes]:
        return [encode(e, event=e["type"]) for e in events]

    def closing(self) -> bytes:
        return b"".join(self._encode(self.responses.finish()))

    def error_event(self, message: str, kind: str = "api_error") -> bytes:
        return b"".join(self._encode(self.responses.fail({"message": message, "type": kind, "code": kind})))

    def produced_text(self) -> str:
        if self.messages is not None:
            return self.messages.output_text
        return partial.chat_stream_text(self.chat_datas)
