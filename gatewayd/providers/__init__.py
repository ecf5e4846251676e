"""The adapter table: (client format, upstream protocol) -> route builder.

One module per upstream protocol, each exposing ``ROUTES`` (client format -> builder, see
:mod:`.base`), optionally ``client_formats(upstream_id)`` (the formats one route serves when
they depend on the model: Gemini on Vertex AI serves no messages), ``SIM_BASE_PATH`` (where
the simulator serves it, for ``--demo``) and optionally ``DEFAULT_FAMILY`` (a model's
``family`` when its first route speaks it) and ``PROVIDER_KEYS`` with ``provider_settings`` (the extra ``[[providers]]`` keys the protocol
takes, and their validation: Azure's ``api_version``). Adding a protocol is one module
here, its translators in ``gatewayd.formats``, the simulator, their tests, and one line in
``ADAPTERS``: the config loader asks this table, and knows no protocol by name.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

import attrs

from gatewayd.catalogue import ModelRoute, Provider
from gatewayd.providers import anthropic, azure_openai, bedrock, gemini, openai, vertex
from gatewayd.providers.base import Builder, SettingError

__all__ = ["ADAPTERS", "CLIENT_FORMATS", "SettingError", "anthropic_rates", "builder", "client_formats",
           "default_base_url", "default_family", "provider_keys", "provider_settings", "serves", "sim_base_path",
           "simulated"]

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
    """How a client of ``client_format`` reaches a provider speaking ``protocol``; None if it cannot."""
    return ADAPTERS[protocol].ROUTES.get(client_format)


@functools.lru_cache(maxsize=4096)
def client_formats(protocol: str, upstream_id: str | None = None) -> frozenset[str]:
    """The client formats a provider of ``protocol`` can serve; with ``upstream_id``, those
    that route serves (what its adapter's ``client_formats`` hook says, of its ``ROUTES``)."""
    adapter = ADAPTERS[protocol]
    formats = frozenset(adapter.ROUTES)
    per_route = getattr(adapter, "client_formats", None)
    if per_route is None or upstream_id is None:
        return formats
    return formats & per_route(upstream_id)


def serves(route: ModelRoute, client_format: str) -> bool:
    """Whether ``route`` can take a client of ``client_format`` (the router plans only these)."""
    return client_format in client_formats(route.provider.protocol, route.upstream_id)


def default_family(protocol: str) -> str:
    """A model's ``family`` when its first route speaks ``protocol`` and the file sets none."""
    return getattr(ADAPTERS[protocol], "DEFAULT_FAMILY", "other")


def sim_base_path(protocol: str) -> str:
    """Where the built-in simulator serves ``protocol`` (``--demo``)."""
    return ADAPTERS[protocol].SIM_BASE_PATH


def provider_keys(protocol: str) -> frozenset[str]:
    """The ``[[providers]]`` keys only ``protocol`` takes (beyond name, protocol, base_url and the key)."""
    return getattr(ADAPTERS[protocol], "PROVIDER_KEYS", frozenset())


def anthropic_rates(protocol: str, upstream_id: str) -> bool:
    """Whether a model whose first route is this one defaults to Anthropic's cache-write rates
    (1.25x input for 5 minutes, 2x for 1 hour): Claude, wherever it is bought."""
    claude = getattr(ADAPTERS[protocol], "serves_claude", None)
    return claude(upstream_id) if claude is not None else protocol == "anthropic"


def provider_settings(protocol: str, table: Mapping[str, Any]) -> dict[str, Any]:
    """Those keys of a ``[[providers]]`` table, validated by the protocol's adapter
    (:class:`SettingError` names the key and the problem)."""
    read = getattr(ADAPTERS[protocol], "provider_settings", None)
    return read(table) if read is not None else {}


def default_base_url(protocol: str, settings: Mapping[str, Any]) -> str | None:
    """The ``base_url`` of a provider whose table sets none, when its protocol has one
    (Bedrock's and Vertex AI's regional endpoints, made from the validated ``settings``);
    None: the key is required."""
    default = getattr(ADAPTERS[protocol], "default_base_url", None)
    return default(settings) if default is not None else None


def simulated(provider: Provider, sim_url: str) -> Provider:
    """``provider`` pointed at the built-in simulator (``--demo``): its base URL under the
    simulator and a key the simulator takes, or what its adapter says (Bedrock: the
    simulator's SigV4 keys; Vertex AI: the simulator's own service account)."""
    simulate = getattr(ADAPTERS[provider.protocol], "simulated", None)
    if simulate is not None:
        return simulate(provider, sim_url)
    return attrs.evolve(provider, base_url=sim_url + sim_base_path(provider.protocol), api_key="sim-key")
