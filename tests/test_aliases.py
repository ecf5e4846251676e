"""Aliases (issue 32, point 2): ``[[aliases]]`` and a model's ``aliases = [...]`` map other ids to
a catalogue model; the default catalogue resolves the providers' dated ids and the ids Claude
Code, Codex and Gemini CLI send when their user names none; ``/v1/models`` lists catalogue ids
only; the usage row records both ids (the store half: tests/test_store_contract.py)."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from gatewayd.config import ConfigError, load_config
from tests.inproc import Gateway

PROVIDER = """
[[providers]]
name = "ant"
protocol = "anthropic"
base_url = "http://127.0.0.1:9"
api_key = "k"
"""
MODEL = '[[models]]\nid = "haiku"\nprovider = "ant"\ninput_price = 1\noutput_price = 5\n'


def config(tmp_path: Path, text: str):
    path = tmp_path / "gatewayd.toml"
    path.write_text(f'[server]\ndata_dir = "{tmp_path}"\n{text}')
    return load_config(path, environ={})


def test_both_forms_map_to_the_catalogue_model(tmp_path):
    c = config(tmp_path, PROVIDER + MODEL + 'aliases = ["haiku-20251001"]\n\n'
               '[[aliases]]\nid = "small"\nmodel = "haiku"\n')
    assert c.aliases == {"haiku-20251001": "haiku", "small": "haiku"}
    assert c.model("small") == (c.models["haiku"], "small")
    assert c.model("haiku") == (c.models["haiku"], None)
    assert c.model("nothing") == (None, None)


@pytest.mark.parametrize("text, message", [
    (MODEL + 'aliases = ["haiku"]\n', "models[0].aliases[0]: 'haiku' is a catalogue model id, not an alias"),
    (MODEL + 'aliases = "x"\n', "models[0].aliases: must be an array of model ids"),
    (MODEL + '[[aliases]]\nid = "x"\nmodel = "nope"\n', "aliases[0].model: no model named 'nope'"),
    (MODEL + MODEL.replace('"haiku"', '"other"') + 'aliases = ["x"]\n[[aliases]]\nid = "x"\nmodel = "haiku"\n',
     "aliases[0].id: alias 'x' already names model 'other'"),
    (MODEL + '[[aliases]]\nid = "x"\nmodel = "haiku"\nextra = 1\n', "aliases[0].extra: unknown key"),
])
def test_a_bad_alias_is_one_config_error_naming_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as caught:
        config(tmp_path, PROVIDER + text)
    assert str(caught.value) == message


def test_the_default_catalogue_resolves_dated_ids_and_the_clients_defaults(tmp_path):
    c = load_config(None, environ={})
    expected = {
        "claude-haiku-4-5-20251001": "claude-haiku-4-5", "claude-sonnet-4-5-20250929": "claude-sonnet-4-5",
        "gpt-4.1-mini-2025-04-14": "gpt-4.1-mini",
        "gpt-6.1-sol": "gpt-4.1",  # Codex 0.169's default (observed)
        "gemini-3.5-flash-lite": "gemini-2.5-flash",  # Gemini CLI 0.61's router model (observed)
        "gemini-3.1-pro-preview": "gemini-2.5-pro",  # ... and the model its router picked (observed)
    }
    assert {alias: c.model(alias)[0].id for alias in expected} == expected
    assert c.model("claude-opus-4-8") == (c.models["claude-opus-4-8"], None)  # Claude Code 2.1.197's default: a model
    # an operator's [[aliases]] beside the default catalogue is added to (and over) its own
    own = config(tmp_path, '[[aliases]]\nid = "gemini-3.5-flash"\nmodel = "gemini-2.5-pro"\n')
    assert own.model("gemini-3.5-flash")[0].id == "gemini-2.5-pro"
    assert own.model("gpt-6.1-sol")[0].id == "gpt-4.1"


COMPLETION = {"id": "m1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
              "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
              "usage": {"input_tokens": 10, "output_tokens": 5}}


async def test_an_alias_is_served_as_its_model_listed_by_its_id_and_recorded_twice(tmp_path):
    sent: list[dict] = []

    def provider(request: httpx.Request) -> httpx.Response:
        sent.append(orjson.loads(request.content))
        return httpx.Response(200, json=COMPLETION)

    gw = Gateway(tmp_path, provider)
    try:
        account_id, _ = await gw.funded_key()
        account = gw.directory.accounts[account_id]
        _, secret = await gw.directory.create_key(account, name="listed", models=["claude-haiku-4-5"])
        headers = {"authorization": f"Bearer {secret}", "anthropic-version": "2023-06-01"}
        body = {"model": "claude-haiku-4-5-20251001", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
        response = await gw.http.post("/v1/messages", content=orjson.dumps(body), headers=headers)
        assert response.status_code == 200, response.text
        assert sent[-1]["model"] == "claude-haiku-4-5"  # the catalogue model's upstream id
        listed = (await gw.http.get("/v1/models", headers={"authorization": f"Bearer {secret}"})).json()
        assert [m["id"] for m in listed["data"]] == ["claude-haiku-4-5"]
        one = await gw.http.get("/v1/models/claude-haiku-4-5-20251001", headers={"authorization": f"Bearer {secret}"})
        assert one.status_code == 200 and one.json()["id"] == "claude-haiku-4-5"
        [row] = await gw.usage(account_id)
        assert (row["model"], row["requested_model"], row["cost_nano"]) == (
            "claude-haiku-4-5", "claude-haiku-4-5-20251001", 10 * 1000 + 5 * 5000)
    finally:
        await gw.aclose()
