"""The adapter table: (client format, upstream protocol) -> route builder.

One module per upstream protocol, each exposing ``ROUTES`` (client format -> builder, see
:mod:`.base`). What the config loader needs to know of a protocol (its client formats,
default family, simulator path, extra ``[[providers]]`` keys and how they are checked, which
formats one route serves) is in ``gatewayd.protocols``, so reading the config imports no
adapter. Adding a protocol is one module here, its translators in ``gatewayd.formats``, the
simulator, their tests, one line in ``ADAPTERS`` and its description in
``gatewayd.protocols``: the config loader knows no protocol by name.
"""

from __future__ import annotations

from gatewayd.providers import anthropic, azure_openai, bedrock, gemini, openai, vertex
from gatewayd.providers.base import Builder
from gatewayd.providers.compaction import compact, compacting

__all__ = ["ADAPTERS", "CLIENT_FORMATS", "builder"]

ADAPTERS = {
    "openai": openai,
    "anthropic": anthropic,
    "azure-openai": azure_openai,
    "gemini": gemini,
    "bedrock": bedrock,
    "vertex": vertex,
}

CLIENT_FORMATS = ("chat", "messages", "responses", "embeddings", "gemini")


def builder(client_format: str, protocol: str) -> Builder | None:
    """How a client of ``client_format`` reaches a provider speaking ``protocol``; None if it cannot.
    Responses clients' compaction (a ``compaction_trigger`` request, and ``"compact"``: ``POST
    /v1/responses/compact``) is served on every protocol that serves responses
    (:mod:`.compaction`)."""
    adapter = ADAPTERS[protocol]
    if client_format == "compact":
        responses = adapter.ROUTES.get("responses")
        return None if responses is None else compact(responses, getattr(adapter, "COMPACT", None))
    build = adapter.ROUTES.get(client_format)
    if client_format == "responses" and build is not None:
        return compacting(build)
    return build

