"""``gatewayctl prices import --apply`` against a live daemon: the next request is charged the
imported price, ``prices show`` says so and where it came from, and the price stays through a
``gatewayctl reload``, a SIGHUP and a restart, until ``prices reset``."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid

import httpx
import pytest

from tests.live import BIN, Daemon, unique_email

# gpt-4.1-mini in the catalogue: 0.40 / 1.60 USD per 1M tokens; the list says ten times that
PRICE_LIST = {
    "gpt-4.1-mini": {"input_cost_per_token": 4e-06, "output_cost_per_token": 1.6e-05,
                     "cache_read_input_token_cost": 1e-06, "litellm_provider": "openai", "max_output_tokens": 32768,
                     "mode": "chat"},
    "mistral/mistral-large-latest": {"input_cost_per_token": 2e-06, "output_cost_per_token": 6e-06},
}


def gatewayctl(d: Daemon, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "gatewayctl"), *args, "--socket", d.socket], capture_output=True, text=True,
                          timeout=30)


def charged(d: Daemon, account_id: str, secret: str) -> dict:
    """One chat request to gpt-4.1-mini, and its usage row."""
    answer = httpx.post(f"{d.url}/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                        json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": uuid.uuid4().hex}]},
                        timeout=30)
    assert answer.status_code == 200, answer.text
    request_id = answer.headers["x-request-id"]
    deadline = time.monotonic() + 5
    while True:
        for row in d.admin.usage(account_id):
            if row["request_id"] == request_id:
                return row
        assert time.monotonic() < deadline, f"no usage row for {request_id}"
        time.sleep(0.05)


def rates_of(row: dict) -> tuple[int, int]:
    """The rates a row was charged at, checked to be the only reading of its cost."""
    for rates in ((400, 1600), (4000, 16000)):
        if row["cost_nano"] == row["input_tokens"] * rates[0] + row["output_tokens"] * rates[1]:
            return rates
    raise AssertionError(f"cost {row['cost_nano']} is neither price: {row}")


def shown_input(d: Daemon) -> tuple[int, str]:
    done = gatewayctl(d, "prices", "show", "gpt-4.1-mini", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    return doc["input_price_nano"], doc["sources"]["input_price"]


@pytest.mark.slow
def test_imported_prices_are_charged_shown_and_survive_reload_sighup_and_restart(sim, tmp_path):
    d = Daemon(tmp_path, sim.url)
    try:
        account = d.admin.account(unique_email("prices"))
        secret = d.admin.key(account["id"])["secret"]
        assert rates_of(charged(d, account["id"], secret)) == (400, 1600)
        listing = tmp_path / "model_prices_and_context_window.json"
        listing.write_text(json.dumps(PRICE_LIST))

        dry = gatewayctl(d, "prices", "import", str(listing))
        assert dry.returncode == 0, dry.stderr
        assert "Nothing applied" in dry.stdout
        assert rates_of(charged(d, account["id"], secret)) == (400, 1600)  # a dry run changes nothing

        done = gatewayctl(d, "prices", "import", str(listing), "--apply", "--json")
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert doc["applied"] is True and doc["reload"]["changed"] == ["gpt-4.1-mini"]
        assert {(c["field"], c["old"], c["new"]) for c in doc["changes"]} == {
            ("input_price", 400, 4000), ("output_price", 1600, 16000), ("cached_input_price", 100, 1000)}
        assert doc["not_in_catalogue"] == ["mistral/mistral-large-latest"]
        prices_file = tmp_path / "data" / "prices.json"
        assert json.loads(prices_file.read_text())["models"]["gpt-4.1-mini"]["input_price"] == "4"

        assert rates_of(charged(d, account["id"], secret)) == (4000, 16000)
        assert shown_input(d) == (4000, "prices_file")
        show = gatewayctl(d, "prices", "show", "gpt-4.1-mini")
        assert show.returncode == 0 and "prices file" in show.stdout

        again = gatewayctl(d, "prices", "import", str(listing), "--json")
        assert json.loads(again.stdout)["changes"] == []  # the list is what is charged now

        assert gatewayctl(d, "reload").returncode == 0
        assert rates_of(charged(d, account["id"], secret)) == (4000, 16000)
        reloads = d.output.text.count('"config reloaded"')
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while d.output.text.count('"config reloaded"') == reloads:
            assert time.monotonic() < deadline, "SIGHUP did not reload"
            time.sleep(0.05)
        assert rates_of(charged(d, account["id"], secret)) == (4000, 16000)

        d.restart()
        assert rates_of(charged(d, account["id"], secret)) == (4000, 16000)
        assert shown_input(d) == (4000, "prices_file")

        reset = gatewayctl(d, "prices", "reset", "gpt-4.1-mini")
        assert reset.returncode == 0, reset.stderr
        assert rates_of(charged(d, account["id"], secret)) == (400, 1600)
        assert shown_input(d) == (400, "config")
        assert json.loads(prices_file.read_text())["models"] == {}
        assert d.admin.audit()["ok"]
    finally:
        d.stop()


@pytest.mark.slow
def test_a_bad_config_file_at_apply_time_keeps_the_old_prices_and_file(sim, tmp_path):
    d = Daemon(tmp_path, sim.url)
    try:
        listing = tmp_path / "list.json"
        listing.write_text(json.dumps(PRICE_LIST))
        good = d.config.read_text()
        d.config.write_text(good + "\n[bogus]\n")
        done = gatewayctl(d, "prices", "import", str(listing), "--apply")
        assert done.returncode == 1
        assert "bogus: unknown top-level key" in done.stderr and "the prices were not applied" in done.stderr
        assert not (tmp_path / "data" / "prices.json").exists()
        d.config.write_text(good)
        assert shown_input(d) == (400, "config")
        # the admin route refuses fields it does not know, naming them, before writing anything
        refused = d.admin.call("POST", "/prices", {"models": {"gpt-4.1-mini": {"input_prize": 1}}}, expect=400)
        assert refused["error"]["message"] == "models.gpt-4.1-mini.input_prize: not a price schedule field"
        missing = d.admin.call("POST", "/prices", {"models": {"nope": {"input_price": 1}}}, expect=404)
        assert missing["error"]["message"] == "no model 'nope' in the catalogue"
    finally:
        d.stop()
