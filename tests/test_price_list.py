"""LiteLLM's price list -> our price schedule, the diff, and the prices file merged by the config loader.

The fixture (tests/data/litellm_prices.json) has entries shaped as LiteLLM publishes them: a
Claude model with 1-hour cache writes and above-200k rates, GPT models with priority and flex
tiers and batch prices, Gemini with long context, a tier-and-long-context rate and audio, a
reseller's copy of a Claude model, a prefixed DeepSeek entry, an embedding model, LiteLLM's
``sample_spec`` (strings where prices go) and a broken entry of a model we do not serve.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import attrs
import pytest

from gatewayd.billing import price_overlay
from gatewayd.billing.price_list import (
    CatalogueModel, PriceListError, check_field, convert_entry, import_price_list, schedule, usd_text, with_prices,
)
from gatewayd.billing.pricing import bill
from gatewayd.config import ConfigError, load_config
from gatewayd.formats.usage import Usage

PINNED_CATALOGUE = Path(__file__).parent / "data" / "catalogue_before_tool_prices.toml"

FIXTURE = Path(__file__).parent / "data" / "litellm_prices.json"


@pytest.fixture(scope="module")
def price_list() -> dict:
    return json.loads(FIXTURE.read_text())


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return load_config(PINNED_CATALOGUE, overrides={"data_dir": str(tmp_path_factory.mktemp("no-prices"))})


def catalogue(config):
    return [CatalogueModel.of(m) for m in config.models.values()]


def changes_of(result, model: str) -> dict[str, tuple]:
    return {c.field: (c.old, c.new, c.note) for c in result.changes if c.model == model}


# --- one entry ---------------------------------------------------------------------------


def test_a_claude_entry_converts_every_rate_including_1h_writes_long_context_and_search(price_list):
    got = convert_entry("claude-sonnet-4-5", price_list["claude-sonnet-4-5"], anthropic_defaults=True)
    assert got.fields == {
        "input_price": 3000, "output_price": 15000, "cached_input_price": 300, "cache_write_price": 3750,
        "cache_write_1h_price": 6000, "max_output_tokens": 64000,
        "long_context.above_input_tokens": 200_000, "long_context.input_price": 6000,
        "long_context.output_price": 22500, "long_context.cached_input_price": 600,
        "long_context.cache_write_price": 7500, "long_context.cache_write_1h_price": 12000,
        "tool_prices.web_search": 10_000_000,
    }
    assert got.notes == {} and got.ignored == ()


def test_tiers_are_service_tiers_and_batch_prices_are_listed_as_not_imported(price_list):
    got = convert_entry("gpt-4.1", price_list["gpt-4.1"])
    assert got.fields["service_tiers.priority.input_price"] == 3500
    assert got.fields["service_tiers.priority.output_price"] == 14000
    assert got.fields["service_tiers.priority.cached_input_price"] == 875
    assert got.fields["tool_prices.web_search"] == 50_000_000  # the highest context size: never below the bill
    assert got.notes["tool_prices.web_search"] == "the highest of the context sizes' prices"
    assert got.ignored == ("input_cost_per_token_batches", "output_cost_per_token_batches")


def test_a_price_that_is_not_a_whole_nano_dollar_is_rounded_up_and_says_so(price_list):
    got = convert_entry("o4-mini", price_list["o4-mini"])
    assert got.fields["service_tiers.flex.cached_input_price"] == 138  # 1.375e-07 USD = 137.5 nano
    assert got.notes["service_tiers.flex.cached_input_price"] == "rounded up from 137.5 nano-USD"
    assert convert_entry("x", {"input_cost_per_token": 1e-11}).fields["input_price"] == 1  # 0.01 nano -> 1
    assert convert_entry("x", {"input_cost_per_token": 0}).fields["input_price"] == 0


def test_a_tier_and_long_context_rate_at_once_is_not_imported(price_list):
    got = convert_entry("gemini/gemini-2.5-pro", price_list["gemini/gemini-2.5-pro"])
    assert "input_cost_per_token_above_200k_tokens_priority" in got.ignored
    assert got.fields["service_tiers.priority.input_price"] == 1250
    assert got.fields["long_context.input_price"] == 2500


def test_audio_and_a_reasoning_rate_equal_to_output(price_list):
    got = convert_entry("gemini/gemini-2.5-flash", price_list["gemini/gemini-2.5-flash"])
    assert got.fields["audio_input_price"] == 1000
    assert got.ignored == ()  # reasoning at the output rate is what gatewayd charges
    other = convert_entry("x", {"output_cost_per_token": 1e-06, "output_cost_per_reasoning_token": 2e-06,
                                "output_cost_per_image_token": 3e-05, "output_cost_per_audio_token": 2e-05,
                                "output_cost_per_image": 0.04})
    assert other.fields == {"output_price": 1000, "image_output_price": 30000, "audio_output_price": 20000}
    assert other.ignored == ("output_cost_per_image", "output_cost_per_reasoning_token")


def test_a_second_long_context_threshold_is_not_imported():
    got = convert_entry("x", {"input_cost_per_token": 1e-06, "input_cost_per_token_above_128k_tokens": 2e-06,
                              "input_cost_per_token_above_272k_tokens": 4e-06})
    assert got.fields["long_context.above_input_tokens"] == 128_000
    assert got.fields["long_context.input_price"] == 2000
    assert got.ignored == ("input_cost_per_token_above_272k_tokens",)


def test_tool_fees_per_session_and_per_thousand_calls():
    got = convert_entry("x", {"code_interpreter_cost_per_session": 0.03, "file_search_cost_per_1k_calls": 2.5})
    assert got.fields == {"tool_prices.code_interpreter": 30_000_000, "tool_prices.file_search": 2_500_000}


def test_anthropic_defaults_fill_cache_writes_the_list_does_not_price(price_list):
    got = convert_entry("claude-opus-4-1", price_list["claude-opus-4-1"], anthropic_defaults=True)
    assert got.fields["cache_write_price"] == 18750 and got.fields["cache_write_1h_price"] == 30000
    assert "Anthropic's rule" in got.notes["cache_write_price"]
    assert "cache_write_price" not in convert_entry("x", {"input_cost_per_token": 1e-06}).fields


def test_an_embedding_entry_gives_only_its_input_rate(price_list):
    got = convert_entry("text-embedding-3-small", price_list["text-embedding-3-small"], embedding=True)
    assert got.fields == {"input_price": 20}


@pytest.mark.parametrize("entry,problem", [
    ({"input_cost_per_token": -1e-06}, "must not be negative"),
    ({"input_cost_per_token": math.nan}, "must be a finite number"),
    ({"input_cost_per_token": math.inf}, "must be a finite number"),
    ({"input_cost_per_token": "3e-06"}, "must be a number of USD"),
    ({"input_cost_per_token": True}, "must be a number of USD"),
    ({"input_cost_per_token": 5.0}, "above the most a price may be"),
    ({"max_output_tokens": 64000.5}, "must be a whole number of tokens"),
    ({"max_output_tokens": 0}, "must be a whole number of tokens"),
    ({"search_context_cost_per_query": 0.01}, "must be an object of USD per query"),
    ({"search_context_cost_per_query": {"search_context_size_low": None}}, "must be a number of USD"),
], ids=["negative", "nan", "inf", "string", "bool", "huge", "float-tokens", "zero-tokens", "search-number",
        "search-null"])
def test_bad_prices_are_one_line_naming_the_entry_and_key(entry, problem):
    with pytest.raises(PriceListError) as raised:
        convert_entry("claude-sonnet-4-5", entry)
    message = str(raised.value)
    assert problem in message and "'claude-sonnet-4-5'." in message and "\n" not in message


def test_an_entry_that_is_not_an_object_is_refused():
    with pytest.raises(PriceListError, match="must be an object"):
        convert_entry("m", [1, 2])


# --- the whole list against the catalogue ---------------------------------------------------


def test_the_diff_has_only_what_changes_and_matches_by_id_upstream_id_and_provider_prefix(price_list, config):
    result = import_price_list(price_list, catalogue(config))
    assert result.matched["claude-sonnet-4-5"] == "claude-sonnet-4-5"  # not the reseller's vertex_ai/ copy
    assert result.matched["gemini-2.5-pro"] == "gemini/gemini-2.5-pro"  # the Gemini API's, not Vertex's bare key
    assert result.matched["deepseek-chat"] == "deepseek/deepseek-chat"  # our provider's name as the prefix
    sonnet = changes_of(result, "claude-sonnet-4-5")
    assert "input_price" not in sonnet and "cache_write_1h_price" not in sonnet  # unchanged: not in the diff
    assert sonnet["long_context.input_price"] == (None, 6000, None)  # new field
    assert sonnet["tool_prices.web_search"] == (None, 10_000_000, None)
    assert changes_of(result, "gemini-2.5-flash")["cached_input_price"] == (30, 75, None)  # old -> new
    assert changes_of(result, "o4-mini")["service_tiers.flex.cached_input_price"][2].startswith("rounded up")
    assert "claude-haiku-4-5" in result.doc()["unchanged"]
    assert "gpt-4.1-mini" in result.missing and "claude-3-5-haiku" in result.missing  # reseller prefix refused
    assert result.not_in_catalogue == ("mistral/mistral-large-latest", "openrouter/anthropic/claude-3-5-haiku-latest",
                                       "some-broken-entry-nobody-uses")  # a broken unused entry is not read
    assert result.ignored["gpt-4.1"] == ("input_cost_per_token_batches", "output_cost_per_token_batches")
    assert result.overlay()["gemini-2.5-flash"] == {"audio_input_price": 1000, "cached_input_price": 75,
                                                    "max_output_tokens": 65535}


def test_importing_the_applied_prices_again_changes_nothing(price_list, config):
    first = import_price_list(price_list, catalogue(config))
    applied = price_overlay.apply(config.models, first.overlay())
    again = import_price_list(price_list, [CatalogueModel.of(m) for m in applied.values()])
    assert again.changes == ()


def test_a_list_that_is_not_an_object_is_refused(config):
    with pytest.raises(PriceListError, match="must be a JSON object"):
        import_price_list([], catalogue(config))


def test_a_bad_price_in_a_used_entry_fails_the_import(config):
    with pytest.raises(PriceListError, match=r"'gpt-4.1'.output_cost_per_token: must not be negative"):
        import_price_list({"gpt-4.1": {"output_cost_per_token": -1}}, catalogue(config))


def test_catalogue_models_survive_a_trip_through_json(config):
    model = CatalogueModel.of(config.models["claude-sonnet-4-5"])
    assert CatalogueModel.from_doc(json.loads(json.dumps(model.doc()))) == model


# --- the schedule as fields, and the prices file ----------------------------------------------


def test_with_prices_sets_fields_and_billing_reads_them(config, price_list):
    model = config.models["claude-sonnet-4-5"]
    fields = convert_entry("claude-sonnet-4-5", price_list["claude-sonnet-4-5"], anthropic_defaults=True).fields
    priced = with_prices(model, fields)
    assert schedule(priced) == {**schedule(model), **fields}
    long_prompt = bill(priced, Usage(input_tokens=300_000, output_tokens=1000), 1)
    assert long_prompt.long_context and long_prompt.total_nano == 300_000 * 6000 + 1000 * 22500
    assert bill(priced, Usage(input_tokens=1000, output_tokens=10, tool_calls=(("web_search", 2),)), 1
                ).total_nano == 1000 * 3000 + 10 * 15000 + 2 * 10_000_000


def test_long_context_rates_need_a_threshold(config):
    with pytest.raises(PriceListError, match="above_input_tokens"):
        with_prices(config.models["gpt-4.1"], {"long_context.input_price": 4000})


@pytest.mark.parametrize("field,value,problem", [
    ("input_prize", 1, "not a price schedule field"),
    ("service_tiers.default.input_price", 1, "default tier"),
    ("service_tiers.priority.input", 1, "not a price schedule field"),
    ("tool_prices.Web Search", 1, "not a price schedule field"),
    ("input_price", -1, "must be from 0"),
    ("input_price", 1.5, "whole number"),
    ("max_output_tokens", 0, "must be from 1"),
])
def test_check_field(field, value, problem):
    with pytest.raises(PriceListError, match=problem):
        check_field(field, value)


def test_usd_text_is_exact_in_the_config_files_units():
    assert usd_text("input_price", 3000) == "3" and usd_text("input_price", 138) == "0.138"
    assert usd_text("tool_prices.web_search", 10_000_000) == "0.01"
    assert usd_text("max_output_tokens", 64000) is None


def test_the_prices_file_round_trips_in_config_units(tmp_path):
    overlay = {"claude-sonnet-4-5": {"input_price": 3500, "service_tiers.flex.cached_input_price": 138,
                                     "tool_prices.web_search": 10_000_000, "long_context.above_input_tokens": 200_000}}
    path = tmp_path / "prices.json"
    price_overlay.write(path, overlay)
    written = json.loads(path.read_text())
    assert written["models"]["claude-sonnet-4-5"]["input_price"] == "3.5"
    assert written["models"]["claude-sonnet-4-5"]["tool_prices.web_search"] == "0.01"
    assert price_overlay.read(path) == overlay
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prices.json"]  # no temporary file left


def test_the_config_loader_merges_the_prices_file_over_the_catalogue(tmp_path):
    price_overlay.write(tmp_path / "prices.json", {"gpt-4.1": {"input_price": 2100, "tool_prices.web_search": 1},
                                                   "retired-model": {"input_price": 1}})
    cfg = load_config(None, overrides={"data_dir": str(tmp_path)})
    assert cfg.models["gpt-4.1"].input_price == 2100
    assert cfg.models["gpt-4.1"].output_price == 8000  # not in the file: the catalogue's
    assert cfg.models["gpt-4.1"].tool_prices["web_search"] == 1  # the other tools keep the catalogue's
    assert cfg.price_overlay == {"gpt-4.1": {"input_price": 2100, "tool_prices.web_search": 1}}
    assert "retired-model" not in cfg.models


@pytest.mark.parametrize("content,problem", [
    ("{not json", "not valid JSON"),
    ('{"models": {}}', "not a gatewayd prices file"),
    ('{"format": "gatewayd-prices/1", "models": {"gpt-4.1": {"input_price": "1.0001"}}}',
     "models.gpt-4.1.input_price: price '1.0001' has more than three decimals"),
    ('{"format": "gatewayd-prices/1", "models": {"gpt-4.1": {"input_price": 3}}}', "must be a decimal string"),
    ('{"format": "gatewayd-prices/1", "models": {"gpt-4.1": {"bogus": "1"}}}', "bogus: not a price schedule field"),
    ('{"format": "gatewayd-prices/1", "models": {"gpt-4.1": {"long_context.input_price": "1"}}}',
     "long_context: rates without"),
])
def test_a_bad_prices_file_fails_the_load_with_one_line_naming_it(tmp_path, content, problem):
    (tmp_path / "prices.json").write_text(content)
    with pytest.raises(ConfigError) as raised:
        load_config(None, overrides={"data_dir": str(tmp_path)})
    assert problem in str(raised.value) and str(tmp_path / "prices.json") in str(raised.value)


def test_no_prices_file_changes_nothing(tmp_path, config):
    cfg = load_config(PINNED_CATALOGUE, overrides={"data_dir": str(tmp_path)})
    assert cfg.price_overlay == {}
    assert {m: attrs.asdict(v) for m, v in cfg.models.items()} == {m: attrs.asdict(v) for m, v in config.models.items()}
