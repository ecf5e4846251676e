"""``gatewayctl prices show|import|reset`` against the stand-in admin server (tests/test_gatewayctl_cli.py).

The stand-in answers the price routes with documents made by the daemon's own
``gatewayd.admin.prices.schedule_doc`` over the default catalogue, so the CLI reads exactly
the shape the daemon sends; what the CLI sends back (the POST body) is checked field by field.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from gatewayd.admin.prices import schedule_doc
from gatewayd.billing.price_list import with_prices
from gatewayd.config import load_config
from tests.test_gatewayctl_cli import StandInAdmin, admin, gatewayctl, one_json, short_dir  # noqa: F401

PINNED_CATALOGUE = Path(__file__).parent / "data" / "catalogue_before_tool_prices.toml"

FIXTURE = Path(__file__).parent / "data" / "litellm_prices.json"
PRICES_FILE = "/srv/gatewayd/var/prices.json"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return load_config(PINNED_CATALOGUE, overrides={"data_dir": str(tmp_path_factory.mktemp("none"))}).models


@pytest.fixture
def daemon_prices(admin: StandInAdmin, models) -> StandInAdmin:
    """The stand-in answers the price routes as the daemon would; gpt-4.1's input price and
    web search fee come from the prices file."""
    gpt = with_prices(models["gpt-4.1"], {"input_price": 2100, "tool_prices.web_search": 25_000_000})
    overlay = {"input_price": 2100, "tool_prices.web_search": 25_000_000}
    docs = [schedule_doc(gpt if m.id == "gpt-4.1" else m, overlay if m.id == "gpt-4.1" else {}, PRICES_FILE)
            for m in models.values()]
    admin.answer("GET", "/admin/v1/prices", 200, {"prices_file": PRICES_FILE, "data": docs})
    for doc in docs:
        admin.answer("GET", f"/admin/v1/prices/{doc['model']}", 200, doc)
    admin.answer("POST", "/admin/v1/prices", 200, {"prices_file": PRICES_FILE, "applied": {}, "reload": {"ok": True}})
    admin.answer("DELETE", "/admin/v1/prices/gpt-4.1", 200,
                 {"prices_file": PRICES_FILE, "model": "gpt-4.1", "removed": ["input_price"], "reload": {"ok": True}})
    return admin


# --- show --------------------------------------------------------------------------------


def test_show_prints_every_price_with_its_source(daemon_prices: StandInAdmin, models) -> None:
    run = gatewayctl(daemon_prices, "prices", "show", "gpt-4.1")
    assert run.exit_code == 0, run.stderr
    assert (daemon_prices.last.method, daemon_prices.last.path) == ("GET", "/admin/v1/prices/gpt-4.1")
    lines = {line.strip().split("  ")[0]: " ".join(line.split()) for line in run.stdout.splitlines() if line.strip()}
    assert lines["input"] == "input $2.1 /1M 2,100 /token prices file"
    assert lines["output"] == "output $8 /1M 8,000 /token config"
    assert lines["audio input"] == "audio input - not priced"
    assert lines["tool web_search"] == "tool web_search $0.025 /call 25,000,000 /call prices file"
    assert lines["max output tokens"] == "max output tokens 32,768 config"
    assert PRICES_FILE in run.stdout


def test_show_lists_long_context_and_tiers(admin: StandInAdmin, models) -> None:
    sonnet = with_prices(models["claude-sonnet-4-5"], {
        "long_context.above_input_tokens": 200_000, "long_context.input_price": 6000,
        "service_tiers.priority.output_price": 20000})
    admin.answer("GET", "/admin/v1/prices/claude-sonnet-4-5", 200, schedule_doc(sonnet, {}, PRICES_FILE))
    run = gatewayctl(admin, "prices", "show", "claude-sonnet-4-5")
    assert run.exit_code == 0, run.stderr
    text = " ".join(run.stdout.split())
    assert "long context: above input tokens 200,000 config" in text
    assert "long context: input $6 /1M 6,000 /token config" in text
    assert "tier priority: output $20 /1M 20,000 /token config" in text
    assert "cache write, 1 hour $6 /1M 6,000 /token config" in text  # Anthropic's 2x default


def test_show_json_is_the_daemons_document(daemon_prices: StandInAdmin) -> None:
    run = gatewayctl(daemon_prices, "prices", "show", "gpt-4.1", "--json")
    assert run.exit_code == 0, run.stderr
    doc = one_json(run)
    assert doc["input_price_nano"] == 2100 and doc["input_price_usd"] == "2.1"
    assert doc["output_price_nano"] == 8000 and doc["output_price_usd"] == "8"
    assert doc["tool_prices"] == {"web_search": {"price_nano": 25_000_000, "price_usd": "0.025"}}
    assert doc["sources"]["input_price"] == "prices_file" and doc["sources"]["output_price"] == "config"
    assert doc["long_context"] is None and doc["service_tiers"] == {}


def test_show_of_an_unknown_model_is_the_daemons_error(admin: StandInAdmin) -> None:
    admin.answer("GET", "/admin/v1/prices/nope", 404,
                 {"error": {"message": "no model 'nope' in the catalogue", "code": "not_found"}})
    run = gatewayctl(admin, "prices", "show", "nope")
    assert run.exit_code == 1
    assert run.stderr.strip() == "gatewayctl: no model 'nope' in the catalogue"


# --- import ------------------------------------------------------------------------------


def test_import_prints_the_diff_and_applies_nothing_without_apply(daemon_prices: StandInAdmin) -> None:
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


def test_import_apply_sends_only_the_changed_fields(daemon_prices: StandInAdmin) -> None:
    run = gatewayctl(daemon_prices, "prices", "import", str(FIXTURE), "--apply")
    assert run.exit_code == 0, run.stderr
    assert (daemon_prices.last.method, daemon_prices.last.path) == ("POST", "/admin/v1/prices")
    sent = daemon_prices.last.body["models"]
    assert sent["gpt-4.1"]["input_price"] == 2000
    assert sent["gemini-2.5-flash"] == {"audio_input_price": 1000, "cached_input_price": 75, "max_output_tokens": 65535}
    assert sent["o4-mini"]["service_tiers.flex.cached_input_price"] == 138
    assert "claude-haiku-4-5" not in sent and "input_price" not in sent["claude-sonnet-4-5"]
    assert f"Applied: new requests are charged these prices (kept in {PRICES_FILE})" in " ".join(run.stdout.split())


def test_import_json_is_one_document_with_nano_and_usd(daemon_prices: StandInAdmin) -> None:
    run = gatewayctl(daemon_prices, "prices", "import", str(FIXTURE), "--json")
    assert run.exit_code == 0, run.stderr
    doc = one_json(run)
    assert doc["applied"] is False and doc["prices_file"] == PRICES_FILE
    change = next(c for c in doc["changes"] if (c["model"], c["field"]) == ("gpt-4.1", "input_price"))
    assert change == {"model": "gpt-4.1", "field": "input_price", "unit": "token", "old": 2100, "new": 2000,
                      "old_usd": "2.1", "new_usd": "2", "note": None}
    assert doc["matched"]["gemini-2.5-pro"] == "gemini/gemini-2.5-pro"
    assert "claude-haiku-4-5" in doc["unchanged"]


def test_import_with_nothing_to_change_says_so_and_posts_nothing(daemon_prices: StandInAdmin, tmp_path) -> None:
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
def test_a_bad_price_list_is_one_line_and_exit_2(daemon_prices: StandInAdmin, tmp_path, content, problem) -> None:
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


def test_a_model_the_catalogue_does_not_have_is_skipped_not_an_error(daemon_prices: StandInAdmin, tmp_path) -> None:
    path = tmp_path / "list.json"
    path.write_text('{"llama-9-huge": {"input_cost_per_token": -1}}')
    run = gatewayctl(daemon_prices, "prices", "import", str(path))
    assert run.exit_code == 0, run.stderr
    assert "Skipped 1 entries of the list that name no catalogue model: llama-9-huge." in " ".join(run.stdout.split())


def test_reset_deletes_the_models_imported_prices(daemon_prices: StandInAdmin) -> None:
    run = gatewayctl(daemon_prices, "prices", "reset", "gpt-4.1")
    assert run.exit_code == 0, run.stderr
    assert (daemon_prices.last.method, daemon_prices.last.path) == ("DELETE", "/admin/v1/prices/gpt-4.1")
    assert "gpt-4.1: 1 imported prices removed" in run.stdout


def test_the_catalogue_documents_carry_what_matching_needs(models) -> None:
    doc = schedule_doc(models["deepseek-chat"], {}, PRICES_FILE)
    assert doc["catalogue"]["names"] == ["deepseek-chat"]
    assert set(doc["catalogue"]["providers"]) == {"deepseek", "openai"}
    assert attrs.asdict(models["deepseek-chat"])["input_price"] == doc["fields"]["input_price"]
