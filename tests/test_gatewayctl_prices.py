"""``gatewayctl prices show|import|reset`` against the real admin API in this process
(tests/admin_inproc.py), over a pinned catalogue (tests/data/catalogue_before_tool_prices.toml,
so the diffs stay what they are when the default catalogue changes) and a prices file that
sets gpt-4.1's input price and web search fee: the CLI reads what the daemon answers, and what
it sends back changes what the daemon charges.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from gatewayd.admin.prices import schedule_doc
from gatewayd.config import load_config
from tests.admin_inproc import RealAdmin, running_admin
from tests.gatewayctl_cli import gatewayctl, one_json

PINNED_CATALOGUE = Path(__file__).parent / "data" / "catalogue_before_tool_prices.toml"

FIXTURE = Path(__file__).parent / "data" / "litellm_prices.json"
# the prices file the daemon starts with: gpt-4.1's input price and web search fee
GPT_PRICES = {"gpt-4.1": {"input_price": "2.1", "tool_prices.web_search": "0.025"}}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return load_config(PINNED_CATALOGUE, overrides={"data_dir": str(tmp_path_factory.mktemp("none"))}).models


@pytest.fixture(scope="module")
def shared_prices(tmp_path_factory) -> Iterator[RealAdmin]:
    with running_admin(tmp_path_factory.mktemp("prices"), PINNED_CATALOGUE, GPT_PRICES) as real:
        yield real


@pytest.fixture
def daemon_prices(shared_prices: RealAdmin) -> RealAdmin:
    """The daemon's admin API for the tests that change no price (its request log emptied)."""
    shared_prices.requests.clear()
    return shared_prices


@pytest.fixture
def own_prices(tmp_path: Path) -> Iterator[RealAdmin]:
    """A daemon of its own, for a test that applies or removes prices."""
    with running_admin(tmp_path, PINNED_CATALOGUE, GPT_PRICES) as real:
        yield real


def prices_file(admin: RealAdmin) -> str:
    return str(admin.data_dir / "prices.json")


# --- show --------------------------------------------------------------------------------


def test_show_prints_every_price_with_its_source(daemon_prices: RealAdmin) -> None:
    run = gatewayctl(daemon_prices, "prices", "show", "gpt-4.1")
    assert run.exit_code == 0, run.stderr
    assert (daemon_prices.last.method, daemon_prices.last.path) == ("GET", "/admin/v1/prices/gpt-4.1")
    lines = {line.strip().split("  ")[0]: " ".join(line.split()) for line in run.stdout.splitlines() if line.strip()}
    assert lines["input"] == "input $2.1 /1M 2,100 /token prices file"
    assert lines["output"] == "output $8 /1M 8,000 /token config"
    assert lines["audio input"] == "audio input - not priced"
    assert lines["tool web_search"] == "tool web_search $0.025 /call 25,000,000 /call prices file"
    assert lines["max output tokens"] == "max output tokens 32,768 config"
    assert prices_file(daemon_prices) in "".join(run.stdout.split())


def test_show_lists_long_context_and_tiers(tmp_path: Path) -> None:
    sonnet = {"long_context.above_input_tokens": 200_000, "long_context.input_price": "6",
              "service_tiers.priority.output_price": "20"}
    with running_admin(tmp_path, PINNED_CATALOGUE, {"claude-sonnet-4-5": sonnet}) as admin:
        run = gatewayctl(admin, "prices", "show", "claude-sonnet-4-5")
    assert run.exit_code == 0, run.stderr
    text = " ".join(run.stdout.split())
    assert "long context: above input tokens 200,000 prices file" in text
    assert "long context: input $6 /1M 6,000 /token prices file" in text
    assert "tier priority: output $20 /1M 20,000 /token prices file" in text
    assert "cache write, 1 hour $6 /1M 6,000 /token config" in text  # Anthropic's 2x default


def test_show_json_is_the_daemons_document(daemon_prices: RealAdmin) -> None:
    run = gatewayctl(daemon_prices, "prices", "show", "gpt-4.1", "--json")
    assert run.exit_code == 0, run.stderr
    doc = one_json(run)
    assert doc["input_price_nano"] == 2100 and doc["input_price_usd"] == "2.1"
    assert doc["output_price_nano"] == 8000 and doc["output_price_usd"] == "8"
    assert doc["tool_prices"] == {"web_search": {"price_nano": 25_000_000, "price_usd": "0.025"}}
    assert doc["sources"]["input_price"] == "prices_file" and doc["sources"]["output_price"] == "config"
    assert doc["long_context"] is None and doc["service_tiers"] == {}


def test_show_of_an_unknown_model_is_the_daemons_error(daemon_prices: RealAdmin) -> None:
    run = gatewayctl(daemon_prices, "prices", "show", "nope")
    assert (daemon_prices.last.method, daemon_prices.last.path) == ("GET", "/admin/v1/prices/nope")
    assert run.exit_code == 1 and run.stdout == ""
    assert run.stderr.startswith("gatewayctl: ") and "'nope'" in run.stderr and run.stderr.count("\n") == 1


# --- import ------------------------------------------------------------------------------


def test_import_prints_the_diff_and_applies_nothing_without_apply(daemon_prices: RealAdmin) -> None:
    run = gatewayctl(daemon_prices, "prices", "import", str(FIXTURE))
    assert run.exit_code == 0, run.stderr
    assert [(r.method, r.path) for r in daemon_prices.requests] == [("GET", "/admin/v1/prices")]
    rows = [" ".join(line.split()) for line in run.stdout.splitlines()]
    assert "gpt-4.1 input_price $2.1 /1M $2 /1M" in rows  # the prices file's 2.1 back to the list's 2
    assert "gpt-4.1 tool_prices.web_search $0.025 /call $0.05 /call the highest of the context sizes' prices" in rows
    assert ("o4-mini service_tiers.flex.cached_input_price (new) $0.138 /1M rounded up from 137.5 nano-USD"
            in rows)
    assert "gemini-2.5-flash cached_input_price $0.03 /1M $0.075 /1M" in rows
    assert not any(row.startswith("claude-haiku-4-5 ") for row in rows)  # unchanged: not in the diff
    text = " ".join(run.stdout.split())
    assert "Skipped (the list has no entry): gpt-4.1-mini" in text
    assert "Not imported for gpt-4.1 (no such price in gatewayd): input_cost_per_token_batches" in text
    assert "Skipped 3 entries of the list that name no catalogue model: mistral/mistral-large-latest" in text
    assert "Nothing applied: run again with --apply" in text


def test_import_apply_sends_only_the_changed_fields(own_prices: RealAdmin) -> None:
    run = gatewayctl(own_prices, "prices", "import", str(FIXTURE), "--apply")
    assert run.exit_code == 0, run.stderr
    assert (own_prices.last.method, own_prices.last.path) == ("POST", "/admin/v1/prices")
    sent = own_prices.last.body["models"]
    assert sent["gpt-4.1"]["input_price"] == 2000
    assert sent["gemini-2.5-flash"] == {"audio_input_price": 1000, "cached_input_price": 75, "max_output_tokens": 65535}
    assert sent["o4-mini"]["service_tiers.flex.cached_input_price"] == 138
    assert "claude-haiku-4-5" not in sent and "input_price" not in sent["claude-sonnet-4-5"]
    assert "Applied: new requests are charged these prices (kept in" in " ".join(run.stdout.split())
    assert prices_file(own_prices) in "".join(run.stdout.split())
    charged = own_prices.directory.config.models  # the daemon reloaded: new requests pay these
    assert charged["gpt-4.1"].input_price == 2000 and charged["gemini-2.5-flash"].cached_input_price == 75
    shown = one_json(gatewayctl(own_prices, "prices", "show", "gpt-4.1", "--json"))
    assert shown["input_price_nano"] == 2000 and shown["sources"]["input_price"] == "prices_file"


def test_import_json_is_one_document_with_nano_and_usd(daemon_prices: RealAdmin) -> None:
    run = gatewayctl(daemon_prices, "prices", "import", str(FIXTURE), "--json")
    assert run.exit_code == 0, run.stderr
    doc = one_json(run)
    assert doc["applied"] is False and doc["prices_file"] == prices_file(daemon_prices)
    change = next(c for c in doc["changes"] if (c["model"], c["field"]) == ("gpt-4.1", "input_price"))
    assert change == {"model": "gpt-4.1", "field": "input_price", "unit": "token", "old": 2100, "new": 2000,
                      "old_usd": "2.1", "new_usd": "2", "note": None}
    assert doc["matched"]["gemini-2.5-pro"] == "gemini/gemini-2.5-pro"
    assert "claude-haiku-4-5" in doc["unchanged"]


def test_import_with_nothing_to_change_says_so_and_posts_nothing(daemon_prices: RealAdmin, tmp_path) -> None:
    small = tmp_path / "prices.json"
    small.write_text(json.dumps({"claude-haiku-4-5": json.loads(FIXTURE.read_text())["claude-haiku-4-5"]}))
    run = gatewayctl(daemon_prices, "prices", "import", str(small), "--apply")
    assert run.exit_code == 0, run.stderr
    assert "No changes" in run.stdout
    assert [r.method for r in daemon_prices.requests] == ["GET"]


@pytest.mark.parametrize("content,problem", [
    (None, "file not found"),
    ("{\"gpt-4.1\": ", "not valid JSON: Expecting value at line 1 column 13"),
    (b"\xff\xfe{}", "not UTF-8 text"),
    ("[1, 2]", "the price list must be a JSON object of model entries (got list)"),
    ('{"gpt-4.1": {"input_cost_per_token": -2e-06}}', "'gpt-4.1'.input_cost_per_token: must not be negative"),
    ('{"gpt-4.1": {"input_cost_per_token": NaN}}', "'gpt-4.1'.input_cost_per_token: must be a finite number"),
    ('{"gpt-4.1": {"output_cost_per_token": "8e-06"}}', "'gpt-4.1'.output_cost_per_token: must be a number of USD"),
    ('{"gpt-4.1": "cheap"}', "price list entry 'gpt-4.1': must be an object"),
], ids=["missing", "truncated", "not-utf8", "list", "negative", "nan", "string", "entry-string"])
def test_a_bad_price_list_is_one_line_and_exit_2(daemon_prices: RealAdmin, tmp_path, content, problem) -> None:
    path = tmp_path / "list.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    run = gatewayctl(daemon_prices, "prices", "import", str(path), "--apply")
    assert run.exit_code == 2, (run.stdout, run.stderr)
    assert isinstance(run.exception, SystemExit)  # no traceback
    assert run.stderr.count("\n") == 1 and run.stderr.startswith(f"gatewayctl: {path}: ")
    assert problem in run.stderr
    assert "POST" not in [r.method for r in daemon_prices.requests]


def test_a_model_the_catalogue_does_not_have_is_skipped_not_an_error(daemon_prices: RealAdmin, tmp_path) -> None:
    path = tmp_path / "list.json"
    path.write_text('{"llama-9-huge": {"input_cost_per_token": -1}}')
    run = gatewayctl(daemon_prices, "prices", "import", str(path))
    assert run.exit_code == 0, run.stderr
    assert "Skipped 1 entries of the list that name no catalogue model: llama-9-huge." in " ".join(run.stdout.split())


def test_reset_deletes_the_models_imported_prices(own_prices: RealAdmin, models) -> None:
    assert own_prices.directory.config.models["gpt-4.1"].input_price == 2100
    run = gatewayctl(own_prices, "prices", "reset", "gpt-4.1")
    assert run.exit_code == 0, run.stderr
    assert (own_prices.last.method, own_prices.last.path) == ("DELETE", "/admin/v1/prices/gpt-4.1")
    assert "gpt-4.1: 2 imported prices removed" in run.stdout
    assert "gpt-4.1" not in own_prices.directory.config.price_overlay
    assert own_prices.directory.config.models["gpt-4.1"].input_price == models["gpt-4.1"].input_price  # the config's


def test_the_catalogue_documents_carry_what_matching_needs(models) -> None:
    doc = schedule_doc(models["deepseek-chat"], {}, "/srv/gatewayd/var/prices.json")
    assert doc["catalogue"]["names"] == ["deepseek-chat"]
    assert set(doc["catalogue"]["providers"]) == {"deepseek", "openai"}
    assert attrs.asdict(models["deepseek-chat"])["input_price"] == doc["fields"]["input_price"]
