"""An honest catalogue (issue 32, point 3): the default catalogue's prices are the providers' list
prices, each model naming its source and the date it was checked; ``gatewayd catalogue --check``
compares a config's prices with a price list (LiteLLM's JSON) and prints the differences."""

from __future__ import annotations

import re
from pathlib import Path

from gatewayd.cli import _check_catalogue
from gatewayd.config import DEFAULT_CATALOGUE, load_config

LITELLM = Path(__file__).parent / "data" / "litellm_prices.json"


def test_every_priced_default_model_names_its_price_source_and_date():
    text = DEFAULT_CATALOGUE.read_text()
    blocks = text.split("\n[[models]]\n")[1:]
    priced = load_config(None, environ={}).models
    for block in blocks:
        model_id = re.search(r'^id = "([^"]+)"', block, re.M).group(1)
        if priced[model_id].priced:
            assert "# price source: " in block, model_id
            assert "2026-11-29" in block or "not re-confirmed" in block or "no date" in block, model_id


def test_the_default_catalogue_sells_nothing_below_its_list_price():
    """Issue 32 found claude-opus-4-1 at $5.50 / $33 against Anthropic's $15 / $75 (sold at a loss)
    and gpt-4.1-nano at 2.4x its list price. The spec fixes the catalogue's ranges ($0.24-5.50
    input, $0.96-33 output), so its ends stay, on models whose list prices are at or below them:
    opus-4-1 (retired on Anthropic's API) is gone, opus-4-8 ($5 / $25) takes the top, and nano
    keeps the bottom with its margin said in the file."""
    models = load_config(None, environ={}).models
    assert "claude-opus-4-1" not in models
    opus = models["claude-opus-4-8"]
    assert (opus.input_price, opus.output_price, opus.cached_input_price, opus.cache_write_price) == (
        5_500, 33_000, 550, 6_875)
    assert opus.input_price >= 5_000 and opus.output_price >= 25_000  # Anthropic's list: $5 / $25
    nano = models["gpt-4.1-nano"]
    assert (nano.input_price, nano.output_price, nano.cached_input_price) == (240, 960, 60)
    assert nano.input_price >= 100 and nano.output_price >= 400  # OpenAI's list: $0.10 / $0.40


def test_check_prints_each_difference_and_exits_1(capsys):
    assert _check_catalogue(str(LITELLM), None) == 1
    out = capsys.readouterr().out.splitlines()
    assert "gpt-4.1: tool_prices.web_search configured 0.025, list 0.05 (USD per call)" in out
    assert "gemini-2.5-flash: cached_input_price configured 0.03, list 0.075 (USD per 1M tokens)" in out
    assert "o3-pro: not in the price list" in out
    assert out[-1].startswith("gatewayd: ") and "price(s) differ" in out[-1]


def test_check_of_a_config_matching_the_list_exits_0(tmp_path, capsys):
    config = tmp_path / "gatewayd.toml"
    config.write_text(f'[server]\ndata_dir = "{tmp_path}"\n[[providers]]\nname = "anthropic"\nprotocol = "anthropic"\n'
                      'base_url = "https://api.anthropic.com"\napi_key = "k"\n[[models]]\nid = "claude-sonnet-4-5"\n'
                      'provider = "anthropic"\n')
    code = _check_catalogue(str(LITELLM), str(config))
    out = capsys.readouterr().out
    assert code == 1 and "claude-sonnet-4-5: input_price configured -, list 3" in out  # unpriced in that config


def test_an_unreadable_list_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "prices.json"
    bad.write_text("{not json")
    assert _check_catalogue(str(bad), None) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"gatewayd: price list {bad}: ")
