"""The OpenAI protocol: Chat Completions, Responses and Embeddings.

Chat and embeddings pass through (the client's bytes, the model id swapped when the
provider calls it otherwise). Responses pass through for the GPT-like family (whose
upstream has /v1/responses); responses-format clients of other models on this protocol
are translated to chat completions and back.

:func:`routes` is parametrised by how a request is addressed, so OpenAI-compatible
protocols that differ only in URLs and headers (``azure_openai``) reuse these builders.
"""

from __future__ import annotations

import os
import time
from typing import Callable

import httpx
import orjson

from gatewayd import tokens
from gatewayd.billing.estimate import estimate_input_tokens, estimate_text_tokens, media_for, prediction_tokens
from gatewayd.billing.features import (
    chat_asks, chat_cap_change, require_prices, responses_asks, responses_changes,
)
from gatewayd.catalogue import ModelRoute
from gatewayd.formats import partial, pipes, usage as usage_mod
from gatewayd.formats.errors import InvalidAnswer, answer_object, provider_json
from gatewayd.formats.embeddings import convert_embeddings, embedding_inputs
from gatewayd.formats.responses import chat_response_to_responses, responses_request_to_chat
from gatewayd.formats.responses_output import envelope
from gatewayd.formats.stored_objects import answer_received_ids
from gatewayd.formats.translating_pipes import ToResponsesPipe
from gatewayd.providers.gemini_client import via_chat
from gatewayd.providers.base import (
    Builder, Call, Route, converted_error, dropped_tools_headers, encode_body, model_change, passthrough_error, translate, with_changes,
)


# (upstream, route, operation, body, stream) -> the request; operation is "chat/completions",
# "responses" or "embeddings"
Addresser = Callable[..., httpx.Request]


def request(upstream, target: ModelRoute, operation: str, body: bytes, *, stream: bool) -> httpx.Request:
    """``{base_url}/{operation}`` with ``Authorization: Bearer``."""
    headers = {"content-type": "application/json", "accept": "text/event-stream" if stream else "application/json"}
    if target.provider.api_key:
        headers["authorization"] = f"Bearer {target.provider.api_key}"
    return upstream.post(f"{target.provider.base_url}/{operation}", body, headers, stream=stream)


def produced_chat_usage(doc: dict, input_estimate: int, family: str) -> usage_mod.Usage:
    """A chat completion without usage: the prompt as estimated and what its choices
    generated, counted offline by the model family's count (never free output)."""
    return usage_mod.Usage(input_tokens=input_estimate,
                           output_tokens=tokens.count(partial.chat_completion_text(doc), family),
                           service_tier=usage_mod.tier_of(doc.get("service_tier")))


def produced_response_usage(doc: dict, input_estimate: int, family: str) -> usage_mod.Usage:
    """A Responses object without usage: the prompt as estimated, what its output items
    generated counted offline, and the billed tool calls among them."""
    return usage_mod.Usage(input_tokens=input_estimate,
                           output_tokens=tokens.count(partial.response_output_text(doc), family),
                           tool_calls=usage_mod.response_tool_calls(doc.get("output")),
                           service_tier=usage_mod.tier_of(doc.get("service_tier")))


#: OpenAI's prompt-cache fields: passed to OpenAI and Azure OpenAI (GPT-like models), dropped for
#: other OpenAI-compatible providers (docs/translation.md, "Prompt caching").
OPENAI_CACHE_FIELDS = frozenset({"prompt_cache_key", "prompt_cache_retention"})


def routes(address: Addresser) -> dict[str, Builder]:
    """The builders of an OpenAI-shaped protocol, its requests addressed by ``address``."""

    def chat(call: Call, target: ModelRoute, upstream) -> Route:
        body, stream = call.body, call.stream
        wants_usage = stream and (body.get("stream_options") or {}).get("include_usage") is True
        asks = chat_asks(body, call.model, prediction_tokens=prediction_tokens(body))
        require_prices(call.model, asks)
        changes = model_change(call, target)
        changes.update(chat_cap_change(body, call.model))  # the cap held for, sent upstream
        if stream and not wants_usage:  # the gateway bills from the provider's usage: always ask for it
            changes["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        if call.model.family != "gpt" and not OPENAI_CACHE_FIELDS.isdisjoint(body):
            # OpenAI's own prompt-cache fields: another OpenAI-compatible provider does not read them
            payload = encode_body({k: v for k, v in {**body, **changes}.items() if k not in OPENAI_CACHE_FIELDS})
        else:
            payload = with_changes(call.raw, body, changes)

        def finish(raw: bytes):
            doc = answer_object(raw)
            return raw, usage_mod.from_chat_completion(doc) or produced_chat_usage(
                doc, estimate_input_tokens(body, "chat"), call.model.family)

        return Route(
            request=address(upstream, target, "chat/completions", payload, stream=stream),
            stream=stream,
            input_tokens_estimate=estimate_input_tokens(body, "chat", media_for(target.provider.protocol,
                                                                                target.upstream_id)),
            output_tokens=asks.output_tokens,
            make_pipe=lambda: pipes.ChatPassthrough(wants_usage),
            finish=finish,
            upstream_error=passthrough_error,
            asks=asks,
        )

    def responses(call: Call, target: ModelRoute, upstream) -> Route:
        if call.model.family != "gpt":
            return responses_via_chat(call, target, upstream)
        body = call.body
        asks = responses_asks(body, call.model)
        require_prices(call.model, asks)
        changes = {**model_change(call, target), **responses_changes(body, call.model)}

        def finish(raw: bytes):
            doc = answer_object(raw)
            return raw, usage_mod.from_response(doc) or produced_response_usage(
                doc, estimate_input_tokens(body, "responses"), call.model.family)

        return Route(
            request=address(upstream, target, "responses", with_changes(call.raw, body, changes), stream=call.stream),
            stream=call.stream,
            input_tokens_estimate=estimate_input_tokens(body, "responses", media_for(target.provider.protocol,
                                                                                     target.upstream_id)),
            output_tokens=asks.output_tokens,
            make_pipe=pipes.ResponsesPassthrough,
            finish=finish,
            upstream_error=passthrough_error,
            received_ids=lambda raw: answer_received_ids(provider_json(raw)),
            asks=asks,
        )

    def responses_via_chat(call: Call, target: ModelRoute, upstream) -> Route:
        """A responses-format client of a model whose upstream has no /v1/responses."""
        body = call.body
        chat_body = {**translate(responses_request_to_chat, body), "model": target.upstream_id}
        chat_body.update(chat_cap_change(chat_body, call.model))
        asks = chat_asks(chat_body, call.model)
        require_prices(call.model, asks)
        created = int(time.time())
        response_id = "resp_" + os.urandom(12).hex()
        encode_body(envelope(body, response_id=response_id, created_at=created, status=""))  # echoed later

        def finish(raw: bytes):
            chat = answer_object(raw)
            doc = chat_response_to_responses(chat, request=body, response_id=response_id, created_at=created)
            return orjson.dumps(doc), usage_mod.from_chat_completion(chat) or produced_chat_usage(
                chat, estimate_input_tokens(chat_body, "chat"), call.model.family)

        return Route(
            request=address(upstream, target, "chat/completions", encode_body(chat_body), stream=call.stream),
            stream=call.stream,
            input_tokens_estimate=estimate_input_tokens(chat_body, "chat", media_for(target.provider.protocol,
                                                                                     target.upstream_id)),
            output_tokens=asks.output_tokens,
            asks=asks,
            make_pipe=lambda: ToResponsesPipe(body, messages_upstream=False, model=call.model.id,
                                              response_id=response_id, created=created),
            finish=finish,
            upstream_error=converted_error,
            headers=dropped_tools_headers(body),
        )

    def embeddings(call: Call, target: ModelRoute, upstream) -> Route:
        body = call.body
        inputs = embedding_inputs(body["input"]) or []
        wanted = body.get("encoding_format", "float")
        token_arrays = sum(len(v) for v in inputs if isinstance(v, list))
        text_estimate = estimate_text_tokens([v for v in inputs if isinstance(v, str)])

        def finish(raw: bytes):
            doc = answer_object(raw)
            if not isinstance(doc.get("data"), list):
                raise InvalidAnswer("the embeddings answer has no 'data' list")
            return convert_embeddings(raw, wanted), usage_mod.from_chat(doc.get("usage"))

        return Route(
            request=address(upstream, target, "embeddings", with_changes(call.raw, body, model_change(call, target)),
                            stream=False),
            stream=False,
            # at least a token an input: an empty or blank string measures 0 bytes, and is billed
            input_tokens_estimate=text_estimate + token_arrays + len(inputs),
            output_tokens=0,
            make_pipe=lambda: pipes.ChatPassthrough(False),  # never used: embeddings do not stream
            finish=finish,
            upstream_error=passthrough_error,
        )

    return {"chat": chat, "responses": responses, "embeddings": embeddings, "gemini": via_chat(chat)}


def compact_route(address: Addresser) -> Builder:
    """``POST /v1/responses/compact`` passed through to an OpenAI-shaped provider's own
    endpoint (GPT-like models; :mod:`gatewayd.providers.compaction` decides): the client's
    bytes, the answer (a ``response.compaction`` object) back as it came, billed by its usage."""

    def compact(call: Call, target: ModelRoute, upstream) -> Route:
        body = call.body
        asks = responses_asks(body, call.model)
        require_prices(call.model, asks)
        estimate = estimate_input_tokens(body, "responses", media_for(target.provider.protocol, target.upstream_id))

        def finish(raw: bytes):
            doc = answer_object(raw)
            return raw, usage_mod.from_response(doc) or produced_response_usage(doc, estimate, call.model.family)

        return Route(
            request=address(upstream, target, "responses/compact", with_changes(call.raw, body, model_change(call, target)),
                            stream=False),
            stream=False,
            input_tokens_estimate=estimate,
            output_tokens=asks.output_tokens,
            make_pipe=pipes.ResponsesPassthrough,  # never used: compaction does not stream
            finish=finish,
            upstream_error=passthrough_error,
            asks=asks,
        )

    return compact


ROUTES = routes(request)
COMPACT = compact_route(request)
