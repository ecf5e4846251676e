"""The Anthropic Messages protocol.

Messages-format clients pass through (the client's bytes, its ``anthropic-version`` and
``anthropic-beta`` headers forwarded). Chat-format clients are translated to messages and
back; responses-format clients go responses -> chat -> messages and back.
"""

from __future__ import annotations

import os
import time

import attrs
import httpx
import orjson

from gatewayd import tokens
from gatewayd.catalogue import Model, ModelRoute
from gatewayd.errors import MESSAGES_TYPE_BY_STATUS, UpstreamError
from gatewayd.protocols import PROTOCOLS
from gatewayd.formats import partial, pipes, usage as usage_mod
from gatewayd.formats.cache_breakpoints import place_breakpoints
from gatewayd.formats.chat_to_messages import chat_request_to_messages
from gatewayd.formats.errors import answer_object, provider_json_or_none
from gatewayd.formats.messages_to_chat import messages_response_to_chat
from gatewayd.formats.responses import chat_response_to_responses, responses_request_to_chat
from gatewayd.formats.responses_output import envelope
from gatewayd.formats.translating_pipes import MessagesToChatPipe, ToResponsesPipe, tell_cache_writes
from gatewayd.providers.gemini_client import via_chat
from gatewayd.providers.base import (
    Call, Route, converted_error, dropped_tools_headers, encode_body, model_change, passthrough_error, translate, with_changes,
)
from gatewayd.billing.estimate import ANTHROPIC_MEDIA, estimate_input_tokens
from gatewayd.billing.features import messages_asks, messages_changes, require_prices

DEFAULT_FAMILY = PROTOCOLS["anthropic"].default_family
DEFAULT_ANTHROPIC_VERSION = "2023-06-01"

# Without a client cap, a translated request asks for at most this many tokens (and the
# hold covers this many): Anthropic requires max_tokens, and holding a model's whole
# 64k allowance would refuse most small balances. Documented in docs/translation.md.
DEFAULT_TRANSLATED_MAX_TOKENS = 8192


def request(upstream, target: ModelRoute, body: bytes, *, stream: bool, version: str | None = None,
            betas: list[str] | None = None) -> httpx.Request:
    """``{base_url}/v1/messages`` with ``x-api-key`` and ``anthropic-version``."""
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream" if stream else "application/json",
        "anthropic-version": version or DEFAULT_ANTHROPIC_VERSION,
    }
    if betas:
        headers["anthropic-beta"] = ",".join(betas)
    if target.provider.api_key:
        headers["x-api-key"] = target.provider.api_key
    return upstream.post(target.provider.base_url + "/v1/messages", body, headers, stream=stream)


def messages_passthrough_error(error: UpstreamError) -> tuple[int, bytes, dict[str, str]]:
    """On /v1/messages: the provider's status and body unchanged when the body is already in
    the messages error shape; otherwise (an HTML page from a proxy, another vendor's shape)
    its message retold in that shape, so Anthropic clients can still read it."""
    status, body, headers = passthrough_error(error)
    doc = provider_json_or_none(error.body)
    if isinstance(doc, dict) and doc.get("type") == "error" and isinstance(doc.get("error"), dict):
        return status, body, headers
    kind = MESSAGES_TYPE_BY_STATUS.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return status, orjson.dumps({"type": "error", "error": {"type": kind, "message": error.message()}}), headers


def produced_usage(message: dict, input_estimate: int, family: str = DEFAULT_FAMILY) -> usage_mod.Usage:
    """A messages-format reply without usage: the prompt as estimated, the output it
    carries counted offline by the model family's count (never free output), and the
    server tools its blocks show it used."""
    base = usage_mod.message_tally(message).usage(complete=True) or usage_mod.Usage()
    return attrs.evolve(base, input_tokens=input_estimate,
                        output_tokens=tokens.count(partial.message_text(message), family))


def answer_usage(message: dict, input_estimate: int, family: str) -> usage_mod.Usage:
    """What a whole messages-format reply is charged: its usage, else what it produced."""
    return usage_mod.from_message(message) or produced_usage(message, input_estimate, family)


def _client_betas(headers) -> list[str]:
    if headers is None:
        return []
    return [b.strip() for value in headers.getlist("anthropic-beta") for b in value.split(",") if b.strip()]


def messages(call: Call, target: ModelRoute, upstream) -> Route:
    body = call.body
    bounds = messages_changes(body, call.model)  # the cap and tool uses held for, sent upstream
    asks = messages_asks({**body, **bounds} if bounds else body, call.model)
    require_prices(call.model, asks)
    estimate = estimate_input_tokens(body, "messages", ANTHROPIC_MEDIA)

    def finish(raw: bytes):
        message = answer_object(raw)
        return raw, answer_usage(message, estimate, call.model.family)

    return Route(
        request=request(
            upstream, target, with_changes(call.raw, body, {**model_change(call, target), **bounds}),
            stream=call.stream,
            version=call.headers.get("anthropic-version") if call.headers is not None else None,
            betas=_client_betas(call.headers),
        ),
        stream=call.stream,
        input_tokens_estimate=estimate,
        output_tokens=asks.output_tokens,
        make_pipe=pipes.MessagesPassthrough,
        finish=finish,
        upstream_error=messages_passthrough_error,
        asks=asks,
    )


def _to_messages(chat_body: dict, model: Model, target: ModelRoute, *, chat_client: bool = True) -> dict:
    """The messages body for a chat body, its cap lowered to the model's maximum, with the
    gateway's prompt-cache breakpoints on an ``auto_cache`` route (:mod:`cache_breakpoints`),
    priced (400 ``unpriced_feature`` otherwise). The client's own ``cache_control`` markers
    are carried from a responses client always, from a chat client (and a Gemini-API one, which
    has none) only where the operator set ``auto_cache = true`` (``carry_cache_markers``): the
    spec's rule for chat clients, which the default keeps."""
    default_max = min(model.max_output_tokens, DEFAULT_TRANSLATED_MAX_TOKENS)
    body = translate(chat_request_to_messages, chat_body, upstream_model=target.upstream_id,
                     default_max_tokens=default_max, max_output_tokens=model.max_output_tokens,
                     cache_markers=target.carry_cache_markers or not chat_client)
    if target.auto_cache:
        place_breakpoints(body)
    body.update(messages_changes(body, model))
    require_prices(model, messages_asks(body, model))
    return body


def chat(call: Call, target: ModelRoute, upstream) -> Route:
    """A chat-format client of a messages upstream: translated both ways."""
    body, model = call.body, call.model
    upstream_body = _to_messages(body, model, target)
    wants_usage = call.stream and (body.get("stream_options") or {}).get("include_usage") is True
    estimate = estimate_input_tokens(upstream_body, "messages", ANTHROPIC_MEDIA)
    asks = messages_asks(upstream_body, model)
    created = int(time.time())

    def finish(raw: bytes):
        message = answer_object(raw)
        chat_doc = messages_response_to_chat(message, model=model.id, created=created)
        return orjson.dumps(chat_doc), answer_usage(message, estimate, model.family)

    return Route(
        request=request(upstream, target, encode_body(upstream_body), stream=call.stream),
        stream=call.stream,
        input_tokens_estimate=estimate,
        output_tokens=asks.output_tokens,
        asks=asks,
        make_pipe=lambda: MessagesToChatPipe(model.id, wants_usage, created=created),
        finish=finish,
        upstream_error=converted_error,
    )


def responses(call: Call, target: ModelRoute, upstream) -> Route:
    """A responses-format client of a messages upstream: responses -> chat -> messages and back."""
    body, model = call.body, call.model
    upstream_body = _to_messages(translate(responses_request_to_chat, body), model, target, chat_client=False)
    created = int(time.time())
    response_id = "resp_" + os.urandom(12).hex()
    encode_body(envelope(body, response_id=response_id, created_at=created, status=""))  # echoed later

    def finish(raw: bytes):
        message = answer_object(raw)
        usage = usage_mod.from_message(message) or produced_usage(
            message, estimate_input_tokens(upstream_body, "messages"), model.family)
        chat_doc = tell_cache_writes(messages_response_to_chat(message, model=model.id, created=created), usage)
        doc = chat_response_to_responses(chat_doc, request=body, response_id=response_id, created_at=created)
        return orjson.dumps(doc), usage

    return Route(
        request=request(upstream, target, encode_body(upstream_body), stream=call.stream),
        stream=call.stream,
        input_tokens_estimate=estimate_input_tokens(upstream_body, "messages", ANTHROPIC_MEDIA),
        output_tokens=messages_asks(upstream_body, model).output_tokens,
        asks=messages_asks(upstream_body, model),
        make_pipe=lambda: ToResponsesPipe(body, messages_upstream=True, model=model.id, response_id=response_id,
                                          created=created),
        finish=finish,
        upstream_error=converted_error,
        headers=dropped_tools_headers(body),
    )


ROUTES = {"messages": messages, "chat": chat, "responses": responses, "gemini": via_chat(chat)}
