"""Integer money: exact conversions, exact charges, no floats."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gatewayd.billing.estimate import charge, estimate_cost, estimate_input_tokens
from gatewayd.billing.features import chat_asks
from gatewayd.config import load_config
from gatewayd.formats.usage import Usage, from_chat, from_messages, merge_messages_stream
from gatewayd.money import MoneyError, apply_ratio, format_usd, price_per_million_to_nano_per_token, usd_to_nano


@pytest.mark.parametrize("text,nano", [("10", 10_000_000_000), ("10.50", 10_500_000_000), ("0.000000001", 1),
                                       ("3.00", 3_000_000_000)])
def test_usd_to_nano(text, nano):
    assert usd_to_nano(text) == nano


@pytest.mark.parametrize("text", ["abc", "1e400000", "0.0000000001", "NaN", "inf", ""])
def test_usd_to_nano_refuses(text):
    with pytest.raises(MoneyError):
        usd_to_nano(text)


@pytest.mark.parametrize("price,nano", [(0.24, 240), (5.5, 5500), (33, 33000), (0.275, 275), (6.875, 6875),
                                        (0.001, 1), (0, 0)])
def test_prices_are_exact(price, nano):
    assert price_per_million_to_nano_per_token(price) == nano


def test_apply_ratio_rounds_half_up_in_integers():
    assert apply_ratio(1000, Fraction(1)) == 1000
    assert apply_ratio(5, Fraction(1, 2)) == 3
    assert apply_ratio(3, Fraction(1, 2)) == 2
    assert apply_ratio(10**18 + 1, Fraction(3, 4)) == (3 * (10**18 + 1) * 2 + 4) // 8


def test_format_usd():
    assert format_usd(1_234_567) == "$0.001235"
    assert format_usd(-2_000_000_000) == "-$2.000000"
    assert format_usd(None) == "-"


CONFIG = load_config(None, environ={})


def test_charge_uses_every_rate():
    sonnet = CONFIG.models["claude-sonnet-4-5"]  # 3000 / 15000 / cached 300 / write 3750
    usage = Usage(input_tokens=1000 + 200 + 100, output_tokens=50, cached_tokens=200, cache_write_tokens=100)
    assert charge(sonnet, usage, Fraction(1)) == 1000 * 3000 + 200 * 300 + 100 * 3750 + 50 * 15000
    assert charge(sonnet, usage, Fraction(1, 2)) == (1000 * 3000 + 200 * 300 + 100 * 3750 + 50 * 15000) // 2


def test_charge_without_cached_rate_uses_input_rate():
    import attrs

    model = CONFIG.models["gpt-4.1"]  # 2000 / 8000 / cached 500
    usage = Usage(input_tokens=10, output_tokens=1, cached_tokens=4)
    assert charge(model, usage, Fraction(1)) == 6 * 2000 + 4 * 500 + 8000
    bare = attrs.evolve(model, cached_input_price=None)
    assert charge(bare, usage, Fraction(1)) == 10 * 2000 + 8000


def test_estimate_scales_with_max_tokens():
    model = CONFIG.models["gpt-4.1"]
    body = {"messages": [{"role": "user", "content": "hello world"}]}
    assert chat_asks(body, model).output_tokens == model.max_output_tokens
    assert chat_asks({**body, "max_tokens": 10}, model).output_tokens == 10
    assert chat_asks({**body, "max_completion_tokens": 7}, model).output_tokens == 7
    assert chat_asks({**body, "max_tokens": 10**6}, model).output_tokens == model.max_output_tokens
    assert chat_asks({**body, "max_tokens": 10, "n": 3}, model).output_tokens == 30
    tokens_in = estimate_input_tokens(body, "chat")
    assert 2 <= tokens_in <= 20
    assert estimate_cost(model, tokens_in, 10, Fraction(1)) < estimate_cost(model, tokens_in, 1000, Fraction(1))


def test_estimate_counts_images_and_skips_base64():
    small = estimate_input_tokens({"messages": [{"role": "user", "content": "x"}]}, "chat")
    with_image = estimate_input_tokens({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "x"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 100_000}}]}]}, "chat")
    assert 1000 < with_image - small < 3000


def test_usage_normalisation():
    assert from_chat({"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}) \
        == Usage(10, 3, 4, 0)
    messages = from_messages({"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 7,
                              "cache_creation_input_tokens": 11})
    assert messages == Usage(23, 2, 7, 11) and messages.uncached_input_tokens == 5
    start = from_messages({"input_tokens": 5, "output_tokens": 1})
    assert merge_messages_stream(start, {"output_tokens": 40}) == Usage(5, 40, 0, 0)
    assert from_chat(None) is None and from_chat({"prompt_tokens": -3}) == Usage(0, 0, 0, 0)


def test_estimate_reads_tool_schemas_whose_type_is_a_list():
    """``"type": ["string", "null"]`` in a tool schema is an ordinary nullable property (strict
    mode needs it); it once made the estimate raise, a 500 on every route."""
    body = {"messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"units": {"type": ["string", "null"], "description": "unit"}}}}}]}
    assert estimate_input_tokens(body, "chat") > estimate_input_tokens({"messages": body["messages"]}, "chat")
