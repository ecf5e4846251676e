"""The Gemini adapter: Google's Generative Language API as an upstream protocol
(``protocol = "gemini"``).

What a route needs, for the two client formats that reach Gemini models:

- chat clients: :func:`chat` (chat -> ``generateContent`` -> chat);
- responses clients: :func:`responses` (responses -> chat -> Gemini, and back
  through chat, as responses clients reach Claude through chat -> messages).

The upstream request is ``POST {base_url}/models/{upstream_id}:generateContent``, or
``:streamGenerateContent?alt=sse`` when streaming, with the key in ``x-goog-api-key``.
The translation is pure and lives in ``gatewayd.formats.chat_to_gemini`` and
``gatewayd.formats.gemini_to_chat``; this module wires it to the relay: the request,
the stream pipes (which get the clock and ids passed in), the error envelope, and the
one Gemini-only rule of the path: a blocked prompt arrives as a 200 and is answered as
the 400 it is, charging nothing.
"""

from __future__ import annotations

import math
import os
import time
from urllib.parse import quote

import attrs
import httpx
import orjson

from gatewayd import tokens
from gatewayd.billing.estimate import GEMINI_MEDIA, estimate_input_tokens
from gatewayd.billing.features import gemini_asks, gemini_cap, require_prices
from gatewayd.catalogue import ModelRoute
from gatewayd.errors import UpstreamError
from gatewayd.formats.chat_to_gemini import chat_request_to_gemini
from gatewayd.formats.errors import answer_object, provider_json
from gatewayd.formats.gemini_to_chat import (
    GeminiToChatStream,
    PromptBlocked,
    blocked_prompt_error,
    gemini_error_to_chat,
    gemini_response_to_chat,
    retry_delay_s,
)
from gatewayd.formats.pipes import ChatClientPipe, Pipe
from gatewayd.formats.responses import ChatToResponsesStream, chat_response_to_responses, responses_request_to_chat
from gatewayd.formats.sse import SSEEvent, encode
from gatewayd.formats.usage import GeminiTally, Usage
from gatewayd.formats.responses_output import envelope
from gatewayd.providers.gemini_client import passthrough_to
from gatewayd.providers.base import Call, Route, dropped_tools_headers, encode_body, header_retry_after, translate

__all__ = [
    "ROUTES",
    "GeminiToChatPipe",
    "GeminiToResponsesPipe",
    "chat",
    "gemini_error",
    "request",
    "responses",
]


def request(upstream, target: ModelRoute, body: bytes, *, stream: bool) -> httpx.Request:
    """``{base_url}/models/{upstream_id}:generateContent`` (``:streamGenerateContent?alt=sse``
    when streaming), the key in ``x-goog-api-key``."""
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    headers = {"content-type": "application/json", "accept": "text/event-stream" if stream else "application/json"}
    if target.provider.api_key:
        headers["x-goog-api-key"] = target.provider.api_key
    url = f"{target.provider.base_url}/models/{quote(target.upstream_id, safe='-._~')}:{method}"
    return upstream.post(url, body, headers, stream=stream)


def retry_after(error: UpstreamError) -> float | None:
    """Google's retry hint is in the error body (``google.rpc.RetryInfo``), not in a header;
    a ``Retry-After`` (from a proxy in front of it) is read when the body has none."""
    delay = retry_delay_s(error.body)
    return delay if delay is not None else header_retry_after(error)


def gemini_error(error: UpstreamError) -> tuple[int, bytes, dict[str, str]]:
    """A Gemini error (or a blocked prompt) in the chat envelope; status and message kept,
    and the retry hint told as ``Retry-After`` (whole seconds, rounded up), the header chat
    clients and their SDKs read."""
    headers = {k: error.headers[k] for k in ("retry-after",) if k in error.headers}
    delay = retry_delay_s(error.body)
    if delay is not None:
        headers["retry-after"] = str(math.ceil(delay))
    return error.status, orjson.dumps(gemini_error_to_chat(error.status, error.body)), headers


def _blocked(blocked: PromptBlocked) -> UpstreamError:
    return UpstreamError(400, orjson.dumps(blocked_prompt_error(blocked)), {})


def _ids() -> tuple[str, int]:
    return "chatcmpl-" + os.urandom(12).hex(), int(time.time())


def _chunks(translator: GeminiToChatStream, events: list[SSEEvent], started: bool):
    """Chat chunks for a batch of Gemini events. A blocked prompt in the first event
    becomes the provider's refusal (the relay answers it before any byte); after bytes
    went out it can only be told as a stream error."""
    for ev in events:
        try:
            yield from translator.feed(provider_json(ev.data))
        except PromptBlocked as blocked:
            if not started:
                raise _blocked(blocked) from None
            translator.failed = True
            yield {"error": {"message": blocked.message, "type": "invalid_request_error", "param": None,
                             "code": "content_filter"}}


class GeminiToChatPipe(ChatClientPipe):
    """Gemini SSE -> chat chunks (``[DONE]`` after settlement, like every chat pipe)."""

    def __init__(self, *, model: str, include_usage: bool, chunk_id: str, created: int) -> None:
        self.translator = GeminiToChatStream(model=model, created=created, include_usage=include_usage,
                                             chunk_id=chunk_id)
        self._sent = False

    def feed(self, events: list[SSEEvent]) -> bytes:
        out = b"".join(encode(chunk) for chunk in _chunks(self.translator, events, self._sent))
        self._sent = self._sent or bool(out)
        self._usage = self.translator.usage
        self.complete = self.translator.finished
        self.failed = self.translator.failed
        return out

    def produced_text(self) -> str:
        return self.translator.output_text


class GeminiToResponsesPipe(Pipe):
    """Gemini SSE -> chat chunks -> responses events."""

    def __init__(self, request: dict, *, model: str, response_id: str, chunk_id: str, created: int) -> None:
        self.chat = GeminiToChatStream(model=model, created=created, include_usage=True, chunk_id=chunk_id)
        self.responses = ChatToResponsesStream(request=request, response_id=response_id, created_at=created)
        self._sent = False

    @staticmethod
    def _encode(events: list[dict]) -> bytes:
        return b"".join(encode(e, event=e["type"]) for e in events)

    def feed(self, events: list[SSEEvent]) -> bytes:
        out = []
        for chunk in _chunks(self.chat, events, self._sent):
            if "error" in chunk:
                self.failed = True
                out.append(self._encode(self.responses.fail(chunk["error"])))
                continue
            out.append(self._encode(self.responses.feed(chunk)))
        self._usage = self.chat.usage
        self.complete = self.chat.finished
        joined = b"".join(out)
        self._sent = self._sent or bool(joined)
        return joined

    def closing(self) -> bytes:
        return self._encode(self.responses.finish())

    def error_event(self, message: str, kind: str = "api_error") -> bytes:
        return self._encode(self.responses.fail({"message": message, "type": kind, "code": kind}))

    def produced_text(self) -> str:
        return self.chat.output_text


def _message_text(chat_doc: dict) -> str:
    """What a reply without usage produced: text, thoughts and tool calls, to count."""
    message = chat_doc["choices"][0]["message"]
    calls = message.get("tool_calls") or ()
    return "".join([message.get("content") or "", message.get("reasoning_content") or "",
                    *(c["function"]["name"] + c["function"]["arguments"] for c in calls)])


def _route(call: Call, target: ModelRoute, upstream, chat_body: dict, make_pipe, client_body,
           headers: dict[str, str] | None = None) -> Route:
    """The route for a chat body (the client's, or translated from responses):
    ``client_body(chat completion, created) -> bytes`` gives the client's non-stream answer."""
    model = call.model
    upstream_body = gemini_cap(translate(chat_request_to_gemini, chat_body, upstream_model=target.upstream_id), model)
    asks = gemini_asks(upstream_body, model)
    require_prices(model, asks)
    # the chat body: it names its images and files for the allowance
    estimate = estimate_input_tokens(chat_body, "chat", GEMINI_MEDIA)
    completion_id, created = _ids()

    def finish(raw: bytes):
        doc = answer_object(raw)
        try:
            chat_doc = gemini_response_to_chat(doc, model=model.id, created=created, completion_id=completion_id)
        except PromptBlocked as blocked:
            raise _blocked(blocked) from None
        tally = GeminiTally()
        tally.feed(doc)
        usage = tally.usage
        if tally.reported is None:  # never free output: count what it produced
            usage = attrs.evolve(usage or Usage(), input_tokens=estimate,
                                 output_tokens=tokens.count(_message_text(chat_doc), model.family))
        return client_body(chat_doc, created), usage

    return Route(
        request=request(upstream, target, encode_body(upstream_body), stream=call.stream),
        stream=call.stream,
        input_tokens_estimate=estimate,
        # the cap is always sent (gemini_cap): thinking counts inside it
        output_tokens=asks.output_tokens,
        asks=asks,
        make_pipe=lambda: make_pipe(completion_id, created),
        finish=finish,
        upstream_error=gemini_error,
        headers=headers or {},
        retry_after=retry_after,
    )


def chat(call: Call, target: ModelRoute, upstream) -> Route:
    """A chat-format client of a Gemini model: translated both ways."""
    wants_usage = call.stream and (call.body.get("stream_options") or {}).get("include_usage") is True
    model_id = call.model.id
    return _route(
        call, target, upstream, call.body,
        lambda chunk_id, created: GeminiToChatPipe(model=model_id, include_usage=wants_usage, chunk_id=chunk_id,
                                                   created=created),
        lambda chat_doc, created: orjson.dumps(chat_doc),
    )


def responses(call: Call, target: ModelRoute, upstream) -> Route:
    """A responses-format client of a Gemini model: responses -> chat -> Gemini, and back."""
    body, model_id = call.body, call.model.id
    chat_body = translate(responses_request_to_chat, body)
    response_id = "resp_" + os.urandom(12).hex()
    encode_body(envelope(body, response_id=response_id, created_at=0, status=""))  # echoed later: encodable now

    def client_body(chat_doc: dict, created: int) -> bytes:
        return orjson.dumps(chat_response_to_responses(chat_doc, request=body, response_id=response_id,
                                                       created_at=created))

    return _route(
        call, target, upstream, chat_body,
        lambda chunk_id, created: GeminiToResponsesPipe(body, model=model_id, response_id=response_id,
                                                        chunk_id=chunk_id, created=created),
        client_body,
        dropped_tools_headers(body),
    )


passthrough = passthrough_to(request, gemini_error, retry_after)  # a Gemini-API client: its bytes pass through

ROUTES = {"chat": chat, "responses": responses, "gemini": passthrough}
