"""Provider key mistakes caught at start-up (issue 32, point 4): an unset ``api_key_env`` of a
provider the operator's own file declares is a config error (start, check-config, reload:
tests/test_operations_live.py); a provider only the default catalogue brings is left out with
one warning line naming the variable, its models unlisted and refused saying why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest

from gatewayd.config import ConfigError, load_config
from tests.inproc import Gateway

BIN = Path(sys.executable).parent
EVERY_KEY = {"OPENAI_API_KEY": "o", "ANTHROPIC_API_KEY": "a", "GEMINI_API_KEY": "g", "DEEPSEEK_API_KEY": "d"}


def test_an_own_provider_without_its_key_is_a_config_error(tmp_path):
    path = tmp_path / "gatewayd.toml"
    path.write_text(f'[server]\ndata_dir = "{tmp_path}"\n[[providers]]\nname = "o"\nprotocol = "openai"\n'
                    'base_url = "https://o.test/v1"\napi_key_env = "MY_KEY"\n[[models]]\nid = "m"\nprovider = "o"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert str(caught.value) == ("providers[0].api_key_env: the environment variable MY_KEY is not set "
                                 "(provider 'o' would be called without a key)")
    assert load_config(path, environ={"MY_KEY": "k"}).providers["o"].api_key == "k"
    # --demo calls the simulator, not the provider: no key needed
    demo = load_config(path, environ={}, overrides={"demo": True}).with_simulator("http://127.0.0.1:9")
    assert demo.providers["o"].usable


def test_the_default_catalogues_providers_without_keys_are_left_out_with_one_line():
    every = load_config(None, environ=EVERY_KEY)
    assert every.left_out_warning() is None and all(p.usable for p in every.providers.values())
    some = load_config(None, environ={"OPENAI_API_KEY": "o"})
    assert some.providers["openai"].usable and not some.providers["anthropic"].usable
    assert some.left_out_warning() == (
        "providers left out, their key variable not set: anthropic (ANTHROPIC_API_KEY), google (GEMINI_API_KEY), "
        "deepseek (DEEPSEEK_API_KEY); their models are not listed and are refused saying why (set the variable "
        "to serve them)")


@pytest.mark.live
def test_check_config_warns_in_one_line_for_the_default_catalogue_and_refuses_an_own_provider(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "o"}
    bare = tmp_path / "bare.toml"
    bare.write_text(f'[server]\ndata_dir = "{tmp_path}"\n')
    checked = subprocess.run([str(BIN / "gatewayd"), "check-config", str(bare)], capture_output=True, text=True,
                             timeout=30, env=env)
    assert checked.returncode == 0, checked.stderr
    [warning] = checked.stderr.strip().splitlines()
    assert warning.startswith("gatewayd: warning: providers left out") and "ANTHROPIC_API_KEY" in warning
    own = tmp_path / "own.toml"
    own.write_text(f'[server]\ndata_dir = "{tmp_path}"\n[[providers]]\nname = "o"\nprotocol = "openai"\n'
                   'base_url = "https://o.test/v1"\napi_key_env = "MY_UNSET_KEY"\n[[models]]\nid = "m"\nprovider = "o"\n')
    checked = subprocess.run([str(BIN / "gatewayd"), "check-config", str(own)], capture_output=True, text=True,
                             timeout=30, env=env)
    assert (checked.returncode, checked.stdout) == (2, "")
    [line] = checked.stderr.strip().splitlines()
    assert line == ("gatewayd: config error: providers[0].api_key_env: the environment variable MY_UNSET_KEY is not "
                    "set (provider 'o' would be called without a key)")


async def test_a_left_out_providers_models_are_unlisted_and_refused_saying_why(tmp_path):
    def never(request: httpx.Request) -> httpx.Response:
        raise AssertionError("a left-out provider was called")

    gw = Gateway(tmp_path, never)
    try:
        config = load_config(None, environ={"OPENAI_API_KEY": "o"})  # anthropic, google, deepseek left out
        gw.relay.config = config
        gw.directory.config = config
        _, secret = await gw.funded_key()
        headers = {"authorization": f"Bearer {secret}"}
        listed = {m["id"] for m in (await gw.http.get("/v1/models", headers=headers)).json()["data"]}
        assert "gpt-4.1-mini" in listed and not {"claude-haiku-4-5", "gemini-2.5-flash", "deepseek-chat"} & listed
        body = {"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": "hi"}]}
        response = await gw.http.post("/v1/chat/completions", content=orjson.dumps(body), headers=headers)
        assert response.status_code == 503 and response.json()["error"]["code"] == "model_not_found"
        assert "the operator sets ANTHROPIC_API_KEY" in response.json()["error"]["message"]
    finally:
        await gw.aclose()


CHAT_ANSWER = {"id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-4.1-mini",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


async def test_a_provider_refusing_the_gateways_key_marks_its_route_misconfigured_and_fails_over(tmp_path, caplog):
    import attrs

    def provider(request: httpx.Request) -> httpx.Response:
        if request.url.host == "backup.test":
            return httpx.Response(200, json=CHAT_ANSWER)
        return httpx.Response(401, json={"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                                   "code": "invalid_api_key"}})

    gw = Gateway(tmp_path, provider)
    try:
        model = gw.config.models["gpt-4.1-mini"]
        [primary] = model.routes
        backup = attrs.evolve(primary.provider, name="openai-backup", base_url="http://backup.test/v1")
        routes = (primary, attrs.evolve(primary, provider=backup, priority=-1))
        config = attrs.evolve(gw.config, models={**gw.config.models, model.id: attrs.evolve(model, routes=routes)})
        gw.relay.config = config
        _, secret = await gw.funded_key()
        caplog.set_level("INFO")
        body = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}
        response = await gw.http.post("/v1/chat/completions", content=orjson.dumps(body),
                                      headers={"authorization": f"Bearer {secret}"})
        assert response.status_code == 200, response.text  # served by the other route
        [report] = [r for r in gw.relay.router.report(config.models) if r["route"] == primary.name]
        assert report["state"] == "misconfigured" and "Incorrect API key" in report["misconfigured"]
        metrics = (await gw.http.get("/metrics")).text
        assert f'gateway_route_misconfigured{{route="{primary.name}"}} 1.0' in metrics
        [event] = [r for r in caplog.records if "is misconfigured" in r.getMessage()]
        assert event.levelname == "ERROR" and event.fields["provider"] == "openai"
    finally:
        await gw.aclose()
