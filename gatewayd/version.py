"""gatewayd's version: what ``gatewayd --version``, ``gatewayctl --version``, ``/healthz`` and
``/metrics`` (``gateway_build_info``) report, from one place: the installed package's metadata
(pyproject.toml's ``version``), and the highest database schema each store's migrations know."""

from __future__ import annotations

import functools
import re
from importlib import metadata, resources


@functools.cache
def version() -> str:
    try:
        return metadata.version("gatewayd")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _highest(folder) -> int:
    numbers = [int(m.group(1)) for entry in folder.iterdir() if (m := re.match(r"(\d{4})_.*\.sql$", entry.name))]
    return max(numbers, default=0)


@functools.cache
def schema_versions() -> dict[str, int]:
    """The highest migration this binary knows, per store: a database past it is newer than this binary."""
    migrations = resources.files("gatewayd.store").joinpath("migrations")
    return {"sqlite": _highest(migrations), "postgresql": _highest(migrations.joinpath("postgres"))}


def describe() -> str:
    """The one ``--version`` line."""
    schemas = schema_versions()
    return f"gatewayd {version()} (database schema: SQLite {schemas['sqlite']}, PostgreSQL {schemas['postgresql']})"
