"""The adapter table: (client format, upstream protocol) -> route builder.

One module per upstream protocol, each exposing ``ROUTES`` (client format -> builder, see
:mod:`.base`), ``SIM_BASE_PATH`` (where the simulator serves it, for ``--demo``) and
optionally ``DEFAULT_FAMILY`` (a model's ``family`` when its first route speaks it) and
``PROVIDER_KEYS`` with ``provider_settings`` (the extra ``[[providers]]`` keys the protocol
takes, and their validation: Azure's ``api_version``). Adding a protocol is one module
here, its translators in ``gatewayd.formats``, the simulator, their tests, and one line in
``ADAPTERS``: the config loader asks this table, and knows no protocol by name.
"""

from __future__ import annotations

from typing import Any, Mapping

from gatewayd.providers import anthropic, azure_openai, gemini, openai
from gatewayd.providers.base import Builder, SettingError

__all__ = ["ADAPTERS", "CLIENT_FORMATS", "SettingError", "builder", "client_formats", "default_family",
           "provider_keys", "provider_settings", "sim_base_path"]

ADAPTERS = {
    "openai": openai,
    "anthropic": anthropic,
    "azure-openai": azure_openai,
    "gemini": gemini,
}

CLIENT_FORMATS = ("chat", "messages", "responses", "embeddings", "gemini")


def builder(client_format: str, protocol: str) -> Builder | None:
    """How a client of ``client_format`` reaches a provider speaking ``protocol``; None if it cannot."""
    return ADAPTERS[protocol].ROUTES.get(client_format)


def client_formats(protocol: str) -> frozenset[str]:
    """The client formats a provider of ``protocol`` can serve."""
    return frozenset(ADAPTERS[protocol].ROUTES)


def default_family(protocol: str) -> str:
    """A model's ``family`` when its first route speaks ``protocol`` and the file sets none."""
    return getattr(ADAPTERS[protocol], "DEFAULT_FAMILY", "other")


def sim_base_path(protocol: str) -> str:
    """Where the built-in simulator serves ``protocol`` (``--demo``)."""
    return ADAPTERS[protocol].SIM_BASE_PATH


def provider_keys(protocol: str) -> frozenset[str]:
    """The ``[[providers]]`` keys only ``protocol`` takes (beyond name, protocol, base_url and the key)."""
    return getattr(ADAPTERS[protocol], "PROVIDER_KEYS", frozenset())


def provider_settings(protocol: str, table: Mapping[str, Any]) -> dict[str, Any]:
    """Those keys of a ``[[providers]]`` table, validated by the protocol's adapter
    (:class:`SettingError` names the key and the problem)."""
    read = getattr(ADAPTERS[protocol], "provider_settings", None)
    return read(table) if read is not None else {}
