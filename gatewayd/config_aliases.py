"""Aliases: other ids a request may name a catalogue model by.

A client sends the id it knows: a dated one (``claude-haiku-4-5-20251001``), or its own
built-in default (Claude Code, Codex and Gemini CLI each have one). ``[[aliases]]``
(``id`` -> ``model``) or ``aliases = [...]`` on a ``[[models]]`` entry maps such ids to a
catalogue model: the request is served and billed as that model, ``GET /v1/models`` lists
only catalogue ids, and the usage row records both (``model`` and ``requested_model``).

An alias is never a catalogue id (the model would shadow it or be shadowed), and names one
model only.
"""

from __future__ import annotations

from typing import Any

from gatewayd.catalogue import Model
from gatewayd.config_tables import ConfigError, Section


def read_aliases(catalogue: dict[str, Any], models: dict[str, Model]) -> dict[str, str]:
    """alias -> catalogue model id, from ``[[aliases]]`` and every model's ``aliases``."""
    out: dict[str, str] = {}

    def add(alias: Any, model_id: str, where: str) -> None:
        if not isinstance(alias, str) or not alias or len(alias) > 200:
            raise ConfigError(f"{where}: an alias is a model id (a non-empty string)")
        if alias in models:
            raise ConfigError(f"{where}: {alias!r} is a catalogue model id, not an alias")
        if alias in out and out[alias] != model_id:
            raise ConfigError(f"{where}: alias {alias!r} already names model {out[alias]!r}")
        out[alias] = model_id

    for i, table in enumerate(catalogue.get("models", [])):
        if not isinstance(table, dict) or "aliases" not in table:
            continue
        listed = table["aliases"]
        if not isinstance(listed, list):
            raise ConfigError(f"models[{i}].aliases: must be an array of model ids")
        for j, alias in enumerate(listed):
            add(alias, table["id"], f"models[{i}].aliases[{j}]")
    raw = catalogue.get("aliases", [])
    if not isinstance(raw, list):
        raise ConfigError("aliases: must be an array of tables ([[aliases]])")
    for i, table in enumerate(raw):
        s = Section(table, f"aliases[{i}]")
        s.unknown({"id", "model"})
        target = s.str("model")
        if target not in models:
            raise ConfigError(f"aliases[{i}].model: no model named {target!r}")
        add(s.str("id"), target, f"aliases[{i}].id")
    return out
