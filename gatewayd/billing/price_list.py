"""A model's price schedule as flat fields, and community price lists converted to it.

Pure code (no I/O): the daemon uses it to merge the prices file over the catalogue and to
describe a model's schedule (``gatewayctl prices show``); ``gatewayctl prices import``
uses it to turn LiteLLM's ``model_prices_and_context_window.json`` into a diff.

**Fields.** A schedule is a flat mapping from a field path to an integer, so that a diff, the
prices file and "where did this price come from" all speak of the same things:

=============================================  ==============================================
``input_price`` ... ``cache_write_1h_price``   nano-dollars a token (the model's base rates)
``audio_input_price``, ``audio_output_price``,  nano-dollars a token
``image_output_price``
``long_context.above_input_tokens``             tokens
``long_context.<rate>``                         nano-dollars a token
``service_tiers.<tier>.<rate>``                 nano-dollars a token
``tool_prices.<name>``                          nano-dollars a call
``max_output_tokens``                           tokens
=============================================  ==============================================

**LiteLLM's list.** Its prices are floats in USD a token (``3e-06``). Each is read as the
decimal it was written as and multiplied by 1e9; a price that is not a whole nano-dollar a
token (``1.25e-08`` is 12.5 nano) is **rounded up** to the next nano-dollar, never down, so an
imported price never charges less than the list says, and the diff says "rounded up from
12.5". Key names follow LiteLLM's own rules: a base rate (``input_cost_per_token``,
``output_cost_per_token``, ``cache_read_input_token_cost``, ``cache_creation_input_token_cost``,
``cache_creation_input_token_cost_above_1hr``), optionally followed by ``_above_<N>k_tokens``
(long context: above N thousand input tokens) and/or ``_priority`` / ``_flex`` (service tiers).
A rate for a tier *and* long context at once has no place in our schedule (``billing.pricing``
takes the higher of the tier's and the long-context rate instead) and is listed as not imported,
as is every other cost key we cannot represent (batch prices, per-image or per-pixel prices, ...).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any, Iterable, Mapping

import attrs

from gatewayd.catalogue import LongContext, Model, Rates

__all__ = [
    "CatalogueModel", "Change", "Converted", "PriceImport", "PriceListError", "check_field", "convert_entry",
    "field_unit", "import_price_list", "schedule", "usd_text", "with_prices",
]

RATE_FIELDS = ("input_price", "output_price", "cached_input_price", "cache_write_price", "cache_write_1h_price")
_RATE_ATTR = dict(zip(RATE_FIELDS, ("input", "output", "cached_input", "cache_write", "cache_write_1h")))
EXTRA_TOKEN_FIELDS = ("audio_input_price", "audio_output_price", "image_output_price")
TOP_FIELDS = (*RATE_FIELDS, *EXTRA_TOKEN_FIELDS, "max_output_tokens")
DEFAULT_TIER_NAMES = frozenset({"auto", "default"})

MAX_NANO_PER_TOKEN = 10**9  # 1 USD a token: money.MAX_PRICE_PER_MILLION
MAX_NANO_PER_CALL = 10**12  # 1,000 USD a call
MAX_TOKENS = 10**12  # config.MAX_NUMBER
_TOOL_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


class PriceListError(ValueError):
    """One line for the operator: which entry and key of the price list, what is wrong."""


# --------------------------------------------------------------------------- fields


def field_unit(field: str) -> str:
    """``"token"`` (nano-dollars a token), ``"call"`` (nano-dollars a call) or ``"tokens"`` (a count)."""
    if field in ("max_output_tokens", "long_context.above_input_tokens"):
        return "tokens"
    if field.startswith("tool_prices."):
        return "call"
    return "token"


def usd_text(field: str, value: int | None) -> str | None:
    """A field's value in the config file's units, exact: USD per 1M tokens for a rate (3000 nano
    a token -> ``"3"``), USD for a tool call; None for a token count (or no value)."""
    unit = field_unit(field)
    if value is None or unit == "tokens":
        return None
    amount = Decimal(value) / (1000 if unit == "token" else 10**9)
    return format(amount.normalize(), "f") if amount else "0"


def check_field(field: str, value: Any) -> None:
    """Raise :class:`PriceListError` unless ``field`` is a schedule field and ``value`` fits it."""
    parts = field.split(".")
    if parts[0] in TOP_FIELDS and len(parts) == 1:
        pass
    elif parts[0] == "long_context" and len(parts) == 2 and parts[1] in (*RATE_FIELDS, "above_input_tokens"):
        pass
    elif parts[0] == "service_tiers" and len(parts) == 3 and parts[2] in RATE_FIELDS and parts[1]:
        if parts[1] in DEFAULT_TIER_NAMES:
            raise PriceListError(f"{field}: the default tier takes the model's own rates")
    elif parts[0] == "tool_prices" and len(parts) == 2 and _TOOL_NAME.fullmatch(parts[1]):
        pass
    else:
        raise PriceListError(f"{field}: not a price schedule field")
    if isinstance(value, bool) or not isinstance(value, int):
        raise PriceListError(f"{field}: must be a whole number (got {value!r})")
    unit = field_unit(field)
    high = {"tokens": MAX_TOKENS, "call": MAX_NANO_PER_CALL, "token": MAX_NANO_PER_TOKEN}[unit]
    low = 1 if unit == "tokens" else 0
    if not low <= value <= high:
        raise PriceListError(f"{field}: must be from {low} to {high} (got {value})")


def schedule(model: Model) -> dict[str, int]:
    """Every price the model has (None = unpriced is left out), as flat fields."""
    out: dict[str, int] = {}
    for field in TOP_FIELDS:
        value = getattr(model, field)
        if value is not None:
            out[field] = value
    if model.long_context is not None:
        out["long_context.above_input_tokens"] = model.long_context.above_input_tokens
        out.update(_rate_fields("long_context.", model.long_context.rates))
    for tier, rates in sorted(model.service_tiers.items()):
        out.update(_rate_fields(f"service_tiers.{tier}.", rates))
    for name, nano in sorted(model.tool_prices.items()):
        out[f"tool_prices.{name}"] = nano
    return out


def _rate_fields(prefix: str, rates: Rates) -> dict[str, int]:
    return {prefix + f: getattr(rates, _RATE_ATTR[f]) for f in RATE_FIELDS if getattr(rates, _RATE_ATTR[f]) is not None}


def with_prices(model: Model, fields: Mapping[str, int]) -> Model:
    """``model`` with ``fields`` set (each checked); the fields not named keep their values.

    Long-context rates on a model that has no long-context threshold need
    ``long_context.above_input_tokens`` among ``fields``."""
    top: dict[str, Any] = {}
    long_fields: dict[str, int] = {}
    tiers = dict(model.service_tiers)
    tools = dict(model.tool_prices)
    tier_fields: dict[str, dict[str, int]] = {}
    for field, value in fields.items():
        check_field(field, value)
        parts = field.split(".")
        if len(parts) == 1:
            top[field] = value
        elif parts[0] == "long_context":
            long_fields[parts[1]] = value
        elif parts[0] == "service_tiers":
            tier_fields.setdefault(parts[1], {})[_RATE_ATTR[parts[2]]] = value
        else:
            tools[parts[1]] = value
    for tier, values in tier_fields.items():
        tiers[tier] = attrs.evolve(tiers.get(tier, Rates(None, None)), **values)
    long_context = model.long_context
    if long_fields:
        threshold = long_fields.pop("above_input_tokens", None)
        if threshold is None:
            if long_context is None:
                raise PriceListError("long_context: rates without long_context.above_input_tokens, on a model that "
                                     "has no long-context threshold")
            threshold = long_context.above_input_tokens
        rates = long_context.rates if long_context is not None else Rates(None, None)
        long_context = LongContext(
            above_input_tokens=threshold,
            rates=attrs.evolve(rates, **{_RATE_ATTR[f]: v for f, v in long_fields.items()}))
    return attrs.evolve(model, **top, long_context=long_context, service_tiers=tiers, tool_prices=tools)


# --------------------------------------------------------------------------- LiteLLM entries

_BASES = (  # longest first: "cache_creation_input_token_cost" is a prefix of the 1-hour key
    ("cache_creation_input_token_cost_above_1hr", "cache_write_1h_price"),
    ("cache_creation_input_token_cost", "cache_write_price"),
    ("cache_read_input_token_cost", "cached_input_price"),
    ("input_cost_per_token", "input_price"),
    ("output_cost_per_token", "output_price"),
)
_RATE_KEY = re.compile("(?P<base>" + "|".join(base for base, _ in _BASES) + ")"
                       r"(?:_above_(?P<k>\d+)k_tokens)?(?:_(?P<tier>priority|flex))?")
_PER_TOKEN_EXTRAS = {
    "input_cost_per_audio_token": "audio_input_price",
    "output_cost_per_audio_token": "audio_output_price",
    "output_cost_per_image_token": "image_output_price",
}
_PER_CALL = {  # key -> (tool, calls the price is for)
    "code_interpreter_cost_per_session": ("code_interpreter", 1),
    "file_search_cost_per_1k_calls": ("file_search", 1000),
}
_NANO_PER_USD = Decimal(10**9)


@attrs.frozen
class Converted:
    """One LiteLLM entry in our fields. ``notes``: field -> why its value is not the list's
    exact number; ``ignored``: the entry's cost keys that have no place in our schedule."""

    fields: Mapping[str, int]
    notes: Mapping[str, str] = attrs.field(factory=dict)
    ignored: tuple[str, ...] = ()


def _usd(entry_key: str, key: str, value: Any) -> Decimal:
    where = f"{entry_key!r}.{key}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PriceListError(f"price list entry {where}: must be a number of USD (got {_show(value)})")
    if isinstance(value, float) and not math.isfinite(value):
        raise PriceListError(f"price list entry {where}: must be a finite number (got {value})")
    if value < 0:
        raise PriceListError(f"price list entry {where}: must not be negative (got {value})")
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _nano(entry_key: str, key: str, usd: Decimal, *, per: int = 1, limit: int) -> tuple[int, str | None]:
    """Whole nano-dollars, rounded up; the note says from what when it was not whole."""
    exact = usd * _NANO_PER_USD / per
    nano = math.ceil(exact)
    if nano > limit:
        raise PriceListError(f"price list entry {entry_key!r}.{key}: {usd} USD is above the most a price may be")
    note = None if exact == nano else f"rounded up from {exact.normalize():f} nano-USD"
    return nano, note


def convert_entry(entry_key: str, entry: Any, *, embedding: bool = False, anthropic_defaults: bool = False
                  ) -> Converted:
    """A LiteLLM entry as our fields (see the module docstring). ``embedding``: only the input
    rate is read (an embedding model has no other). ``anthropic_defaults``: as the config file
    does for anthropic-protocol models, cache writes the entry has no price for are 1.25x (5 min)
    and 2x (1 h) the input rate."""
    if not isinstance(entry, dict):
        raise PriceListError(f"price list entry {entry_key!r}: must be an object (got {_show(entry)})")
    fields: dict[str, int] = {}
    notes: dict[str, str] = {}
    ignored: list[str] = []
    thresholds: dict[int, dict[str, str]] = {}  # k -> {field: key}

    def put(field: str, key: str, usd: Decimal, *, per: int = 1, limit: int = MAX_NANO_PER_TOKEN) -> None:
        nano, note = _nano(entry_key, key, usd, per=per, limit=limit)
        fields[field] = nano
        if note:
            notes[field] = note

    for key in sorted(entry):
        value = entry[key]
        match = _RATE_KEY.fullmatch(key)
        if match:
            base_field = dict(_BASES)[match["base"]]
            if embedding and base_field != "input_price":
                continue
            usd = _usd(entry_key, key, value)
            if match["k"] and match["tier"]:
                ignored.append(key)  # tier and long context at once: billing takes the higher of the two
            elif match["k"]:
                thresholds.setdefault(int(match["k"]), {})[base_field] = key
            elif match["tier"]:
                put(f"service_tiers.{match['tier']}.{base_field}", key, usd)
            else:
                put(base_field, key, usd)
        elif key in _PER_TOKEN_EXTRAS and not embedding:
            put(_PER_TOKEN_EXTRAS[key], key, _usd(entry_key, key, value))
        elif key in _PER_CALL and not embedding:
            tool, per = _PER_CALL[key]
            put(f"tool_prices.{tool}", key, _usd(entry_key, key, value), per=per, limit=MAX_NANO_PER_CALL)
        elif key == "search_context_cost_per_query" and not embedding:
            if not isinstance(value, dict) or not value:
                raise PriceListError(f"price list entry {entry_key!r}.{key}: must be an object of USD per query "
                                     f"by context size (got {_show(value)})")
            sizes = {size: _usd(entry_key, f"{key}.{size}", v) for size, v in value.items()}
            put("tool_prices.web_search", key, max(sizes.values()), limit=MAX_NANO_PER_CALL)
            if len(set(sizes.values())) > 1:
                notes["tool_prices.web_search"] = "the highest of the context sizes' prices"
        elif key == "max_output_tokens":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
                raise PriceListError(f"price list entry {entry_key!r}.{key}: must be a whole number of tokens "
                                     f"above 0 (got {_show(value)})")
            if not embedding:
                fields["max_output_tokens"] = value
        elif "cost" in key and not embedding:
            if key == "output_cost_per_reasoning_token":
                continue  # reasoning tokens are output tokens; compared below
            ignored.append(key)
    reasoning = entry.get("output_cost_per_reasoning_token")
    if reasoning is not None and not embedding:
        usd = _usd(entry_key, "output_cost_per_reasoning_token", reasoning)
        as_nano = _nano(entry_key, "output_cost_per_reasoning_token", usd, limit=MAX_NANO_PER_TOKEN)[0]
        if as_nano != fields.get("output_price"):
            ignored.append("output_cost_per_reasoning_token")  # gatewayd bills reasoning at the output rate
    if thresholds:
        lowest = min(thresholds)
        for k in sorted(thresholds):
            if k != lowest:
                ignored.extend(thresholds[k].values())  # one long-context threshold a model
        fields["long_context.above_input_tokens"] = lowest * 1000
        for field, key in thresholds[lowest].items():
            put(f"long_context.{field}", key, _usd(entry_key, key, entry[key]))
    if anthropic_defaults and "input_price" in fields:
        if "cache_write_price" not in fields:
            fields["cache_write_price"] = -(-fields["input_price"] * 5 // 4)
            notes["cache_write_price"] = "1.25x input (Anthropic's rule; the list has no price)"
        if "cache_write_1h_price" not in fields:
            fields["cache_write_1h_price"] = 2 * fields["input_price"]
            notes["cache_write_1h_price"] = "2x input (Anthropic's rule; the list has no price)"
    return Converted(fields=fields, notes=notes, ignored=tuple(sorted(ignored)))


# --------------------------------------------------------------------------- matching and the diff

PROTOCOL_PROVIDERS = {  # our protocol -> LiteLLM's provider name for that API
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gemini",
    "azure-openai": "azure",
}


@attrs.frozen
class CatalogueModel:
    """What an import needs to know of one catalogue model: the names a price list may know it
    by, the providers it is reached through, and its schedule as it stands."""

    id: str
    kind: str
    names: tuple[str, ...]  # the id, then each route's upstream id
    providers: frozenset[str]  # our provider names and LiteLLM's names for their protocols
    anthropic: bool  # first route speaks the Anthropic protocol (cache-write defaults)
    fields: Mapping[str, int]

    @classmethod
    def of(cls, model: Model) -> "CatalogueModel":
        providers = set()
        for route in model.routes:
            providers.add(route.provider.name)
            providers.add(PROTOCOL_PROVIDERS.get(route.provider.protocol, route.provider.protocol))
        names = tuple(dict.fromkeys([model.id, *(r.upstream_id for r in model.routes)]))
        return cls(id=model.id, kind=model.kind, names=names,
                   providers=frozenset(providers), anthropic=model.routes[0].provider.protocol == "anthropic",
                   fields=schedule(model))

    def doc(self) -> dict[str, Any]:
        return {"model": self.id, "kind": self.kind, "names": list(self.names), "providers": sorted(self.providers),
                "anthropic": self.anthropic, "fields": dict(self.fields)}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "CatalogueModel":
        return cls(id=doc["model"], kind=doc["kind"], names=tuple(doc["names"]), providers=frozenset(doc["providers"]),
                   anthropic=bool(doc["anthropic"]), fields=dict(doc["fields"]))


@attrs.frozen
class Change:
    model: str
    field: str
    old: int | None  # None: the model had no such price
    new: int
    note: str | None = None

    def doc(self) -> dict[str, Any]:
        return {"model": self.model, "field": self.field, "unit": field_unit(self.field), "old": self.old,
                "new": self.new, "old_usd": usd_text(self.field, self.old), "new_usd": usd_text(self.field, self.new),
                "note": self.note}


@attrs.frozen
class PriceImport:
    """What importing a price list would change. ``matched``: model -> the list's key used;
    ``missing``: catalogue models the list has no entry for (skipped); ``not_in_catalogue``:
    the list's keys that name no catalogue model (skipped); ``ignored``: model -> the entry's
    cost keys that have no place in our schedule."""

    changes: tuple[Change, ...]
    matched: Mapping[str, str]
    missing: tuple[str, ...]
    not_in_catalogue: tuple[str, ...]
    ignored: Mapping[str, tuple[str, ...]]

    def overlay(self) -> dict[str, dict[str, int]]:
        """The changed fields per model: what ``--apply`` sends to the daemon."""
        out: dict[str, dict[str, int]] = {}
        for change in self.changes:
            out.setdefault(change.model, {})[change.field] = change.new
        return out

    def doc(self) -> dict[str, Any]:
        return {"changes": [c.doc() for c in self.changes], "matched": dict(self.matched),
                "unchanged": sorted(set(self.matched) - {c.model for c in self.changes}),
                "missing": list(self.missing), "not_in_catalogue": list(self.not_in_catalogue),
                "ignored": {m: list(keys) for m, keys in self.ignored.items()}}


def _pick(model: CatalogueModel, doc: Mapping[str, Any], index: Mapping[str, list[str]]) -> str | None:
    """The list's key for ``model``: its id or an upstream id, bare or behind a provider prefix
    that is one of the model's providers (``anthropic/claude-...``; never a reseller's
    ``openrouter/...``). An entry whose ``litellm_provider`` is one of the model's providers is
    preferred, then a bare key, then the id over upstream ids."""
    ranked = []
    for position, name in enumerate(model.names):
        for key in index.get(name, ()):
            prefix = key[: -len(name) - 1] if key != name else None
            entry = doc[key]
            provider = entry.get("litellm_provider") if isinstance(entry, dict) else None
            if prefix is not None and prefix not in model.providers and provider not in model.providers:
                continue
            ranked.append((provider not in model.providers, prefix is not None, position, key))
    return min(ranked)[3] if ranked else None


def import_price_list(doc: Any, catalogue: Iterable[CatalogueModel]) -> PriceImport:
    """The diff that importing ``doc`` (LiteLLM's JSON, parsed) would make to ``catalogue``.
    Raises :class:`PriceListError` for a list that is not an object of entries, or for a
    bad price in an entry a catalogue model uses (entries of other models are not read)."""
    if not isinstance(doc, dict):
        raise PriceListError(f"the price list must be a JSON object of model entries (got {type(doc).__name__})")
    models = list(catalogue)
    wanted = {name for m in models for name in m.names}
    index: dict[str, list[str]] = {}
    for key in doc:
        if key in wanted:
            index.setdefault(key, []).append(key)
        if "/" in key and key.split("/", 1)[1] in wanted:
            index.setdefault(key.split("/", 1)[1], []).append(key)
    changes: list[Change] = []
    matched: dict[str, str] = {}
    ignored: dict[str, tuple[str, ...]] = {}
    missing: list[str] = []
    used: set[str] = set()
    for model in models:
        key = _pick(model, doc, index)
        if key is None:
            missing.append(model.id)
            continue
        matched[model.id] = key
        converted = convert_entry(key, doc[key], embedding=model.kind == "embedding",
                                  anthropic_defaults=model.anthropic)
        if converted.ignored:
            ignored[model.id] = converted.ignored
        for field in sorted(converted.fields):
            new = converted.fields[field]
            old = model.fields.get(field)
            if old != new:
                changes.append(Change(model.id, field, old, new, converted.notes.get(field)))
    for model in models:
        for name in model.names:
            used.update(index.get(name, ()))
    skipped = sorted(k for k in doc if k not in used and k != "sample_spec")
    return PriceImport(changes=tuple(changes), matched=matched, missing=tuple(missing),
                       not_in_catalogue=tuple(skipped), ignored=ignored)
