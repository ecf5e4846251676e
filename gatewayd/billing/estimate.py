"""Cost: the up-front estimate a request is held for, and the exact charge from real usage.

Both are integer nano-dollars. The estimate counts the prompt's text offline (plus a
flat allowance per image or document) and assumes the whole output allowance is used:
the request's own max, else the model's ``max_output_tokens``. A lower ``max_tokens``
therefore lowers the hold, as the spec promises.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from gatewayd import tokens
from gatewayd.config import Model
from gatewayd.formats.usage import Usage
from gatewayd.money import apply_ratio

IMAGE_TOKENS = 1_600  # a large image in either vendor's accounting
DOCUMENT_TOKENS = 6_000  # a few PDF pages; the hold only needs to be roughly right
PER_MESSAGE_TOKENS = 4

_SKIP_KEYS = frozenset({"data", "image_url", "file_data", "url", "signature", "encrypted_content"})
_MEDIA_TYPES = frozenset({"image_url", "image", "input_image"})
_DOCUMENT_TYPES = frozenset({"document", "file", "input_file"})


def _walk(value: Any, texts: list[str], counts: list[int]) -> None:
    if isinstance(value, str):
        texts.append(value)
    elif isinstance(value, list):
        for item in value:
            _walk(item, texts, counts)
    elif isinstance(value, dict):
        kind = value.get("type")
        if kind in _MEDIA_TYPES:
            counts[0] += IMAGE_TOKENS
            return
        if kind in _DOCUMENT_TYPES:
            counts[0] += DOCUMENT_TOKENS
            return
        for k, v in value.items():
            if k not in _SKIP_KEYS:
                _walk(v, texts, counts)


def estimate_input_tokens(body: dict, fields: tuple[str, ...] = ("messages", "system", "tools", "input", "instructions")) -> int:
    """Prompt tokens as the offline tokenizer sees the request's text fields."""
    texts: list[str] = []
    counts = [0]
    messages = 0
    for field in fields:
        value = body.get(field)
        if value is None:
            continue
        if field in ("messages", "input") and isinstance(value, list):
            messages += len(value)
        _walk(value, texts, counts)
    return tokens.count("\n".join(texts)) + counts[0] + PER_MESSAGE_TOKENS * messages


def requested_output_tokens(body: dict, model: Model, fields=("max_completion_tokens", "max_tokens", "max_output_tokens")) -> int:
    for field in fields:
        value = body.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return model.max_output_tokens


def estimate_cost(model: Model, input_tokens: int, output_tokens: int, price_ratio: Fraction) -> int:
    usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    return charge(model, usage, price_ratio)


def charge(model: Model, usage: Usage, price_ratio: Fraction) -> int:
    """Uncached input at the input rate, cache reads at the cached rate, cache writes at the
    cache-write rate (else the input rate), output at the output rate; then the group ratio."""
    input_price = model.input_price or 0
    output_price = model.output_price or 0
    cached_price = model.cached_input_price if model.cached_input_price is not None else input_price
    write_price = model.cache_write_price if model.cache_write_price is not None else input_price
    nano = (
        usage.uncached_input_tokens * input_price
        + usage.cached_tokens * cached_price
        + usage.cache_write_tokens * write_price
        + usage.output_tokens * output_price
    )
    return apply_ratio(nano, price_ratio)
