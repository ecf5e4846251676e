"""What the config file needs to know about each upstream protocol, without its adapter.

The config loader checks a ``[[providers]]`` table (its protocol, the keys only that protocol
takes) and a model's routes (can this protocol serve embeddings? which ``family`` by
default?) before anything runs. Those facts live here, as data, so that reading the config
(and so opening the store, the admin API, ``gatewayctl``) does not import the adapters in
``gatewayd.providers`` and with them every translator in ``gatewayd.formats`` and httpx.

Adding a protocol: its adapter module and one line in ``gatewayd.providers.ADAPTERS``, and
its description here; ``tests/test_import_graph.py`` checks the two tables name the same
protocols and that ``client_formats`` is exactly what the adapter's ``ROUTES`` serve.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs


class SettingError(Exception):
    """A protocol's own ``[[providers]]`` key is missing or wrong (raised by its
    ``read_settings``; the config loader makes it one line naming the table and key)."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def _no_settings(table: Mapping[str, Any]) -> dict[str, Any]:
    return {}


@attrs.frozen
class Protocol:
    name: str
    client_formats: frozenset[str]  # the client formats its adapter can serve (the keys of its ROUTES)
    sim_base_path: str  # where the built-in simulator serves it (``--demo``)
    default_family: str = "other"  # a model's ``family`` when its first route speaks it and the file sets none
    provider_keys: frozenset[str] = frozenset()  # ``[[providers]]`` keys only this protocol takes
    read_settings: Callable[[Mapping[str, Any]], dict[str, Any]] = _no_settings  # validates those keys


def _azure_settings(table: Mapping[str, Any]) -> dict[str, Any]:
    """``api_version``: every Azure request names the API version it speaks, and there is no
    default worth guessing (each version has its own features and retirement date)."""
    version = table.get("api_version")
    if version is None:
        raise SettingError("api_version", 'required for protocol azure-openai (e.g. "2024-10-21")')
    if not isinstance(version, str) or not version.strip():
        raise SettingError("api_version", 'must be a non-empty string (e.g. "2024-10-21")')
    return {"api_version": version}


PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (
    Protocol("openai", frozenset({"chat", "responses", "embeddings"}), "/v1", default_family="gpt"),
    Protocol("anthropic", frozenset({"messages", "chat", "responses"}), "", default_family="claude"),
    Protocol("azure-openai", frozenset({"chat", "responses", "embeddings"}), "/openai", default_family="gpt",
             provider_keys=frozenset({"api_version"}), read_settings=_azure_settings),
    Protocol("gemini", frozenset({"chat", "responses"}), "/v1beta"),
)}
