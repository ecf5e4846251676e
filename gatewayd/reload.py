"""Reloading the catalogue without a restart (SIGHUP, ``gatewayctl reload``).

The config file is read and validated exactly as at start-up; a bad file is refused with
the same one-line error and the config in force stays. A good one replaces the ``Config``
value held by the relay, the directory and the console in one step (no ``await`` in
between, so no request sees half of it). Requests already admitted keep the ``Grant`` and
``Route`` they were admitted with: they finish on the provider they started with and are
billed at the price they were admitted at, because settlement charges ``grant.model``.

What a reload changes: providers, models, prices, rate limits and groups. The listeners,
the admin socket, the data dir, the database, the log and the telemetry settings need a restart; a
reload that changes them keeps the old values and says so.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import attrs

from gatewayd import logs
from gatewayd.config import Config, ConfigError


def _changes(old: Config, new: Config) -> dict[str, list[str]]:
    def price(m) -> Any:
        return attrs.evolve(m, client_formats=frozenset())  # every field that prices or routes it

    return {
        "added": sorted(set(new.models) - set(old.models)),
        "removed": sorted(set(old.models) - set(new.models)),
        "changed": sorted(m for m in set(old.models) & set(new.models) if price(old.models[m]) != price(new.models[m])),
    }


class Reloader:
    def __init__(self, load: Callable[[], Config], adapt: Callable[[Config], Config], holders: list[Any],
                 metrics=None) -> None:
        """``load`` reads the file as at start-up; ``adapt`` applies what start-up applied on top
        (``--demo``'s simulator); ``holders`` are the objects whose ``.config`` is replaced."""
        self.load = load
        self.adapt = adapt
        self.holders = holders
        self.metrics = metrics

    @property
    def config(self) -> Config:
        return self.holders[0].config

    def reload(self, source: str) -> dict:
        old = self.config
        try:
            new = self.adapt(self.load())
        except ConfigError as e:
            line = f"gatewayd: config error: {e}"
            logs.event("config reload refused; the config in force stays", logging.ERROR, source=source, error=line)
            if self.metrics is not None:
                self.metrics.reloads.labels("refused").inc()
            raise ConfigError(str(e)) from None
        except Exception:
            # every bad file is a ConfigError (config.load_config); anything else is a gateway
            # bug, and still must not take the daemon down or change the config in force
            logging.getLogger("gatewayd").error("config reload failed (a gateway bug); the config in force stays",
                                                exc_info=True, extra={"fields": {"source": source}})
            if self.metrics is not None:
                self.metrics.reloads.labels("refused").inc()
            raise
        restart = [name for name, a, b in (
            ("server", old.server, new.server), ("database", old.database_url, new.database_url),
            ("redis", old.redis_url, new.redis_url), ("log", old.log, new.log),
            ("telemetry", old.telemetry, new.telemetry)) if a != b]
        new = attrs.evolve(new, server=old.server, database_url=old.database_url, redis_url=old.redis_url,
                           log=old.log, telemetry=old.telemetry)
        changes = _changes(old, new)
        for holder in self.holders:
            holder.config = new
        if self.metrics is not None:
            self.metrics.reloads.labels("ok").inc()
        logs.event("config reloaded", logging.INFO, source=source, models=len(new.models),
                   providers=len(new.providers), groups=len(new.groups), **changes,
                   restart_needed=restart or None)
        if restart:
            logs.event(f"config reload: {', '.join(restart)} settings change only with a restart; kept as they were",
                       logging.WARNING, source=source)
        return {"ok": True, "models": len(new.models), "providers": len(new.providers), "groups": len(new.groups),
                **changes, "restart_needed": restart}
