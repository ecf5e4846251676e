"""Typed reads from one table of the config file, each error naming the full key.

Apart from ``gatewayd.config`` so that a module reading its own section (``[alerts]``:
``gatewayd.alerts``) need not import the config loader that imports it.
"""

from __future__ import annotations

import builtins  # Section.str shadows the type in its class body
import math
from typing import AbstractSet, Any

from gatewayd.money import MoneyError, price_per_million_to_nano_per_token

# Every number in the file: far above any sensible setting, and small enough that sums and
# products of them stay exact and within the store's 64-bit integers.
MAX_NUMBER = 10**12


class ConfigError(Exception):
    """One line for the operator: which key, what is wrong with it."""


class Section:
    """Typed reads from one table, each error naming the full key."""

    def __init__(self, table: Any, where: str) -> None:
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: must be a table")
        self.table = table
        self.where = where

    def _key(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def unknown(self, allowed: AbstractSet[str]) -> None:
        extra = sorted(set(self.table) - allowed)
        if extra:
            raise ConfigError(f"{self._key(extra[0])}: unknown key")

    def str(self, key: str, default: Any = ..., *, choices: tuple[str, ...] | None = None) -> Any:
        value = self.table.get(key, default)
        if value is ...:
            raise ConfigError(f"{self._key(key)}: required")
        if value is None and default is None:
            return None
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{self._key(key)}: must be a non-empty string")
        if choices and value not in choices:
            raise ConfigError(f"{self._key(key)}: must be one of {', '.join(choices)} (got {value!r})")
        return value

    def number(self, key: builtins.str, default: Any = ..., *, minimum: float = 0, integer: bool = False) -> Any:
        value = self.table.get(key, default)
        if value is ...:
            raise ConfigError(f"{self._key(key)}: required")
        if value is None:
            return None
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise ConfigError(f"{self._key(key)}: must be {'an integer' if integer else 'a number'}")
        # nan compares false with everything, so it would pass the minimum and then make every
        # timeout, deadline or price it reaches fail at request time; inf (also what a float
        # literal too large for a double becomes) is no duration or amount either
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{self._key(key)}: must be a finite number (got {value})")
        if value < minimum:
            raise ConfigError(f"{self._key(key)}: must be at least {minimum}")
        if abs(value) > MAX_NUMBER:
            raise ConfigError(f"{self._key(key)}: must be at most {MAX_NUMBER}")
        return value

    def bool(self, key: builtins.str, default: bool) -> bool:
        value = self.table.get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(f"{self._key(key)}: must be true or false")
        return value

    def price(self, key: builtins.str) -> int | None:
        value = self.number(key, None)
        if value is None:
            return None
        try:
            return price_per_million_to_nano_per_token(value)
        except MoneyError as e:
            raise ConfigError(f"{self._key(key)}: {e}") from None
