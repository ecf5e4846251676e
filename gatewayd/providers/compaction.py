"""Compaction on every route (docs/responses.md, "Compaction").

The adapter table's ``responses`` builders, wrapped (:func:`compacting`): a ``/v1/responses``
body whose last input item is ``compaction_trigger``, and every ``POST /v1/responses/compact``
(client format ``"compact"``, built by :func:`compact`):

- on a route that passes Responses through (GPT-like models on OpenAI and Azure OpenAI), goes
  to the provider as it came, which compacts it (``/v1/responses`` or ``/v1/responses/compact``);
- on a translated route, becomes the summarising request of :mod:`gatewayd.formats.compaction`,
  built by the route's own responses builder (so its translation, hold, usage row and errors
  are those of any responses request to that model), and its answer one ``compaction`` item.
"""

from __future__ import annotations

import attrs
import orjson

from gatewayd.catalogue import ModelRoute
from gatewayd.formats.compaction import (
    CompactionPipe, compacted_response, compaction_response, summarising_request, wants_compaction,
)
from gatewayd.formats.errors import answer_object
from gatewayd.providers.base import Builder, Call, Route, translate

__all__ = ["compact", "compacting", "passes_responses_through"]

#: Protocols whose GPT-like models take the client's Responses body as it is.
_RESPONSES_PROTOCOLS = frozenset({"openai", "azure-openai"})


def passes_responses_through(call: Call, target: ModelRoute) -> bool:
    """Whether ``target`` gets a responses client's body as it came (the provider speaks
    Responses and compacts itself)."""
    return target.provider.protocol in _RESPONSES_PROTOCOLS and call.model.family == "gpt"


def _summarised(build: Builder, call: Call, target: ModelRoute, upstream, *, endpoint_shape: bool) -> Route:
    """The route's own responses builder on the summarising request, its answer rewritten."""
    request = call.body
    summarising = translate(summarising_request, request)
    route = build(attrs.evolve(call, client_format="responses", body=summarising, raw=b""), target, upstream)
    inner_finish, inner_pipe = route.finish, route.make_pipe

    def finish(raw: bytes):
        body, usage = inner_finish(raw)
        doc = answer_object(body)
        answer = compacted_response(doc, request) if endpoint_shape else compaction_response(doc)
        return orjson.dumps(answer), usage

    route.finish = finish
    route.make_pipe = lambda: CompactionPipe(inner_pipe())
    return route


def compacting(build: Builder) -> Builder:
    """A protocol's responses builder, which on a translated route compacts a
    ``compaction_trigger`` request itself (module doc)."""

    def responses(call: Call, target: ModelRoute, upstream) -> Route:
        if not wants_compaction(call.body) or passes_responses_through(call, target):
            return build(call, target, upstream)
        return _summarised(build, call, target, upstream, endpoint_shape=False)

    return responses


def compact(build: Builder, passthrough: Builder | None) -> Builder:
    """``POST /v1/responses/compact`` on a protocol: ``passthrough`` (the provider's own
    endpoint) where Responses pass through, else the summarising request on ``build``, the
    protocol's responses builder."""

    def compact_route(call: Call, target: ModelRoute, upstream) -> Route:
        if passthrough is not None and passes_responses_through(call, target):
            return passthrough(call, target, upstream)
        return _summarised(build, call, target, upstream, endpoint_shape=True)

    return compact_route
