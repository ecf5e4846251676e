"""The catalogue's tables of the config file: ``[[providers]]``, ``[[models]]`` (their routes,
prices and price tables) and the aliases they answer to, read into frozen values
(``gatewayd.catalogue``). Apart from ``gatewayd.config``, which reads the rest of the file
and calls these three readers: a model's rules live in one place, and the loader stays short.
Prices become integer nano-dollars per token here; every error names its key (``ConfigError``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from gatewayd import protocols
from gatewayd.billing.tool_prices import default_tool_prices
from gatewayd.catalogue import LongContext, Model, ModelRoute, Provider, RateLimit, Rates
from gatewayd.config_aliases import read_aliases
from gatewayd.config_tables import ConfigError, Section as _Section
from gatewayd.money import MoneyError, usd_to_nano
from gatewayd.protocols import PROTOCOLS, SettingError


PROVIDER_KEYS = frozenset({"name", "protocol", "base_url", "api_key", "api_key_env"})


def read_providers(raw: Any, env: Mapping[str, str], *, own: bool = True) -> dict[str, Provider]:
    """``[[providers]]``: the keys every protocol has are read here; the keys only one
    protocol takes (Azure's ``api_version``, Bedrock's region and credentials ...) are declared and
    checked by ``gatewayd.protocols``.

    An ``api_key_env`` naming an unset variable is a config error in the operator's own file
    (``own``): requests would go out without a key. A provider only the default catalogue
    brings is left out instead (``Provider.missing_key_env``), so using the catalogue never
    needs every provider's key. Protocols that read their own credentials (Bedrock, Vertex AI)
    judge them in their settings."""
    if not isinstance(raw, list):
        raise ConfigError("providers: must be an array of tables ([[providers]])")
    providers: dict[str, Provider] = {}
    for i, table in enumerate(raw):
        s = _Section(table, f"providers[{i}]")
        protocol = s.str("protocol", choices=tuple(PROTOCOLS))
        _protocol_keys(s, protocol)
        name = s.str("name")
        if name in providers:
            raise ConfigError(f"providers[{i}].name: duplicate provider {name!r}")
        try:
            settings = PROTOCOLS[protocol].settings(s.table, env)
        except SettingError as e:
            raise ConfigError(f"providers[{i}].{e.key}: {e.problem}") from None
        make_base_url = PROTOCOLS[protocol].default_base_url
        base_url = (s.str("base_url") if make_base_url is None else s.str("base_url", make_base_url(settings))).rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"providers[{i}].base_url: must start with http:// or https://")
        api_key = s.str("api_key", None)
        key_env = s.str("api_key_env", None)
        missing = None
        if api_key is None and key_env is not None:
            api_key = env.get(key_env) or None
            if api_key is None and PROTOCOLS[protocol].settings_module is None:
                if own:
                    raise ConfigError(f"providers[{i}].api_key_env: the environment variable {key_env} is not set "
                                      f"(provider {name!r} would be called without a key)")
                missing = key_env
        providers[name] = Provider(name=name, protocol=protocol, base_url=base_url, api_key=api_key,
                                   settings=settings, missing_key_env=missing)
    return providers


def _protocol_keys(s: _Section, protocol: str) -> None:
    """Unknown keys are errors; a key another protocol takes says which one."""
    own = PROTOCOLS[protocol].provider_keys
    for key in sorted(set(s.table) - PROVIDER_KEYS - own):
        others = [name for name, p in PROTOCOLS.items() if key in p.provider_keys]
        if others:
            raise ConfigError(f"{s._key(key)}: not a setting of protocol {protocol} (only of {', '.join(others)})")
    s.unknown(PROVIDER_KEYS | own)


def _auto_cache(s: _Section, provider: Provider, upstream_id: str, default: bool | None) -> tuple[bool, bool]:
    """``auto_cache``: the gateway places prompt-cache breakpoints in translated requests to
    this route (docs/translation.md, "Prompt caching"); on by default where the route serves
    Claude (Anthropic caches only what breakpoints mark), off elsewhere (OpenAI and Gemini
    cache by themselves). Returns (auto_cache, set to true by the operator): only the latter
    carries a chat client's own markers, which the spec keeps out of the translation."""
    explicit = s.bool("auto_cache", False) if "auto_cache" in s.table else default
    if explicit is not None:
        return explicit, explicit
    return PROTOCOLS[provider.protocol].serves_claude(upstream_id), False


def _route(table: Any, where: str, providers: dict[str, Provider], default_upstream_id: str,
           model_auto_cache: bool | None) -> ModelRoute:
    r = _Section(table, where)
    r.unknown({"provider", "upstream_id", "priority", "weight", "auto_cache"})
    name = r.str("provider")
    if name not in providers:
        raise ConfigError(f"{where}.provider: no provider named {name!r}")
    priority = r.table.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ConfigError(f"{where}.priority: must be an integer")
    upstream_id = r.str("upstream_id", default_upstream_id)
    auto_cache, carry = _auto_cache(r, providers[name], upstream_id, model_auto_cache)
    return ModelRoute(
        provider=providers[name],
        upstream_id=upstream_id,
        priority=priority,
        weight=r.number("weight", 1, minimum=1, integer=True),
        auto_cache=auto_cache,
        carry_cache_markers=carry,
    )


def _model_routes(s: _Section, where: str, providers: dict[str, Provider], model_id: str) -> tuple[ModelRoute, ...]:
    """``[[models.routes]]``, or the one-route short form (``provider`` / ``upstream_id`` on the
    model itself); never both, so no route is silently ignored."""
    model_auto_cache = s.bool("auto_cache", False) if "auto_cache" in s.table else None  # the routes' default
    if "routes" in s.table:
        if "provider" in s.table or "upstream_id" in s.table:
            key = "provider" if "provider" in s.table else "upstream_id"
            raise ConfigError(f"{where}.{key}: give either provider/upstream_id or [[models.routes]], not both")
        raw = s.table["routes"]
        if not isinstance(raw, list) or not raw:
            raise ConfigError(f"{where}.routes: must be a non-empty array of tables ([[models.routes]])")
        routes = [_route(t, f"{where}.routes[{j}]", providers, model_id, model_auto_cache) for j, t in enumerate(raw)]
        seen = set()
        for j, route in enumerate(routes):
            if route.name in seen:
                raise ConfigError(f"{where}.routes[{j}]: duplicate route {route.name!r}")
            seen.add(route.name)
    else:
        provider_name = s.str("provider")
        if provider_name not in providers:
            raise ConfigError(f"{where}.provider: no provider named {provider_name!r}")
        upstream_id = s.str("upstream_id", model_id)
        auto_cache, carry = _auto_cache(s, providers[provider_name], upstream_id, None)
        routes = [ModelRoute(provider=providers[provider_name], upstream_id=upstream_id, auto_cache=auto_cache,
                             carry_cache_markers=carry)]
    # stable sort: among equal priorities the file's order is kept
    return tuple(sorted(routes, key=lambda r: -r.priority))


def read_models(raw: Any, providers: dict[str, Provider]) -> dict[str, Model]:
    if not isinstance(raw, list):
        raise ConfigError("models: must be an array of tables ([[models]])")
    models: dict[str, Model] = {}
    for i, table in enumerate(raw):
        s = _Section(table, f"models[{i}]")
        s.unknown({
            "id", "provider", "upstream_id", "routes", "kind", "family", "input_price", "output_price",
            "cached_input_price", "cache_write_price", "max_output_tokens", "rate_limit", "reasoning", "aliases",
            "auto_cache",
            *PRICE_TABLE_KEYS,
        })
        model_id = s.str("id")
        if model_id in models:
            raise ConfigError(f"models[{i}].id: duplicate model {model_id!r}")
        routes = _model_routes(s, f"models[{i}]", providers, model_id)
        default_family = PROTOCOLS[routes[0].provider.protocol].default_family
        rate = None
        if "rate_limit" in s.table:
            r = _Section(s.table["rate_limit"], f"models[{i}].rate_limit")
            r.unknown({"requests", "minutes"})
            rate = RateLimit(
                requests=r.number("requests", minimum=1, integer=True),
                minutes=r.number("minutes", 1, minimum=1, integer=True),
            )
        kind = s.str("kind", "chat", choices=("chat", "embedding"))
        formats = frozenset.union(*(protocols.client_formats(r.provider.protocol, r.upstream_id) for r in routes))
        if kind == "embedding":
            for j, route in enumerate(routes):
                if not protocols.serves(route, "embeddings"):
                    where = f"models[{i}].routes[{j}]" if "routes" in s.table else f"models[{i}].provider"
                    raise ConfigError(f"{where}: protocol {route.provider.protocol} does not serve embeddings")
        first = routes[0]
        base = _rates(s, anthropic_defaults=protocols.anthropic_rates(first.provider.protocol, first.upstream_id))
        models[model_id] = Model(
            id=model_id,
            routes=routes,
            kind=kind,
            family=s.str("family", default_family, choices=("gpt", "claude", "other")),
            input_price=base.input,
            output_price=base.output,
            cached_input_price=base.cached_input,
            cache_write_price=base.cache_write,
            cache_write_1h_price=base.cache_write_1h,
            max_output_tokens=s.number("max_output_tokens", 8192, minimum=1, integer=True),
            rate_limit=rate,
            client_formats=formats,
            reasoning=s.bool("reasoning", False),
            **_price_tables(s, f"models[{i}]", [r.provider.protocol for r in routes]),
        )
    return models


PRICE_TABLE_KEYS = ("cache_write_1h_price", "long_context", "service_tiers", "tool_prices", "audio_input_price",
                    "audio_output_price", "image_output_price")
_RATE_KEYS = ("input_price", "output_price", "cached_input_price", "cache_write_price", "cache_write_1h_price")


def _rates(s: _Section, *, anthropic_defaults: bool = False) -> Rates:
    """A table's token rates. Anthropic bills 5-minute cache writes at 1.25x and 1-hour writes
    at 2x the input rate: an anthropic-protocol model's base rates default to that (rounded
    up to a whole nano-dollar a token)."""
    values = [s.price(key) for key in _RATE_KEYS]
    rates = Rates(*values)
    if anthropic_defaults and rates.input is not None:
        rates = attrs.evolve(
            rates,
            cache_write=rates.cache_write if rates.cache_write is not None else -(-rates.input * 5 // 4),
            cache_write_1h=rates.cache_write_1h if rates.cache_write_1h is not None else 2 * rates.input,
        )
    return rates


def _price_tables(s: _Section, where: str, protocols: list[str]) -> dict[str, Any]:
    """``long_context``, ``service_tiers``, ``tool_prices`` and the audio / image rates of a
    ``[[models]]`` table (docs/billing.md, "The price schedule"). No ``tool_prices`` key: the
    hosted tools of its routes' provider protocols at their list prices
    (:mod:`gatewayd.billing.tool_prices`)."""
    out: dict[str, Any] = {
        "audio_input_price": s.price("audio_input_price"),
        "audio_output_price": s.price("audio_output_price"),
        "image_output_price": s.price("image_output_price"),
    }
    if "long_context" in s.table:
        lc = _Section(s.table["long_context"], f"{where}.long_context")
        lc.unknown({"above_input_tokens", *_RATE_KEYS})
        out["long_context"] = LongContext(
            above_input_tokens=lc.number("above_input_tokens", minimum=1, integer=True), rates=_rates(lc))
    if "service_tiers" in s.table:
        tiers = s.table["service_tiers"]
        if not isinstance(tiers, dict):
            raise ConfigError(f"{where}.service_tiers: must be a table of tiers ({{ priority = {{ ... }} }})")
        out["service_tiers"] = {}
        for name, table in tiers.items():
            t = _Section(table, f"{where}.service_tiers.{name}")
            t.unknown(set(_RATE_KEYS))
            if name in ("auto", "default"):
                raise ConfigError(f"{where}.service_tiers.{name}: the default tier takes the model's own rates")
            out["service_tiers"][name] = _rates(t)
    if "tool_prices" in s.table:
        tools = s.table["tool_prices"]
        if not isinstance(tools, dict):
            raise ConfigError(f"{where}.tool_prices: must be a table of USD per call ({{ web_search = 0.01 }})")
        prices = {}
        for name, value in tools.items():
            key = f"{where}.tool_prices.{name}"
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"{key}: must be a non-negative number of USD per call")
            try:
                prices[name] = usd_to_nano(str(value))
            except MoneyError as e:
                raise ConfigError(f"{key}: {e}") from None
        out["tool_prices"] = prices
    else:
        out["tool_prices"] = default_tool_prices(protocols, s.bool("reasoning", False))
    return out


def read_model_aliases(raw: dict[str, Any], catalogue: dict[str, Any], models: dict[str, Model]) -> dict[str, str]:
    """The catalogue's aliases; the file's ``[[aliases]]`` over them when the catalogue is the default one."""
    aliases = read_aliases(catalogue, models)
    if catalogue is not raw and "aliases" in raw:
        aliases.update(read_aliases({"aliases": raw["aliases"]}, models))
    return aliases
