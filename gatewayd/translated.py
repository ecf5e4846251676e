"""Routes that translate: chat clients on messages upstreams, responses clients on chat
or messages upstreams. The translation itself is in ``formats``; this module only wires
it to the relay (upstream request, pipes, error envelopes).
"""

from __future__ import annotations

import os
import time

import orjson

from gatewayd.billing.estimate import estimate_input_tokens
from gatewayd.config import Model
from gatewayd.endpoints import produced_usage
from gatewayd.errors import UpstreamError
from gatewayd.formats import partial, usage as usage_mod
from gatewayd.formats.chat_to_messages import chat_request_to_messages
from gatewayd.formats.errors import TranslationError
from gatewayd.formats.messages_to_chat import MessagesToChatStream, messages_response_to_chat
from gatewayd.formats.pipes import ChatClientPipe, Pipe
from gatewayd.formats.responses import ChatToResponsesStream, chat_response_to_responses, responses_request_to_chat
from gatewayd.formats.sse import SSEEvent, encode
from gatewayd.relay import BodyError, Ctx, Relay, Route

# Without a client cap, a translated request asks for at most this many tokens (and the
# hold covers this many): Anthropic requires max_tokens, and holding a model's whole
# 64k allowance would refuse most small balances. Documented in docs/translation.md.
DEFAULT_TRANSLATED_MAX_TOKENS = 8192


def converted_error(error: UpstreamError) -> tuple[int, bytes, dict[str, str]]:
    """A messages-format provider error, told in the chat (OpenAI) envelope; status kept."""
    headers = {k: error.headers[k] for k in ("retry-after",) if k in error.headers}
    body = orjson.dumps({"error": {"message": error.message(), "type": error.error_type() or "upstream_error",
                                   "param": None, "code": None}})
    return error.status, body, headers


def _translate(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except TranslationError as e:
        raise BodyError(e.message, param=e.param) from None


class MessagesToChatPipe(ChatClientPipe):
    def __init__(self, model: str, include_usage: bool) -> None:
        self.translator = MessagesToChatStream(model=model, created=int(time.time()), include_usage=include_usage)

    def feed(self, events: list[SSEEvent]) -> bytes:
        out = []
        for ev in events:
            if ev.event is None:
                continue
            for chunk in self.translator.feed(ev.event, orjson.loads(ev.data)):
                out.append(encode(chunk))
        self.usage = self.translator.usage
        self.complete = self.translator.finished
        self.failed = self.translator.failed
        return b"".join(out)

    def produced_text(self) -> str:
        return self.translator.output_text


def _tell_cache_writes(chat: dict, usage: usage_mod.Usage | None) -> dict:
    """Chat usage has no place for cache writes, but the Responses usage does
    (``input_tokens_details.cache_write_tokens``) and they are billed at their own rate:
    carry them across from the messages usage so a responses client sees what it paid for."""
    if usage is not None and usage.cache_write_tokens and isinstance(chat.get("usage"), dict):
        details = chat["usage"].get("prompt_tokens_details") or {}
        chat["usage"]["prompt_tokens_details"] = {**details, "cache_write_tokens": usage.cache_write_tokens}
    return chat


class ToResponsesPipe(Pipe):
    """Chat chunks (from a chat upstream, or translated from a messages upstream) -> responses events."""

    def __init__(self, request: dict, *, messages_upstream: bool, model: str) -> None:
        self.responses = ChatToResponsesStream(
            request=request, response_id="resp_" + os.urandom(12).hex(), created_at=int(time.time())
        )
        self.messages = (
            MessagesToChatStream(model=model, created=int(time.time()), include_usage=True)
            if messages_upstream else None
        )
        self.chat_datas: list[bytes] = []

    def _chunks(self, events: list[SSEEvent]):
        for ev in events:
            if self.messages is not None:
                if ev.event is None:
                    continue
                for chunk in self.messages.feed(ev.event, orjson.loads(ev.data)):
                    yield _tell_cache_writes(chunk, self.messages.usage)
                if self.messages.finished:
                    self.complete = True
            elif ev.data == b"[DONE]":
                self.complete = True
            else:
                self.chat_datas.append(ev.data)
                yield orjson.loads(ev.data)

    def feed(self, events: list[SSEEvent]) -> bytes:
        out = []
        for chunk in self._chunks(events):
            if "error" in chunk:
                self.failed = True
                out.extend(self._encode(self.responses.fail(chunk["error"])))
                continue
            if chunk.get("usage"):
                # from a messages upstream, bill from its own usage: chat usage drops cache writes
                from_messages = self.messages is not None
                self.usage = self.messages.usage if from_messages else usage_mod.from_chat(chunk["usage"])
            out.extend(self._encode(self.responses.feed(chunk)))
        return b"".join(out)

    @staticmethod
    def _encode(events: list[dict]) -> list[bytes]:
        return [encode(e, event=e["type"]) for e in events]

    def closing(self) -> bytes:
        return b"".join(self._encode(self.responses.finish()))

    def error_event(self, message: str, kind: str = "api_error") -> bytes:
        return b"".join(self._encode(self.responses.fail({"message": message, "type": kind, "code": kind})))

    def produced_text(self) -> str:
        if self.messages is not None:
            return self.messages.output_text
        return partial.chat_stream_text(self.chat_datas)


def chat_via_messages(relay: Relay, ctx: Ctx, body: dict, model: Model, stream: bool) -> tuple[Route, int]:
    """A chat-format client calling a dual-format model: translate both ways."""
    default_max = min(model.max_output_tokens, DEFAULT_TRANSLATED_MAX_TOKENS)
    upstream_body = _translate(chat_request_to_messages, body, upstream_model=model.upstream_id,
                               default_max_tokens=default_max)
    wants_usage = stream and (body.get("stream_options") or {}).get("include_usage") is True

    estimate = estimate_input_tokens(upstream_body)

    def finish(raw: bytes):
        message = orjson.loads(raw)
        chat = messages_response_to_chat(message, model=model.id, created=int(time.time()))
        return orjson.dumps(chat), usage_mod.from_messages(message.get("usage")) or produced_usage(message, estimate)

    route = Route(
        request=relay.upstream.anthropic_request(model.provider, "/v1/messages", orjson.dumps(upstream_body),
                                                 stream=stream, version=None, betas=[]),
        stream=stream,
        input_tokens_estimate=estimate,
        make_pipe=lambda: MessagesToChatPipe(model.id, wants_usage),
        finish=finish,
        upstream_error=converted_error,
    )
    return route, upstream_body["max_tokens"]


def responses_via_chat(relay: Relay, ctx: Ctx, body: dict, model: Model, stream: bool) -> tuple[Route, int]:
    """A responses-format client calling a model whose upstream has no /v1/responses."""
    chat_body = _translate(responses_request_to_chat, body)
    created = int(time.time())

    if model.dual_format:
        default_max = min(model.max_output_tokens, DEFAULT_TRANSLATED_MAX_TOKENS)
        upstream_body = _translate(chat_request_to_messages, chat_body, upstream_model=model.upstream_id,
                                   default_max_tokens=default_max)
        request = relay.upstream.anthropic_request(model.provider, "/v1/messages", orjson.dumps(upstream_body),
                                                   stream=stream, version=None, betas=[])
        output_tokens = upstream_body["max_tokens"]

        def finish(raw: bytes):
            message = orjson.loads(raw)
            usage = usage_mod.from_messages(message.get("usage"))
            chat = _tell_cache_writes(messages_response_to_chat(message, model=model.id, created=created), usage)
            doc = chat_response_to_responses(chat, request=body, response_id="resp_" + os.urandom(12).hex(),
                                             created_at=created)
            return orjson.dumps(doc), usage

        estimate = estimate_input_tokens(upstream_body)
    else:
        upstream_body = {**chat_body, "model": model.upstream_id}
        request = relay.upstream.openai_request(model.provider, "/chat/completions", orjson.dumps(upstream_body),
                                                stream=stream)
        output_tokens = upstream_body.get("max_completion_tokens") or model.max_output_tokens

        def finish(raw: bytes):
            chat = orjson.loads(raw)
            doc = chat_response_to_responses(chat, request=body, response_id="resp_" + os.urandom(12).hex(),
                                             created_at=created)
            return orjson.dumps(doc), usage_mod.from_chat(chat.get("usage"))

        estimate = estimate_input_tokens(chat_body)

    route = Route(
        request=request,
        stream=stream,
        input_tokens_estimate=estimate,
        make_pipe=lambda: ToResponsesPipe(body, messages_upstream=model.dual_format, model=model.id),
        finish=finish,
        upstream_error=converted_error,
    )
    return route, output_tokens


__all__ = ["chat_via_messages", "responses_via_chat"]
