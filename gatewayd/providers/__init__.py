"""The adapter table: (client format, upstream protocol) -> route builder.

One module per upstream protocol, each exposing ``ROUTES`` (client format -> builder, see
:mod:`.base`), ``SIM_BASE_PATH`` (where the simulator serves it, for ``--demo``) and
optionally ``DEFAULT_FAMILY`` (a model's ``family`` when its first route speaks it).
Adding a protocol is one module here, its translators in ``gatewayd.formats``, the
simulator, their tests, and one line in ``ADAPTERS``.
"""

from __future__ import annotations

from gatewayd.providers import anthropic, azure_openai, gemini, openai
from gatewayd.providers.base import Builder

ADAPTERS = {
    "openai": openai,
    "anthropic": anthropic,
    "azure-openai": azure_openai,
    "gemini": gemini,
}

CLIENT_FORMATS = ("chat", "messages", "responses", "embeddings")


def builder(client_format: str, protocol: str) -> Builder | None:
    """How a client of ``client_format`` reaches a provider speaking ``protocol``; None if it cannot."""
    return ADAPTERS[protocol].ROUTES.get(client_format)


def client_formats(protocol: str) -> frozenset[str]:
    """The client formats a provider of ``protocol`` can serve."""
    return frozenset(ADAPTERS[protocol].ROUTES)
