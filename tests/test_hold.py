"""The hold covers all the provider can bill for a body (issue 19, points 1 and 2).

One test per row of the issue's table of exploits that the request side closes, then a
property: for random bodies per format, the hold is at least the bill of any usage the
provider could legally produce within the caps sent upstream, at the worst rates that
apply, minus the input tolerance.
"""

from __future__ import annotations

from fractions import Fraction

import attrs
import httpx
import orjson
import pytest
from hypothesis import given, settings, strategies as st

from gatewayd.billing.estimate import HOLD_TOLERANCE, estimate_input_tokens, hold_nano, route_hold
from gatewayd.billing.features import (
    DEFAULT_MAX_TOOL_USES, UnpricedFeature, chat_asks, check_cap_fields, messages_asks,
    responses_asks,
)
from gatewayd.billing.pricing import bill
from gatewayd.catalogue import LongContext, Rates
from gatewayd.config import load_config
from gatewayd.errors import BodyError
from gatewayd.formats import usage as usage_mod
from gatewayd.formats.raw_json import set_top_level_fields
from gatewayd.formats.usage import Usage
from gatewayd.providers import builder
from gatewayd.providers.base import Call

CONFIG = load_config(None, environ={})
ONE = Fraction(1)


class _Upstream:
    """Builds the request the relay would send, without sending it."""

    def post(self, url, body, headers, *, stream):
        return httpx.Request("POST", url, content=body, headers=headers)


def build(fmt: str, model_id: str, body: dict, raw: bytes | None = None):
    model = CONFIG.models[model_id]
    raw = raw if raw is not None else orjson.dumps(body)
    call = Call(client_format=fmt, model=model, body=body, raw=raw, stream=bool(body.get("stream")))
    target = model.routes[0]
    return builder(fmt, target.provider.protocol)(call, target, _Upstream())


def sent(route) -> dict:
    return orjson.loads(route.request.content)


USER = [{"role": "user", "content": "hello there"}]


# -- caps -----------------------------------------------------------------------------------


def test_n_multiplies_the_output_allowance():
    """Row 1: n=128 with max_tokens 32768 was held for one choice."""
    route = build("chat", "gpt-4.1", {"model": "gpt-4.1", "messages": USER, "n": 128, "max_tokens": 32768})
    assert route.output_tokens == 128 * 32768
    model = CONFIG.models["gpt-4.1"]
    held = route_hold(model, route, ONE)
    worst = bill(model, Usage(input_tokens=route.input_tokens_estimate, output_tokens=128 * 32768), ONE).total_nano
    assert held >= worst > 30 * 10**9  # over $30: the $33.55 of the issue is held, not charged after


def test_messages_refuses_a_cap_field_it_does_not_have():
    """Row 2: /v1/messages with max_tokens 60000 and max_completion_tokens 1."""
    with pytest.raises(BodyError) as caught:
        check_cap_fields({"max_tokens": 60000, "max_completion_tokens": 1}, "messages")
    assert caught.value.param == "max_completion_tokens"
    for fmt, field in (("responses", "max_tokens"), ("responses", "max_completion_tokens"), ("chat", "max_output_tokens"),
                       ("messages", "max_output_tokens"), ("chat", "maxOutputTokens")):
        with pytest.raises(BodyError):
            check_cap_fields({field: 5}, fmt)


def test_chat_caps_that_disagree_are_refused_and_agreeing_ones_pass():
    with pytest.raises(BodyError):
        check_cap_fields({"max_tokens": 10, "max_completion_tokens": 11}, "chat")
    assert check_cap_fields({"max_tokens": 10, "max_completion_tokens": 10}, "chat") == 10


@pytest.mark.parametrize("fmt,model_id,field", [
    ("chat", "gpt-4.1", "max_tokens"), ("responses", "gpt-4.1", "max_output_tokens"),
    ("messages", "claude-sonnet-4-5", "max_tokens"),
])
def test_a_cap_above_the_model_maximum_is_lowered_in_the_bytes(fmt, model_id, field):
    """LiteLLM's SDK and the Vercel AI SDK send 128000 for ids they do not know."""
    model = CONFIG.models[model_id]
    key = "input" if fmt == "responses" else "messages"
    body = {"model": model_id, key: USER if fmt != "responses" else "hello", field: 128000}
    raw = orjson.dumps(body).replace(b'"model":', b'"model" :')  # the client's own spacing is kept
    route = build(fmt, model_id, body, raw)
    assert sent(route)[field] == model.max_output_tokens
    assert route.request.content == raw.replace(b"128000", str(model.max_output_tokens).encode())
    assert route.output_tokens == model.max_output_tokens


@pytest.mark.parametrize("fmt,model_id,field", [
    ("chat", "gpt-4.1", "max_completion_tokens"), ("chat", "deepseek-chat", "max_tokens"),
    ("responses", "gpt-4.1", "max_output_tokens"),
])
def test_without_a_cap_the_model_maximum_is_sent_upstream(fmt, model_id, field):
    key = "input" if fmt == "responses" else "messages"
    body = {"model": model_id, key: USER if fmt != "responses" else "hello"}
    route = build(fmt, model_id, body)
    raw = orjson.dumps(body)
    assert sent(route)[field] == CONFIG.models[model_id].max_output_tokens
    assert route.request.content.endswith(raw[1:])  # inserted first; the rest is the client's bytes


def test_translated_routes_send_and_hold_the_cap():
    gem = build("chat", "gemini-2.5-pro", {"model": "gemini-2.5-pro", "messages": USER})
    assert sent(gem)["generationConfig"]["maxOutputTokens"] == 65536 == gem.output_tokens
    claude = build("chat", "claude-sonnet-4-5", {"model": "claude-sonnet-4-5", "messages": USER, "max_tokens": 128000})
    assert sent(claude)["max_tokens"] == 64000 == claude.output_tokens


def test_set_top_level_fields_edits_bytes_or_gives_up():
    raw = b'{ "a": 1, "b": {"a": 2}, "m": "x" }'
    body = orjson.loads(raw)
    assert set_top_level_fields(raw, body, {"c": 5}) == b'{"c":5, "a": 1, "b": {"a": 2}, "m": "x" }'
    assert set_top_level_fields(raw, body, {"m": "y"}) == b'{ "a": 1, "b": {"a": 2}, "m": "y" }'
    assert set_top_level_fields(raw, body, {"a": 3}) is None  # "a" is also a nested key: re-encode
    raw = b'{"max_tokens": 128000, "x": [1]}'
    assert set_top_level_fields(raw, orjson.loads(raw), {"max_tokens": 64000}) == b'{"max_tokens": 64000, "x": [1]}'
    assert set_top_level_fields(b"{}", {}, {"k": 1}) == b'{"k":1}'


# -- billed input ---------------------------------------------------------------------------


def test_schemas_and_predictions_are_held():
    schema = {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object", "properties": {
        f"field_{i}": {"type": "string", "description": "a long description of the field " * 5} for i in range(50)}}}}
    bare = estimate_input_tokens({"messages": USER}, "chat")
    assert estimate_input_tokens({"messages": USER, "response_format": schema}, "chat") > bare + 2_000
    responses = {"input": "hi", "text": {"format": {"type": "json_schema", **schema["json_schema"]}}}
    assert estimate_input_tokens(responses, "responses") > 2_000
    predicted = "def f():\n    return 1\n" * 500
    route = build("chat", "gpt-4.1", {"model": "gpt-4.1", "messages": USER, "max_tokens": 100,
                                     "prediction": {"type": "content", "content": predicted}})
    assert route.asks.prediction_tokens > 3_000
    assert route.output_tokens == 100 + route.asks.prediction_tokens  # rejected predictions are billed as output
    assert route.input_tokens_estimate > route.asks.prediction_tokens


def test_images_are_held_as_each_provider_counts_them():
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "high"}}
    body = {"messages": [{"role": "user", "content": [image]}]}
    mini = build("chat", "gpt-4.1-mini", {"model": "gpt-4.1-mini", **body})
    assert mini.input_tokens_estimate >= 3_779  # 1,536 patches x 2.46 (gpt-4.1-nano's multiplier)
    gem = build("chat", "gemini-2.5-flash", {"model": "gemini-2.5-flash", **body})
    assert gem.input_tokens_estimate >= 4 * 4 * 258


# -- rates ----------------------------------------------------------------------------------


def test_a_priced_tier_is_held_at_its_rates_and_an_unpriced_one_refused():
    """Row 6: service_tier priority."""
    route = build("chat", "gpt-4.1", {"model": "gpt-4.1", "messages": USER, "service_tier": "priority",
                                     "max_tokens": 1000})
    model = CONFIG.models["gpt-4.1"]
    assert route_hold(model, route, ONE) >= 1000 * 14_000  # priority output rate
    with pytest.raises(UnpricedFeature) as caught:
        build("chat", "gpt-4.1", {"model": "gpt-4.1", "messages": USER, "service_tier": "scale"})
    assert caught.value.code == "unpriced_feature" and "scale" in caught.value.message
    for fine in ("auto", "default"):
        build("chat", "gpt-4.1", {"model": "gpt-4.1", "messages": USER, "service_tier": fine})
    build("messages", "claude-sonnet-4-5", {"model": "claude-sonnet-4-5", "messages": USER, "max_tokens": 5,
                                           "service_tier": "standard_only"})


def test_long_context_rates_when_the_input_could_cross_the_threshold():
    model = CONFIG.models["gemini-2.5-pro"]
    asks = chat_asks({"messages": USER, "max_tokens": 10}, model)
    near = int(200_000 / (1 + HOLD_TOLERANCE)) + 10  # could be above 200k once the estimate's error is added
    assert hold_nano(model, near, asks, ONE) >= near * 2_500 + 10 * 15_000
    assert hold_nano(model, 100_000, asks, ONE) < 100_000 * 2_500


def test_one_hour_cache_writes_are_held_at_their_rate_and_refused_without_one():
    """Row 4: cache_control ttl 1h."""
    body = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "x " * 3000, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]}
    route = build("messages", "claude-sonnet-4-5", body)
    assert route.asks.cache_1h
    model = CONFIG.models["claude-sonnet-4-5"]
    assert route_hold(model, route, ONE) >= route.input_tokens_estimate * 6_000  # 2x input
    bare = attrs.evolve(model, cache_write_1h_price=None)
    with pytest.raises(UnpricedFeature):
        from gatewayd.billing.features import require_prices
        require_prices(bare, messages_asks(body, bare))


def test_server_tools_are_bounded_upstream_and_their_fees_held():
    """Row 5: Anthropic web_search, Responses web_search / file_search / code_interpreter."""
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": USER,
            "tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    route = build("messages", "claude-sonnet-4-5", body)
    assert sent(route)["tools"][0]["max_uses"] == DEFAULT_MAX_TOOL_USES
    model = CONFIG.models["claude-sonnet-4-5"]
    assert route_hold(model, route, ONE) >= DEFAULT_MAX_TOOL_USES * 10_000_000  # $0.01 a search
    body = {"model": "gpt-4.1", "input": "hi", "tools": [{"type": "web_search_preview"}, {"type": "file_search"}]}
    route = build("responses", "gpt-4.1", body)
    assert sent(route)["max_tool_calls"] == DEFAULT_MAX_TOOL_USES == route.asks.max_tool_calls
    with pytest.raises(UnpricedFeature) as caught:
        build("responses", "gpt-4.1", {"model": "gpt-4.1", "input": "hi", "tools": [{"type": "image_generation"}]})
    assert "image_generation" in caught.value.message
    with pytest.raises(UnpricedFeature):
        build("messages", "claude-sonnet-4-5", {"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": USER,
                                               "tools": [{"type": "code_execution_20250825", "name": "x"}]})


def test_audio_and_images_out_need_prices():
    with pytest.raises(UnpricedFeature):
        build("chat", "gpt-4o", {"model": "gpt-4o", "messages": USER, "modalities": ["text", "audio"],
                                 "audio": {"voice": "alloy", "format": "wav"}})
    audio_in = {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}
    with pytest.raises(UnpricedFeature):
        build("chat", "gpt-4o", {"model": "gpt-4o", "messages": [audio_in]})
    model = attrs.evolve(CONFIG.models["gpt-4o"], audio_input_price=40_000, audio_output_price=80_000)
    asks = chat_asks({"messages": [audio_in], "modalities": ["audio"], "max_tokens": 10}, model)
    assert hold_nano(model, 100, asks, ONE) >= 100 * 40_000 + 10 * 80_000


# -- the property ---------------------------------------------------------------------------

_MODEL = attrs.evolve(
    CONFIG.models["claude-sonnet-4-5"],
    service_tiers={"priority": Rates(input=4_000, output=20_000, cached_input=400)},
    long_context=LongContext(200_000, Rates(input=6_000, output=22_500, cached_input=600, cache_write=7_500,
                                            cache_write_1h=12_000)),
    tool_prices={"web_search": 10_000_000, "web_fetch": 0, "file_search": 2_500_000},
    audio_input_price=40_000, audio_output_price=80_000, image_output_price=30_000,
)

_text = st.text(max_size=300)
_cap = st.one_of(st.none(), st.integers(1, 200_000))


@st.composite
def _body(draw):
    fmt = draw(st.sampled_from(["chat", "messages", "responses"]))
    text = draw(_text) * draw(st.integers(1, 2000))
    cap = draw(_cap)
    tier = draw(st.sampled_from([None, "auto", "priority"]))
    if fmt == "chat":
        body = {"messages": [{"role": "user", "content": text}], "n": draw(st.integers(1, 8))}
        if cap:
            body[draw(st.sampled_from(["max_tokens", "max_completion_tokens"]))] = cap
        if draw(st.booleans()):
            body["modalities"] = ["text", "audio"]
    elif fmt == "messages":
        block = {"type": "text", "text": text}
        if draw(st.booleans()):
            block["cache_control"] = {"type": "ephemeral", "ttl": draw(st.sampled_from(["5m", "1h"]))}
        body = {"messages": [{"role": "user", "content": [block]}], "max_tokens": cap or 1}
        if draw(st.booleans()):
            body["tools"] = [{"type": "web_search_20250305", "name": "web_search",
                              **({"max_uses": draw(st.integers(1, 20))} if draw(st.booleans()) else {})}]
    else:
        body = {"input": text}
        if cap:
            body["max_output_tokens"] = cap
        if draw(st.booleans()):
            body["tools"] = [{"type": "web_search"}, {"type": "file_search"}]
    if tier:
        body["service_tier"] = tier
    return fmt, body


@settings(max_examples=300, deadline=None)
@given(_body(), st.data())
def test_the_hold_covers_any_bill_within_the_caps(case, data):
    fmt, body = case
    model = _MODEL
    readers = {"chat": chat_asks, "messages": messages_asks, "responses": responses_asks}
    if fmt == "messages":
        from gatewayd.billing.features import messages_changes
        body = {**body, **messages_changes(body, model)}
    asks = readers[fmt](body, model)
    input_estimate = estimate_input_tokens(body, fmt)
    ratio = data.draw(st.sampled_from([Fraction(1), Fraction(3, 2), Fraction(1, 3)]))
    held = hold_nano(model, input_estimate, asks, ratio)
    # the provider's real prompt is within the tolerance of the estimate, and hosted tools
    # make more passes over it: any input up to what the hold allows for, billed any way
    from gatewayd.billing.estimate import hold_input_tokens
    real_prompt = data.draw(st.integers(0, int(input_estimate * (1 + HOLD_TOLERANCE))))
    inputs = hold_input_tokens(real_prompt, asks)
    cached = data.draw(st.integers(0, inputs))
    writes = data.draw(st.integers(0, inputs - cached)) if asks.cache_write or asks.cache_1h else 0
    writes_1h = data.draw(st.integers(0, writes)) if asks.cache_1h else 0
    output = data.draw(st.integers(0, asks.output_tokens))
    audio_out = data.draw(st.integers(0, output)) if asks.audio_output else 0
    calls = {name: 0 for name in asks.tools}
    left = asks.max_tool_calls
    for name in asks.tools:
        calls[name] = data.draw(st.integers(0, left))
        left -= calls[name]
    usage = Usage(input_tokens=inputs, output_tokens=output, cached_tokens=cached, cache_write_tokens=writes,
                  cache_write_1h_tokens=writes_1h, audio_output_tokens=audio_out,
                  tool_calls=usage_mod.tool_calls(calls),
                  service_tier=asks.tier or data.draw(st.sampled_from([None, "default"])))
    charged = bill(model, usage, ratio).total_nano
    assert charged <= held * (1 + HOLD_TOLERANCE), (fmt, body, asks, usage)
    if real_prompt <= input_estimate:
        assert charged <= held
