"""What a request's usage costs under its model's price schedule, line by line.

This is the one place that turns provider-reported usage (:class:`~gatewayd.formats.usage.Usage`)
into money. A :class:`Bill` has one :class:`Line` per billed dimension (tokens by rate, tool
calls by name), each already multiplied by the group's price ratio and rounded half up to a
whole nano-dollar, so the lines add up to the charge exactly: the usage row stores them and
``cost_nano`` is their sum.

Which rates apply:

- the tier the provider reports it served at (``usage.service_tier``) when the model has
  rates for it (``service_tiers``), else the base rates;
- the model's ``long_context`` rates for every token when the request's whole input is above
  their threshold (how Anthropic and Gemini bill); with a tier as well, each rate is the
  higher of the two (never below what either rule charges);
- a rate left None in a tier or long-context table keeps the base rate.

A dimension that has no price is charged at a documented fallback and named in
``Bill.unpriced`` (the relay logs it): requests that *ask* for an unpriced feature are
refused before the provider (:mod:`gatewayd.billing.features`), so this only happens when a
provider bills something the request did not show.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import attrs

from gatewayd.catalogue import Model, Rates
from gatewayd.formats.usage import Usage
from gatewayd.money import apply_ratio

DEFAULT_TIERS = frozenset({"auto", "default", "standard", "standard_only", "on_demand"})


@attrs.frozen
class Line:
    """One billed dimension: ``quantity`` tokens (or calls) at ``unit_nano`` each (before the
    group ratio); ``nano`` is what it charges, ratio applied."""

    dimension: str  # input | cached_input | cache_write_5m | cache_write_1h | output | audio_input
    # | audio_output | image_output | tool:<name>
    quantity: int
    unit_nano: int
    nano: int

    def doc(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class Bill:
    lines: tuple[Line, ...]
    tier: str | None = None  # the service tier whose rates applied (None: base rates)
    long_context: bool = False
    unpriced: tuple[str, ...] = ()  # dimensions charged at a fallback rate

    @property
    def total_nano(self) -> int:
        return sum(line.nano for line in self.lines)

    def doc(self) -> dict[str, Any]:
        """The usage row's breakdown (JSON): what the charge is made of."""
        return {"lines": [line.doc() for line in self.lines], "tier": self.tier, "long_context": self.long_context}


def _pick(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _overlay(base: Rates, over: Rates) -> Rates:
    """``over``'s rates where it sets them, ``base``'s elsewhere."""
    return Rates(*(o if o is not None else b for b, o in zip(attrs.astuple(base), attrs.astuple(over))))


def _higher(a: Rates, b: Rates) -> Rates:
    return Rates(*(_pick(x, y) for x, y in zip(attrs.astuple(a), attrs.astuple(b))))


def tier_name(tier: str | None) -> str | None:
    """A requested or reported tier, None when it is the default one."""
    return None if tier is None or tier in DEFAULT_TIERS else tier


def rates(model: Model, *, tier: str | None, long_context: bool) -> Rates | None:
    """The rates for a tier (None: default) and context length; None when the model has no
    rates for that tier."""
    base = model.base_rates
    chosen = base
    named = tier_name(tier)
    if named is not None:
        tiered = model.service_tiers.get(named)
        if tiered is None:
            return None
        chosen = _overlay(base, tiered)
    if long_context and model.long_context is not None:
        chosen = _higher(chosen, _overlay(base, model.long_context.rates))
    return chosen


def is_long_context(model: Model, input_tokens: int) -> bool:
    return model.long_context is not None and input_tokens > model.long_context.above_input_tokens


def bill(model: Model, usage: Usage, price_ratio: Fraction) -> Bill:
    """Price ``usage`` (see the module docstring for which rates apply)."""
    unpriced: list[str] = []
    long = is_long_context(model, usage.input_tokens)
    tier = tier_name(usage.service_tier)
    r = rates(model, tier=tier, long_context=long)
    if r is None:  # the provider served a tier we have no rates for: base rates, and said so
        unpriced.append(f"service_tier:{tier}")
        tier = None
        r = rates(model, tier=None, long_context=long)
        assert r is not None
    input_rate = r.input or 0
    output_rate = r.output or 0
    lines: list[Line] = []

    def add(dimension: str, quantity: int, unit: int | None, fallback: int) -> None:
        if quantity <= 0:
            return
        if unit is None:
            unpriced.append(dimension)
            unit = fallback
        lines.append(Line(dimension, quantity, unit, apply_ratio(quantity * unit, price_ratio)))

    writes_1h = min(usage.cache_write_1h_tokens, usage.cache_write_tokens)
    audio_in = min(usage.audio_input_tokens, usage.uncached_input_tokens)
    add("input", usage.uncached_input_tokens - audio_in, input_rate, 0)
    add("audio_input", audio_in, model.audio_input_price, input_rate)
    add("cached_input", usage.cached_tokens, r.cached_input if r.cached_input is not None else input_rate, 0)
    # a model with no cache-write rate is charged the input rate for writes (OpenAI and Gemini
    # report none); a 1-hour write without a rate takes Anthropic's 2x input
    add("cache_write_5m", usage.cache_write_tokens - writes_1h,
        r.cache_write if r.cache_write is not None else input_rate, 0)
    add("cache_write_1h", writes_1h, r.cache_write_1h, 2 * input_rate)
    audio_out = min(usage.audio_output_tokens, usage.output_tokens)
    image_out = min(usage.image_output_tokens, usage.output_tokens - audio_out)
    add("output", usage.output_tokens - audio_out - image_out, output_rate, 0)
    add("audio_output", audio_out, model.audio_output_price, output_rate)
    add("image_output", image_out, model.image_output_price, output_rate)
    for name, count in usage.tool_calls:
        add(f"tool:{name}", count, model.tool_prices.get(name), 0)
    return Bill(tuple(lines), tier=tier, long_context=long, unpriced=tuple(unpriced))
