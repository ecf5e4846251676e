"""The catalogue's values: providers, the routes to a model, and the models clients call.

Frozen values, made once by ``gatewayd.config`` from the config file (or the embedded
default catalogue) and read by every request. They live apart from the loader so that the
protocol adapters (``gatewayd.providers``), which the loader asks about each protocol, can
use them without importing the loader back.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

__all__ = ["LongContext", "Model", "ModelRoute", "Provider", "RateLimit", "Rates"]


@attrs.frozen
class Provider:
    """A ``[[providers]]`` table. ``settings`` are the keys only its protocol takes (Azure's
    ``api_version`` ...), read and validated by that protocol's adapter
    (``gatewayd.providers``), so adding a protocol adds no field here."""

    name: str
    protocol: str  # a key of gatewayd.providers.ADAPTERS: "openai" | "anthropic" | ...
    base_url: str
    api_key: str | None
    settings: Mapping[str, Any] = attrs.field(factory=dict, hash=False)  # compared, not hashed: a dict
    # the default catalogue's provider whose ``api_key_env`` names an unset variable: left out
    # (its routes are never planned, its models unlisted and refused saying so); None: usable
    missing_key_env: str | None = None

    @property
    def usable(self) -> bool:
        return self.missing_key_env is None


@attrs.frozen
class ModelRoute:
    """One way to reach a model: a provider, the provider's id for it, and where it stands
    among the model's other routes (higher priority first; weight shares equal priorities).
    ``auto_cache``: the gateway places prompt-cache breakpoints in requests it translates to
    this route's Anthropic Messages (on by default for routes that serve Claude).
    ``carry_cache_markers``: a chat client's own ``cache_control`` markers go through the
    translation too; the spec says they do not, so only where the operator set ``auto_cache =
    true`` themselves (issue 36), never by the default."""

    provider: Provider
    upstream_id: str
    priority: int = 0
    weight: int = 1
    auto_cache: bool = False
    carry_cache_markers: bool = False

    @property
    def usable(self) -> bool:
        """False when its provider was left out (an unset key variable): never planned."""
        return self.provider.usable

    @property
    def name(self) -> str:
        """``provider/upstream_id``: how the route is named in logs, health and ``gatewayctl routes``."""
        return f"{self.provider.name}/{self.upstream_id}"


@attrs.frozen
class RateLimit:
    requests: int
    minutes: int


@attrs.frozen
class Rates:
    """One set of token prices in nano-dollars a token; None means not priced.

    ``cached_input`` falls back to ``input``; the cache-write rates have no fallback here:
    the config loader fills in Anthropic's published defaults for anthropic-protocol models
    (1.25x input for 5-minute writes, 2x for 1-hour writes) and a model without them that
    reports cache writes is charged the input rate for 5-minute writes and refused 1-hour
    writes (``unpriced_feature``)."""

    input: int | None
    output: int | None
    cached_input: int | None = None
    cache_write: int | None = None
    cache_write_1h: int | None = None


@attrs.frozen
class LongContext:
    """Anthropic's and Gemini's long-context pricing: when a request's input is above
    ``above_input_tokens``, *all* of its tokens take ``rates`` (a rate left None there
    keeps the model's base rate)."""

    above_input_tokens: int
    rates: Rates


@attrs.frozen
class Model:
    """A catalogue entry. Prices are nano-dollars per token (``tool_prices``: nano-dollars
    a call); None means not priced. :mod:`gatewayd.billing.pricing` is the one place that
    reads them to price a request."""

    id: str
    routes: tuple[ModelRoute, ...]  # at least one; highest priority first
    kind: str  # "chat" | "embedding"
    family: str  # "gpt" (upstream speaks /v1/responses) | "claude" | "other"
    input_price: int | None
    output_price: int | None
    cached_input_price: int | None
    cache_write_price: int | None
    max_output_tokens: int
    rate_limit: RateLimit | None
    # may reason without showing it, whatever the request says (o-series, GPT-5, Gemini 2.5):
    # a stream cut before its usage came is charged the whole output allowance (billing/cut.py)
    reasoning: bool = False
    cache_write_1h_price: int | None = None
    long_context: LongContext | None = None
    # ``service_tier`` values other than auto/default -> the rates of that tier (a rate left
    # None keeps the base rate); a tier not named here is refused
    service_tiers: Mapping[str, Rates] = attrs.field(factory=dict, hash=False)
    tool_prices: Mapping[str, int] = attrs.field(factory=dict, hash=False)  # tool name -> nano a call
    audio_input_price: int | None = None  # None: audio input is refused
    audio_output_price: int | None = None
    image_output_price: int | None = None
    # client formats ("chat", "messages", "responses", "embeddings") at least one route serves,
    # from the adapter table (gatewayd.providers); filled in at load time
    client_formats: frozenset[str] = frozenset()
    created: int = 1_735_689_600  # 2025-01-01: a stable value for model listings

    @property
    def base_rates(self) -> Rates:
        return Rates(self.input_price, self.output_price, self.cached_input_price, self.cache_write_price,
                     self.cache_write_1h_price)

    @property
    def provider(self) -> Provider:
        """The first route's provider (the one listings name as the owner)."""
        return self.routes[0].provider

    @property
    def upstream_id(self) -> str:
        return self.routes[0].upstream_id

    @property
    def dual_format(self) -> bool:
        """The spec's dual-format model: callable on /v1/messages too (some route serves that format)."""
        return "messages" in self.client_formats

    @property
    def priced(self) -> bool:
        if self.kind == "embedding":
            return self.input_price is not None
        return self.input_price is not None and self.output_price is not None
