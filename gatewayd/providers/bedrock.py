"""AWS Bedrock (``protocol = "bedrock"``): Claude through InvokeModel, other models through Converse.

Which API a route uses is decided by its ``upstream_id``: an id that contains
``anthropic.`` (``anthropic.claude-...``, or a cross-region inference profile such as
``us.anthropic.claude-sonnet-4-5-20250929-v1:0`` / ``global.anthropic...``) goes through
``InvokeModel`` / ``InvokeModelWithResponseStream`` with the Anthropic messages body
(``POST /model/{id}/invoke``, ``/invoke-with-response-stream``); any other id (Llama,
Mistral, Amazon Nova ...) through ``Converse`` / ``ConverseStream`` (``/model/{id}/converse``,
``/converse-stream``). The id is percent-encoded in the path (``:`` -> ``%3A``).

Claude models are dual-format: a messages client's body passes through with the few edits
Bedrock needs, made in the bytes (``model`` and ``stream`` removed, ``anthropic_version:
"bedrock-2023-05-31"`` and the client's betas as ``anthropic_beta`` added), and the stream's
Anthropic events reach the client as they came, only unwrapped from the event-stream frames
(:mod:`gatewayd.formats.eventstream`). Chat and responses clients translate as on the
Anthropic route. Converse models serve all three formats through the messages translation
(:mod:`gatewayd.formats.converse`). Gemini-API clients reach both through the chat route
(:func:`gatewayd.providers.gemini_client.via_chat`).

Requests are signed with SigV4, or carry a Bedrock API key (:mod:`gatewayd.cloud.bedrock_auth`,
which also reads the provider's settings when the config is loaded).
Bedrock's errors (``{"message": ...}`` with the exception's name in ``x-amzn-ErrorType``)
keep their status and message, in the client's error shape; a 401/403 is the gateway's
credentials being refused, which is not the client's to fix: a 502.
"""

from __future__ import annotations

import os
import re
import time
from typing import TYPE_CHECKING
from urllib.parse import quote

import httpx
import orjson

from gatewayd.billing.estimate import ANTHROPIC_MEDIA, estimate_input_tokens
from gatewayd.billing.features import messages_asks, messages_changes, require_prices
from gatewayd.catalogue import ModelRoute
from gatewayd.errors import MESSAGES_TYPE_BY_STATUS, UpstreamError
from gatewayd.formats import pipes
from gatewayd.formats.converse import (
    ConverseToMessagesStream, converse_response_to_message, encode_event, messages_request_to_converse,
)
from gatewayd.formats.errors import answer_object
from gatewayd.formats.eventstream import EventStreamSplitter, StreamRefused, error_type_of
from gatewayd.formats.messages_to_chat import messages_response_to_chat
from gatewayd.formats.responses import chat_response_to_responses, responses_request_to_chat
from gatewayd.formats.responses_output import envelope
from gatewayd.formats.sse import SSEEvent
from gatewayd.formats.translating_pipes import MessagesToChatPipe, ToResponsesPipe, tell_cache_writes
from gatewayd.formats.usage import from_message
# the chat -> messages step and the answer's usage are the Anthropic route's own rules
from gatewayd.providers.anthropic import _to_messages, answer_usage, produced_usage
from gatewayd.protocols import bedrock_invokes
from gatewayd.providers.base import Call, Route, dropped_tools_headers, encode_body, translate, with_changes
from gatewayd.providers.gemini_client import via_chat
from gatewayd.providers.upstream import AUTHORIZE_EXTENSION

if TYPE_CHECKING:  # the credentials' module (and its cloud library) loads only when such a provider is configured
    from gatewayd.cloud.bedrock_auth import AwsAuth

__all__ = ["ROUTES", "uses_invoke"]

BEDROCK_ANTHROPIC_VERSION = "bedrock-2023-05-31"
# which API a route takes: InvokeModel for Anthropic's models, Converse for the rest (the rule
# lives with the protocol's description: it also says which models get Claude's rates)
uses_invoke = bedrock_invokes


def _request(upstream, target: ModelRoute, body: bytes, action: str, *, stream: bool) -> httpx.Request:
    """The request, signed just before it is sent (``AUTHORIZE_EXTENSION``: the send awaits
    it, so a large body's hash is computed in a worker thread, not on the loop)."""
    url = f"{target.provider.base_url}/model/{quote(target.upstream_id, safe='')}/{action}"
    headers = {"content-type": "application/json",
               "accept": "application/vnd.amazon.eventstream" if stream else "application/json"}
    auth: AwsAuth = target.provider.settings["auth"]
    request: httpx.Request = upstream.post(url, body, headers, stream=stream)

    async def authorize(request: httpx.Request) -> None:
        request.headers.update(await auth.signed_headers(url, body, headers))

    request.extensions[AUTHORIZE_EXTENSION] = authorize
    return request


# -- errors ------------------------------------------------------------------------------


def _bedrock_error(error: UpstreamError) -> tuple[int, str, str, dict[str, str]]:
    """(status, message, Anthropic error type, headers) of a Bedrock error."""
    try:
        doc = orjson.loads(error.body)
    except orjson.JSONDecodeError:
        doc = None
    message = None
    if isinstance(doc, dict):
        message = next((doc[k] for k in ("message", "Message") if isinstance(doc.get(k), str)), None)
    name = error.headers.get("x-amzn-errortype", "").split(":", 1)[0]
    message = message or error.message()
    status = error.status
    headers = {k: error.headers[k] for k in ("retry-after",) if k in error.headers}
    if status in (401, 403):
        return 502, f"Bedrock refused the gateway's credentials ({name or status}): {message}", "api_error", headers
    kind = error_type_of(name)[1] if name else MESSAGES_TYPE_BY_STATUS.get(status, "api_error")
    return status, message, kind, headers


def messages_error(error: UpstreamError) -> tuple[int, bytes, dict[str, str]]:
    """A Bedrock error told to a messages client, in the messages shape."""
    status, message, kind, headers = _bedrock_error(error)
    return status, orjson.dumps({"type": "error", "error": {"type": kind, "message": message}}), headers


def chat_error(error: UpstreamError) -> tuple[int, bytes, dict[str, str]]:
    """A Bedrock error told to a chat or responses client, in the chat envelope."""
    status, message, kind, headers = _bedrock_error(error)
    kind = "invalid_request_error" if status < 500 and status != 429 else kind
    return status, orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": None}}), headers


# -- the messages body both APIs start from ------------------------------------------------


def _invoke_body(body: dict) -> bytes:
    """A translated messages body as InvokeModel takes it."""
    out = {k: v for k, v in body.items() if k not in ("model", "stream")}
    return encode_body({"anthropic_version": BEDROCK_ANTHROPIC_VERSION, **out})


_MODEL = re.compile(rb'"model"\s*:\s*"[^"\\]*"\s*')
_STREAM = re.compile(rb'"stream"\s*:\s*(?:true|false)\s*')


def _without(raw: bytes, pattern: re.Pattern) -> bytes | None:
    """``raw`` without the one top-level field ``pattern`` matches (and its comma), or None
    when the bytes do not allow it safely (the key spelled twice, an escape anywhere)."""
    found = list(pattern.finditer(raw))
    if len(found) != 1 or b"\\u" in raw:
        return None
    start, end = found[0].span()
    if raw[end:end + 1] == b",":
        return raw[:start] + raw[end + 1:]
    before = raw[:start].rstrip()
    if before.endswith(b","):
        return before[:-1] + raw[end:]
    return None


def passthrough_body(raw: bytes, body: dict, changes: dict, betas: list[str]) -> bytes:
    """The client's messages bytes as InvokeModel takes them, edited in the bytes when the
    bytes allow it: ``model`` and ``stream`` out, ``anthropic_version`` (and
    ``anthropic_beta``) in, the gateway's bounds (:func:`messages_changes`) applied."""
    edited: bytes | None = with_changes(raw, body, changes)
    for key, pattern in (("model", _MODEL), ("stream", _STREAM)):
        if edited is not None and key in body:
            edited = _without(edited, pattern)
    head: dict[str, str | list[str]] = {"anthropic_version": BEDROCK_ANTHROPIC_VERSION}
    if betas:
        head["anthropic_beta"] = betas
    if edited is None or not edited.lstrip().startswith(b"{"):
        out = {k: v for k, v in {**body, **changes}.items() if k not in ("model", "stream")}
        return encode_body({**head, **out})
    inner = edited.lstrip()[1:].lstrip()
    prefix = orjson.dumps(head)[:-1]
    return prefix + (b"}" if inner.startswith(b"}") else b"," + inner)


def _client_betas(headers) -> list[str]:
    if headers is None:
        return []
    return [b.strip() for value in headers.getlist("anthropic-beta") for b in value.split(",") if b.strip()]


# -- the Converse stream through the messages pipes ---------------------------------------


class ConversePipe(pipes.Pipe):
    """ConverseStream events -> Anthropic events -> the pipe the client's format takes (the
    messages pass-through, or the chat / responses translators), which does the rest."""

    def __init__(self, inner: pipes.Pipe, *, model: str, message_id: str) -> None:
        self.inner = inner
        self.translator = ConverseToMessagesStream(model=model, message_id=message_id)

    def feed(self, events: list[SSEEvent]) -> bytes:
        converted = []
        for ev in events:
            for name, data in self.translator.feed(ev.event, ev.json()):
                raw = encode_event(name, data)
                converted.append(SSEEvent(raw=raw, event=name, data=raw[len(name) + 14:-2]))
        return self.inner.feed(converted)

    usage = property(lambda self: self.inner.usage)
    complete = property(lambda self: self.inner.complete)
    failed = property(lambda self: self.inner.failed)
    error_message = property(lambda self: self.inner.error_message)

    def closing(self) -> bytes:
        return self.inner.closing()

    def error_event(self, message: str, kind: str = "api_error") -> bytes:
        return self.inner.error_event(message, kind)

    def produced_text(self) -> str:
        return self.inner.produced_text()


# -- routes ------------------------------------------------------------------------------


class _Kind:
    """What differs between the two APIs: the path, the body and the answer's reading."""

    def __init__(self, target: ModelRoute) -> None:
        self.invoke = uses_invoke(target.upstream_id)
        self.target = target
        self.message_id = "msg_bdrk_" + os.urandom(12).hex()

    def action(self, stream: bool) -> str:
        if self.invoke:
            return "invoke-with-response-stream" if stream else "invoke"
        return "converse-stream" if stream else "converse"

    def body(self, messages_body: dict) -> bytes:
        if self.invoke:
            return _invoke_body(messages_body)
        return encode_body(translate(messages_request_to_converse, messages_body))

    def message(self, raw: bytes, model_id: str) -> dict:
        """The upstream answer as an Anthropic message."""
        doc = answer_object(raw)
        if self.invoke:
            return doc
        return converse_response_to_message(doc, model=model_id, message_id=self.message_id)

    def pipe(self, inner: pipes.Pipe, model_id: str) -> pipes.Pipe:
        return inner if self.invoke else ConversePipe(inner, model=model_id, message_id=self.message_id)

    def splitter(self):
        invoke = self.invoke
        return lambda: RefusingSplitter(invoke=invoke)


class RefusingSplitter(EventStreamSplitter):
    """The event-stream splitter whose refusal (an exception frame before any event) is the
    provider's error status, as if Bedrock had answered it over HTTP: nothing is charged."""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        try:
            return super().feed(chunk)
        except StreamRefused as refused:
            raise UpstreamError(refused.status, refused.body, refused.headers) from None


def messages(call: Call, target: ModelRoute, upstream) -> Route:
    """A messages client of Claude on Bedrock: the body passes through (edited in the bytes).
    Only InvokeModel routes serve messages clients (``protocols._bedrock_formats``): a Converse
    model is not dual-format, and the router never plans its route for /v1/messages."""
    body, model = call.body, call.model
    kind = _Kind(target)
    assert kind.invoke, "a Converse route was planned for a messages client"
    bounds = messages_changes(body, model)
    asks = messages_asks({**body, **bounds} if bounds else body, model)
    require_prices(model, asks)
    estimate = estimate_input_tokens(body, "messages", ANTHROPIC_MEDIA)
    upstream_body = passthrough_body(call.raw, body, bounds, _client_betas(call.headers))

    def finish(raw: bytes):
        return raw, answer_usage(kind.message(raw, model.id), estimate, model.family)

    return Route(
        request=_request(upstream, target, upstream_body, kind.action(call.stream), stream=call.stream),
        stream=call.stream,
        input_tokens_estimate=estimate,
        output_tokens=asks.output_tokens,
        make_pipe=lambda: kind.pipe(pipes.MessagesPassthrough(), model.id),
        make_splitter=kind.splitter(),
        finish=finish,
        upstream_error=messages_error,
        asks=asks,
    )


def chat(call: Call, target: ModelRoute, upstream) -> Route:
    """A chat client: chat -> messages (-> Converse) and back."""
    body, model = call.body, call.model
    kind = _Kind(target)
    messages_body = _to_messages(body, model, target)
    wants_usage = call.stream and (body.get("stream_options") or {}).get("include_usage") is True
    estimate = estimate_input_tokens(messages_body, "messages", ANTHROPIC_MEDIA)
    asks = messages_asks(messages_body, model)
    created = int(time.time())

    def finish(raw: bytes):
        message = kind.message(raw, model.id)
        chat_doc = messages_response_to_chat(message, model=model.id, created=created)
        return orjson.dumps(chat_doc), answer_usage(message, estimate, model.family)

    return Route(
        request=_request(upstream, target, kind.body(messages_body), kind.action(call.stream), stream=call.stream),
        stream=call.stream,
        input_tokens_estimate=estimate,
        output_tokens=asks.output_tokens,
        asks=asks,
        make_pipe=lambda: kind.pipe(MessagesToChatPipe(model.id, wants_usage, created=created), model.id),
        make_splitter=kind.splitter(),
        finish=finish,
        upstream_error=chat_error,
    )


def responses(call: Call, target: ModelRoute, upstream) -> Route:
    """A responses client: responses -> chat -> messages (-> Converse) and back."""
    body, model = call.body, call.model
    kind = _Kind(target)
    messages_body = _to_messages(translate(responses_request_to_chat, body), model, target, chat_client=False)
    created = int(time.time())
    response_id = "resp_" + os.urandom(12).hex()
    encode_body(envelope(body, response_id=response_id, created_at=created, status=""))  # echoed later
    estimate = estimate_input_tokens(messages_body, "messages", ANTHROPIC_MEDIA)
    asks = messages_asks(messages_body, model)

    def finish(raw: bytes):
        message = kind.message(raw, model.id)
        usage = from_message(message) or produced_usage(message, estimate, model.family)
        chat_doc = tell_cache_writes(messages_response_to_chat(message, model=model.id, created=created), usage)
        doc = chat_response_to_responses(chat_doc, request=body, response_id=response_id, created_at=created)
        return orjson.dumps(doc), usage

    return Route(
        request=_request(upstream, target, kind.body(messages_body), kind.action(call.stream), stream=call.stream),
        stream=call.stream,
        input_tokens_estimate=estimate,
        output_tokens=asks.output_tokens,
        asks=asks,
        make_pipe=lambda: kind.pipe(ToResponsesPipe(body, messages_upstream=True, model=model.id,
                                                    response_id=response_id, created=created), model.id),
        make_splitter=kind.splitter(),
        finish=finish,
        upstream_error=chat_error,
        headers=dropped_tools_headers(body),
    )


ROUTES = {"messages": messages, "chat": chat, "responses": responses, "gemini": via_chat(chat)}
