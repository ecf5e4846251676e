"""Vertex AI in-process: the config contract and its errors, the requests the adapter builds
(URL, body edits in the bytes, headers), its error mapping, and a token endpoint that cannot
be reached. The wire itself, the token flow and billing are in test_vertex_live.py."""

from __future__ import annotations

import json
import os
import subprocess

import httpx
import orjson
import pytest
from werkzeug.datastructures import Headers

from gatewayd.config import ConfigError, load_config
from gatewayd.errors import BodyError, UpstreamError
from gatewayd.formats.raw_json import replace_top_level_member
from gatewayd.providers import vertex
from gatewayd.providers.base import Call
from gatewayd.providers.upstream import AUTHORIZE_EXTENSION, Upstream
from gatewayd.cloud.vertex_auth import AccessTokens, TokenUnavailable, from_service_account_info
from gatewayd.sim.vertex import new_key_pair
from tests.live import BIN


def service_account(token_uri: str = "http://127.0.0.1:1/token") -> dict:
    private, _ = new_key_pair()
    return {"type": "service_account", "project_id": "p-test", "private_key_id": "k1", "private_key": private,
            "client_email": "unit@p-test.iam.gserviceaccount.com", "client_id": "1", "token_uri": token_uri}


@pytest.fixture(scope="module")
def sa_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sa") / "sa.json"
    path.write_text(json.dumps(service_account()))
    return path


def config_text(provider: str, upstream_id: str = "claude-sonnet-4-5@20250929") -> str:
    return (f"[[providers]]\nname = 'vx'\nprotocol = 'vertex'\n{provider}\n"
            f"[[models]]\nid = 'm'\nprovider = 'vx'\nupstream_id = '{upstream_id}'\ninput_price = 3.0\n"
            "output_price = 15.0\nfamily = 'claude'\n")


def load(tmp_path, text: str):
    path = tmp_path / "gatewayd.toml"
    path.write_text(text)
    return load_config(path, environ={})


def test_config_defaults_the_regional_and_global_endpoints(tmp_path, sa_file):
    regional = load(tmp_path, config_text(f"project = 'my-project'\nregion = 'us-east5'\ncredentials_file = '{sa_file}'"))
    provider = regional.providers["vx"]
    assert provider.base_url == "https://us-east5-aiplatform.googleapis.com"
    assert (provider.settings["project"], provider.settings["region"]) == ("my-project", "us-east5")
    assert isinstance(provider.settings["credentials"], AccessTokens)
    glob = load(tmp_path, config_text(f"project = 'my-project'\nregion = 'global'\ncredentials_file = '{sa_file}'"))
    assert glob.providers["vx"].base_url == "https://aiplatform.googleapis.com"
    given = load(tmp_path, config_text(f"project = 'my-project'\nregion = 'europe-west1'\n"
                                       f"credentials_file = '{sa_file}'\nbase_url = 'http://127.0.0.1:9/x/'"))
    assert given.providers["vx"].base_url == "http://127.0.0.1:9/x"
    # the same file on a reload: an equal provider (the token cache is not part of it)
    again = load(tmp_path, config_text(f"project = 'my-project'\nregion = 'us-east5'\ncredentials_file = '{sa_file}'"))
    assert again.providers["vx"] == provider


@pytest.mark.parametrize("keys, message", [
    ("region = 'us-east5'", "providers[0].project: required for protocol vertex"),
    ("project = 'My Project'\nregion = 'us-east5'", "providers[0].project: 'My Project' is not a Google Cloud project id"),
    ("project = 'my-project'", "providers[0].region: must be \"global\" or a Google Cloud region"),
    ("project = 'my-project'\nregion = 'us_east5'", "providers[0].region: must be \"global\""),
    ("project = 'my-project'\nregion = 'useast'", "(got 'useast')"),
    ("project = 'my-project'\nregion = 'us-east5'\ncredentials_file = '/nonexistent/sa.json'",
     "providers[0].credentials_file: cannot read /nonexistent/sa.json: No such file or directory"),
    ("project = 'my-project'\nregion = 'us-east5'\napi_version = '1'",
     "providers[0].api_version: not a setting of protocol vertex (only of azure-openai)"),
])
def test_bad_config_names_the_key(tmp_path, keys, message):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, config_text(keys))
    assert message in str(info.value)


@pytest.mark.parametrize("content, message", [
    ("not json", "is not JSON"),
    ("[1, 2]", "is not a JSON object"),
    ('{"type": "service_account", "client_email": "x@y"}', "not usable Google credentials"),
    ('{"type": "nonsense"}', "not usable Google credentials"),
])
def test_invalid_credentials_file_is_a_config_error(tmp_path, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(ConfigError) as info:
        load(tmp_path, config_text(f"project = 'my-project'\nregion = 'us-east5'\ncredentials_file = '{bad}'"))
    assert str(info.value).startswith("providers[0].credentials_file: ") and message in str(info.value)


@pytest.mark.live
def test_cli_no_application_default_credentials_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "gatewayd.toml"
    path.write_text(config_text("project = 'my-project'\nregion = 'us-east5'"))
    env = {k: v for k, v in os.environ.items() if k != "GOOGLE_APPLICATION_CREDENTIALS"}
    env.update(HOME=str(tmp_path), CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), NO_GCE_CHECK="True")
    result = subprocess.run([str(BIN / "gatewayd"), "serve", "--config", str(path)], capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "gatewayd: config error: providers[0].credentials_file: not set, and no application default credentials"), lines


# -- the requests the adapter builds ----------------------------------------------------------


def route_of(tmp_path, sa_file, upstream_id: str):
    config = load(tmp_path, config_text(
        f"project = 'my-project'\nregion = 'us-east5'\ncredentials_file = '{sa_file}'\nbase_url = 'http://vx.test'",
        upstream_id))
    model = config.models["m"]
    return model, model.routes[0]


def call(model, fmt: str, body: dict, *, stream: bool = False, raw: bytes | None = None, headers=None) -> Call:
    return Call(client_format=fmt, model=model, body=body, raw=raw if raw is not None else orjson.dumps(body),
                stream=stream, headers=headers)


UPSTREAM = Upstream(connect_timeout_s=1, stream_idle_timeout_s=5)


def test_messages_pass_through_with_two_edits_in_the_bytes(tmp_path, sa_file):
    model, target = route_of(tmp_path, sa_file, "claude-sonnet-4-5@20250929")
    raw = b'{"model": "m", "max_tokens": 100,  "temperature": 0.50, "messages": [{"role": "user", "content": "caf\xc3\xa9"}]}'
    body = orjson.loads(raw)
    built = vertex.ROUTES["messages"](call(model, "messages", body, raw=raw, stream=True,
                                            headers=Headers({"anthropic-beta": "a,b", "anthropic-version": "x"})),
                                       target, UPSTREAM)
    request = built.request
    assert str(request.url) == ("http://vx.test/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/"
                                "claude-sonnet-4-5@20250929:streamRawPredict")
    sent = request.content
    # the bytes kept as the client wrote them (spacing, 0.50, UTF-8), the version where the model was
    assert sent == (b'{"anthropic_version":"vertex-2023-10-16", "max_tokens": 100,  "temperature": 0.50, '
                    b'"messages": [{"role": "user", "content": "caf\xc3\xa9"}]}')
    assert request.headers["anthropic-beta"] == "a,b"
    assert "x-api-key" not in request.headers and "anthropic-version" not in request.headers
    assert "authorization" not in request.headers  # set when sent, from the token cache
    assert AUTHORIZE_EXTENSION in request.extensions
    non_stream = vertex.ROUTES["messages"](call(model, "messages", body, raw=raw), target, UPSTREAM)
    assert str(non_stream.request.url).endswith(":rawPredict")


def test_chat_to_claude_on_vertex_is_translated_without_model(tmp_path, sa_file):
    model, target = route_of(tmp_path, sa_file, "claude-haiku-4-5@20251001")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
    built = vertex.ROUTES["chat"](call(model, "chat", body), target, UPSTREAM)
    sent = orjson.loads(built.request.content)
    assert "model" not in sent and sent["anthropic_version"] == "vertex-2023-10-16"
    # the gateway's prompt-cache breakpoint on the last block (auto_cache, on for Claude routes)
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi",
                                                              "cache_control": {"type": "ephemeral"}}]}]
    assert sent["max_tokens"] == 50
    assert str(built.request.url).endswith("/publishers/anthropic/models/claude-haiku-4-5@20251001:rawPredict")


def test_gemini_on_vertex_uses_the_gemini_translation(tmp_path, sa_file):
    model, target = route_of(tmp_path, sa_file, "gemini-2.5-flash")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
    built = vertex.ROUTES["chat"](call(model, "chat", body, stream=True), target, UPSTREAM)
    assert str(built.request.url) == ("http://vx.test/v1/projects/my-project/locations/us-east5/publishers/google/"
                                      "models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    sent = orjson.loads(built.request.content)
    assert sent["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert sent["generationConfig"]["maxOutputTokens"] == 50
    assert "x-goog-api-key" not in built.request.headers
    explicit = route_of(tmp_path, sa_file, "google/gemma-3-27b-it")[1]
    assert vertex.model_url(explicit, "generateContent").endswith("/publishers/google/models/gemma-3-27b-it:generateContent")
    with pytest.raises(BodyError, match="does not speak the messages format"):
        vertex.ROUTES["messages"](call(model, "messages", {"model": "m", "max_tokens": 5, "messages": []}),
                                  target, UPSTREAM)


def test_client_formats_are_per_route_so_gemini_on_vertex_serves_no_messages(tmp_path, sa_file):
    """A model's formats come from each route's model, not only its protocol: Gemini on
    Vertex is chat, responses and the Gemini API (refused up front on /v1/messages, never
    planned there), Claude on Vertex dual-format and reached from the Gemini API too
    (translated); a model with both routes plans only Claude for messages."""
    from gatewayd.routing import Router, RoutingSettings

    provider = f"project = 'my-project'\nregion = 'us-east5'\ncredentials_file = '{sa_file}'"
    gemini = load(tmp_path, config_text(provider, "gemini-2.5-flash")).models["m"]
    claude = load(tmp_path, config_text(provider)).models["m"]
    assert gemini.client_formats == {"chat", "responses", "gemini"} and not gemini.dual_format
    assert claude.client_formats == {"chat", "responses", "messages", "gemini"} and claude.dual_format
    both = load(tmp_path, config_text(provider, "gemini-2.5-flash") + (
        "[[models]]\nid = 'both'\ninput_price = 3.0\noutput_price = 15.0\n"
        "[[models.routes]]\nprovider = 'vx'\nupstream_id = 'gemini-2.5-flash'\n"
        "[[models.routes]]\nprovider = 'vx'\nupstream_id = 'claude-sonnet-4-5@20250929'\n")).models["both"]
    assert both.dual_format
    router = Router(RoutingSettings())
    assert [r.upstream_id for r in router.plan(both, "messages")] == ["claude-sonnet-4-5@20250929"]
    assert {r.upstream_id for r in router.plan(both, "chat")} == {"gemini-2.5-flash", "claude-sonnet-4-5@20250929"}


def test_vertex_errors_keep_status_and_tell_the_retry_hint(tmp_path, sa_file):
    model, target = route_of(tmp_path, sa_file, "claude-sonnet-4-5@20250929")
    exhausted = orjson.dumps({"error": {"code": 429, "message": "Quota exceeded for aiplatform.googleapis.com",
                                        "status": "RESOURCE_EXHAUSTED", "details": [
                                            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12.5s"}]}})
    error = UpstreamError(429, exhausted, {})
    messages_route = vertex.ROUTES["messages"](call(model, "messages", {"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "x"}]}), target, UPSTREAM)
    assert messages_route.retry_after(error) == 12.5
    status, body, headers = messages_route.upstream_error(error)
    assert (status, headers["retry-after"]) == (429, "13")
    assert orjson.loads(body) == {"type": "error", "error": {"type": "rate_limit_error",
                                                              "message": "Quota exceeded for aiplatform.googleapis.com"}}
    chat_route = vertex.ROUTES["chat"](call(model, "chat", {"model": "m", "messages": [{"role": "user", "content": "x"}]}),
                                       target, UPSTREAM)
    status, body, headers = chat_route.upstream_error(UpstreamError(503, orjson.dumps(
        {"error": {"code": 503, "message": "The service is currently unavailable.", "status": "UNAVAILABLE"}}), {}))
    assert status == 503 and orjson.loads(body)["error"]["message"] == "The service is currently unavailable."
    assert "retry-after" not in headers


def test_replace_top_level_member_in_the_bytes():
    def replaced(raw: bytes, members=None) -> bytes | None:
        return replace_top_level_member(raw, orjson.loads(raw), "model", members or {})

    assert replaced(b'{"model":"x","a":1}') == b'{"a":1}'
    assert replaced(b'{"a":1, "model" : "x" }') == b'{"a":1 }'
    assert replaced(b'{"model":"x"}') == b"{}"
    assert replaced(b'{"a":{"b":2},"model":"m","c":[1]}') == b'{"a":{"b":2},"c":[1]}'
    assert replaced(b'{"a":1, "model": "m" ,"c":2}', {"v": "1"}) == b'{"a":1, "v":"1" ,"c":2}'
    assert replaced(b'{"a":{"model":"z"},"model":"m"}') is None  # twice: the caller re-encodes
    assert replaced(b'{"model":"m","v":"0"}', {"v": "1"}) is None  # v is there: not a second one
    assert vertex.messages_body(b'{"a":{"model":"z"},"model":"m"}', {"a": {"model": "z"}, "model": "m"}) == \
        b'{"a":{"model":"z"},"anthropic_version":"vertex-2023-10-16"}'


async def test_a_token_endpoint_that_cannot_be_reached_fails_the_attempt_as_unreachable():
    tokens = from_service_account_info(service_account("http://127.0.0.1:1/token"), "unit")
    with pytest.raises(TokenUnavailable) as info:
        await tokens.token()
    assert isinstance(info.value, httpx.ConnectError)  # the relay's "unreachable": fail over, cool down
    assert tokens.refreshes == 0
