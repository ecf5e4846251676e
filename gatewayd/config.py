"""Configuration: the TOML file, environment overrides, and the catalogue it resolves to.

Everything is validated once at start-up into frozen values, so a bad file fails with
one line naming the key and the problem (``ConfigError``) and the request path never
checks a setting again. Prices become integer nano-dollars per token here.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from fractions import Fraction
from pathlib import Path
from typing import Any

import attrs

from gatewayd.money import MoneyError, price_per_million_to_nano_per_token, ratio

DEFAULT_CATALOGUE = Path(__file__).resolve().parent.parent / "schemas" / "catalogue.toml"
DEFAULT_LISTEN = "127.0.0.1:8080"
DEFAULT_DATA_DIR = "var"


class ConfigError(Exception):
    """One line for the operator: which key, what is wrong with it."""


@attrs.frozen
class Provider:
    name: str
    protocol: str  # "openai" | "anthropic"
    base_url: str
    api_key: str | None

    @property
    def dual_format(self) -> bool:
        return self.protocol == "anthropic"


@attrs.frozen
class RateLimit:
    requests: int
    minutes: int


@attrs.frozen
class Model:
    """A catalogue entry. Prices are nano-dollars per token; None means not priced."""

    id: str
    provider: Provider
    upstream_id: str
    kind: str  # "chat" | "embedding"
    family: str  # "gpt" (upstream speaks /v1/responses) | "claude" | "other"
    input_price: int | None
    output_price: int | None
    cached_input_price: int | None
    cache_write_price: int | None
    max_output_tokens: int
    rate_limit: RateLimit | None
    created: int = 1_735_689_600  # 2025-01-01: a stable value for model listings

    @property
    def dual_format(self) -> bool:
        return self.provider.dual_format

    @property
    def priced(self) -> bool:
        if self.kind == "embedding":
            return self.input_price is not None
        return self.input_price is not None and self.output_price is not None

    @property
    def passes_responses_through(self) -> bool:
        return self.family == "gpt" and self.provider.protocol == "openai"


@attrs.frozen
class Group:
    name: str
    price_ratio: Fraction
    retired: bool


@attrs.frozen
class ServerSettings:
    listen: tuple[str, ...]
    admin_socket: str
    data_dir: str
    stream_idle_timeout_s: float
    max_body_bytes: int
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    models_visible_after_paid_nano: int
    shutdown_grace_s: float
    tls_cert: str | None
    tls_key: str | None
    upstream_connect_timeout_s: float
    console_secret: str | None


@attrs.frozen
class Config:
    server: ServerSettings
    database_url: str
    redis_url: str | None
    providers: dict[str, Provider]
    models: dict[str, Model]
    groups: dict[str, Group]
    demo: bool = False

    def with_upstream(self, openai_base: str, anthropic_base: str) -> "Config":
        """Every provider pointed at the simulator (``--demo``): same catalogue, no real keys."""
        providers = {
            name: attrs.evolve(
                p,
                base_url=openai_base if p.protocol == "openai" else anthropic_base,
                api_key="sim-key",
            )
            for name, p in self.providers.items()
        }
        models = {mid: attrs.evolve(m, provider=providers[m.provider.name]) for mid, m in self.models.items()}
        return attrs.evolve(self, providers=providers, models=models, demo=True)


# --------------------------------------------------------------------------- loading


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None


class _Section:
    """Typed reads from one table, each error naming the full key."""

    def __init__(self, table: Any, where: str) -> None:
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: must be a table")
        self.table = table
        self.where = where

    def _key(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def unknown(self, allowed: set[str]) -> None:
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

    def number(self, key: str, default: Any = ..., *, minimum: float = 0, integer: bool = False) -> Any:
        value = self.table.get(key, default)
        if value is ...:
            raise ConfigError(f"{self._key(key)}: required")
        if value is None:
            return None
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise ConfigError(f"{self._key(key)}: must be {'an integer' if integer else 'a number'}")
        if value < minimum:
            raise ConfigError(f"{self._key(key)}: must be at least {minimum}")
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.table.get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(f"{self._key(key)}: must be true or false")
        return value

    def price(self, key: str) -> int | None:
        value = self.number(key, None)
        if value is None:
            return None
        try:
            return price_per_million_to_nano_per_token(value)
        except MoneyError as e:
            raise ConfigError(f"{self._key(key)}: {e}") from None


def _listen_list(value: Any, where: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: must be HOST:PORT or a list of them")
    for item in items:
        parse_host_port(item, where)
    return tuple(items)


def parse_host_port(value: Any, where: str = "listen") -> tuple[str, int]:
    if not isinstance(value, str) or ":" not in value:
        raise ConfigError(f"{where}: must be HOST:PORT (got {value!r})")
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{where}: bad port in {value!r}")
    return host or "0.0.0.0", int(port)


def _server(raw: Any, overrides: dict[str, Any]) -> ServerSettings:
    s = _Section(raw or {}, "server")
    s.unknown({
        "listen", "admin_socket", "data_dir", "stream_idle_timeout_s", "max_body_bytes",
        "trusted_proxies", "models_visible_after_paid", "shutdown_grace_s", "tls_cert", "tls_key",
        "upstream_connect_timeout_s", "console_secret",
    })
    proxies = []
    raw_proxies = s.table.get("trusted_proxies", [])
    if not isinstance(raw_proxies, list):
        raise ConfigError("server.trusted_proxies: must be a list of CIDRs")
    for entry in raw_proxies:
        try:
            proxies.append(ipaddress.ip_network(str(entry), strict=False))
        except ValueError:
            raise ConfigError(f"server.trusted_proxies: not an IP network: {entry!r}") from None
    threshold = s.number("models_visible_after_paid", 3.00)
    try:
        from gatewayd.money import usd_to_nano

        threshold_nano = usd_to_nano(str(threshold))
    except MoneyError as e:
        raise ConfigError(f"server.models_visible_after_paid: {e}") from None
    data_dir = overrides.get("data_dir") or s.str("data_dir", DEFAULT_DATA_DIR)
    listen = overrides.get("listen") or s.table.get("listen", DEFAULT_LISTEN)
    tls_cert = overrides.get("tls_cert") or s.str("tls_cert", None)
    tls_key = overrides.get("tls_key") or s.str("tls_key", None)
    if bool(tls_cert) != bool(tls_key):
        raise ConfigError("server.tls_cert and server.tls_key: give both or neither")
    return ServerSettings(
        listen=_listen_list(listen, "server.listen"),
        admin_socket=overrides.get("admin_socket") or s.str("admin_socket", str(Path(data_dir) / "admin.sock")),
        data_dir=data_dir,
        stream_idle_timeout_s=float(s.number("stream_idle_timeout_s", 300, minimum=0.001)),
        max_body_bytes=s.number("max_body_bytes", 134_217_728, minimum=1, integer=True),
        trusted_proxies=tuple(proxies),
        models_visible_after_paid_nano=threshold_nano,
        shutdown_grace_s=float(s.number("shutdown_grace_s", 30)),
        tls_cert=tls_cert,
        tls_key=tls_key,
        upstream_connect_timeout_s=float(s.number("upstream_connect_timeout_s", 10, minimum=0.001)),
        console_secret=s.str("console_secret", None),
    )


def _providers(raw: Any) -> dict[str, Provider]:
    if not isinstance(raw, list):
        raise ConfigError("providers: must be an array of tables ([[providers]])")
    providers: dict[str, Provider] = {}
    for i, table in enumerate(raw):
        s = _Section(table, f"providers[{i}]")
        s.unknown({"name", "protocol", "base_url", "api_key", "api_key_env"})
        name = s.str("name")
        if name in providers:
            raise ConfigError(f"providers[{i}].name: duplicate provider {name!r}")
        base_url = s.str("base_url").rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"providers[{i}].base_url: must start with http:// or https://")
        api_key = s.str("api_key", None)
        key_env = s.str("api_key_env", None)
        if api_key is None and key_env is not None:
            api_key = os.environ.get(key_env) or None
        providers[name] = Provider(
            name=name, protocol=s.str("protocol", choices=("openai", "anthropic")), base_url=base_url, api_key=api_key
        )
    return providers


def _models(raw: Any, providers: dict[str, Provider]) -> dict[str, Model]:
    if not isinstance(raw, list):
        raise ConfigError("models: must be an array of tables ([[models]])")
    models: dict[str, Model] = {}
    for i, table in enumerate(raw):
        s = _Section(table, f"models[{i}]")
        s.unknown({
            "id", "provider", "upstream_id", "kind", "family", "input_price", "output_price",
            "cached_input_price", "cache_write_price", "max_output_tokens", "rate_limit",
        })
        model_id = s.str("id")
        if model_id in models:
            raise ConfigError(f"models[{i}].id: duplicate model {model_id!r}")
        provider_name = s.str("provider")
        if provider_name not in providers:
            raise ConfigError(f"models[{i}].provider: no provider named {provider_name!r}")
        provider = providers[provider_name]
        default_family = "claude" if provider.protocol == "anthropic" else "gpt"
        rate = None
        if "rate_limit" in s.table:
            r = _Section(s.table["rate_limit"], f"models[{i}].rate_limit")
            r.unknown({"requests", "minutes"})
            rate = RateLimit(
                requests=r.number("requests", minimum=1, integer=True),
                minutes=r.number("minutes", 1, minimum=1, integer=True),
            )
        models[model_id] = Model(
            id=model_id,
            provider=provider,
            upstream_id=s.str("upstream_id", model_id),
            kind=s.str("kind", "chat", choices=("chat", "embedding")),
            family=s.str("family", default_family, choices=("gpt", "claude", "other")),
            input_price=s.price("input_price"),
            output_price=s.price("output_price"),
            cached_input_price=s.price("cached_input_price"),
            cache_write_price=s.price("cache_write_price"),
            max_output_tokens=s.number("max_output_tokens", 8192, minimum=1, integer=True),
            rate_limit=rate,
        )
    return models


def _groups(raw: Any) -> dict[str, Group]:
    if not isinstance(raw, list):
        raise ConfigError("groups: must be an array of tables ([[groups]])")
    groups: dict[str, Group] = {}
    for i, table in enumerate(raw):
        s = _Section(table, f"groups[{i}]")
        s.unknown({"name", "price_ratio", "retired"})
        name = s.str("name")
        try:
            price_ratio = ratio(s.number("price_ratio", 1.0))
        except MoneyError as e:
            raise ConfigError(f"groups[{i}].price_ratio: {e}") from None
        groups[name] = Group(name=name, price_ratio=price_ratio, retired=s.bool("retired", False))
    if "default" not in groups:
        groups["default"] = Group(name="default", price_ratio=Fraction(1), retired=False)
    return groups


def load_config(
    path: str | os.PathLike | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Config:
    """The config file (or the embedded defaults), then the environment, then CLI flags.

    Providers, models and groups come from the file when it has any ``[[models]]``,
    otherwise from the default catalogue in ``schemas/catalogue.toml``.
    """
    env = os.environ if environ is None else environ
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    path = path or env.get("GATEWAY_CONFIG")
    raw: dict[str, Any] = _read_toml(Path(path)) if path else {}
    allowed = {"server", "database", "redis", "providers", "models", "groups"}
    extra = sorted(set(raw) - allowed)
    if extra:
        raise ConfigError(f"{extra[0]}: unknown top-level key")
    if env.get("GATEWAY_ADMIN_SOCKET") and "admin_socket" not in overrides:
        overrides["admin_socket"] = env["GATEWAY_ADMIN_SOCKET"]
    server = _server(raw.get("server"), overrides)

    catalogue = raw if "models" in raw else _read_toml(DEFAULT_CATALOGUE)
    providers = _providers(catalogue.get("providers", []))
    models = _models(catalogue.get("models", []), providers)
    groups = _groups(raw.get("groups", catalogue.get("groups", [])))

    db = _Section(raw.get("database", {}), "database")
    db.unknown({"url"})
    database_url = env.get("GATEWAY_DATABASE_URL") or db.str("url", f"sqlite:///{Path(server.data_dir) / 'gateway.db'}")
    if not database_url.startswith(("sqlite:///", "postgresql://", "postgres://")):
        raise ConfigError("database.url: must start with sqlite:/// or postgresql://")
    redis = _Section(raw.get("redis", {}), "redis")
    redis.unknown({"url"})
    redis_url = env.get("GATEWAY_REDIS_URL") or redis.str("url", None)
    return Config(
        server=server,
        database_url=database_url,
        redis_url=redis_url,
        providers=providers,
        models=models,
        groups=groups,
    )
