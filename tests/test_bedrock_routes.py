"""Bedrock in-process: the real relay, ledger and SQLite store, Bedrock and Anthropic as an
httpx.MockTransport answering in their wire formats (event-stream frames included). Throttling
cools the route (Retry-After respected) and another cloud serves; an exception frame before
the first event is the provider's refusal; config mistakes are one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest
from werkzeug.datastructures import Headers

from gatewayd import endpoints
from gatewayd.billing.ledger import Ledger
from gatewayd.config import ConfigError, load_config
from gatewayd.directory import Directory
from gatewayd.formats.eventstream import chunk_frame, exception_frame
from gatewayd.cloud import bedrock_auth
from gatewayd.providers.upstream import AUTHORIZE_EXTENSION, Upstream
from gatewayd.relay import Ctx, Relay
from gatewayd.store.base import UsageQuery
from gatewayd.store.sqlite import SQLiteStore

BIN = Path(sys.executable).parent
CONFIG = """
[routing]
failures_to_cool = 2
cooldown_s = 60
[[providers]]
name = "bd"
protocol = "bedrock"
region = "us-east-1"
aws_access_key_id_env = "T_BEDROCK_ID"
aws_secret_access_key_env = "T_BEDROCK_SECRET"
[[providers]]
name = "k"
protocol = "anthropic"
base_url = "http://k.test"
api_key = "kk"
[[models]]
id = "c"
family = "claude"
input_price = 1.0
output_price = 2.0
[[models.routes]]
provider = "bd"
upstream_id = "us.anthropic.claude-x-v1:0"
priority = 2
[[models.routes]]
provider = "k"
upstream_id = "claude-x"
priority = 1
[[models]]
id = "solo"
family = "claude"
provider = "bd"
upstream_id = "anthropic.claude-x-v1:0"
input_price = 1.0
output_price = 2.0
"""
MESSAGE = {"id": "msg", "type": "message", "role": "assistant", "model": "x", "content": [{"type": "text", "text": "ok"}],
           "stop_reason": "end_turn", "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}


async def _body(data: bytes):
    yield data


def _events(text: str) -> list[dict]:
    """An Anthropic stream saying ``text``: 10 tokens in, 5 out."""
    return [{"type": "message_start", "message": {**MESSAGE, "content": [], "usage": {
        "input_tokens": 10, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"}]


class Clouds:
    def __init__(self) -> None:
        self.bedrock = "ok"  # "ok" | "throttle" | "throttle_after_30s" | "stream_throttle"
        self.seen: list[str] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        self.seen.append(host.split(".")[0])
        if host == "k.test" and orjson.loads(request.content).get("stream"):
            return httpx.Response(200, content=_body(b"".join(
                b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n"
                for e in _events("from anthropic"))))
        if host == "k.test":
            return httpx.Response(200, content=_body(orjson.dumps({**MESSAGE, "content": [
                {"type": "text", "text": "from anthropic"}]})))
        assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDTEST/")
        if self.bedrock.startswith("throttle"):
            headers = {"x-amzn-errortype": "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"}
            if self.bedrock.endswith("30s"):
                headers["retry-after"] = "30"
            return httpx.Response(429, headers=headers, content=_body(b'{"message":"Too many requests, please wait"}'))
        if self.bedrock == "stream_throttle":
            return httpx.Response(200, content=_body(exception_frame("throttlingException", "Too many tokens")))
        if request.url.path.endswith("-stream"):
            frames = b"".join(chunk_frame(orjson.dumps(e)) for e in _events("from bedrock"))
            return httpx.Response(200, content=_body(frames))
        return httpx.Response(200, content=_body(orjson.dumps({**MESSAGE, "content": [
            {"type": "text", "text": "from bedrock"}]})))


@pytest.fixture
async def world(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text(CONFIG)
    config = load_config(path, environ={"T_BEDROCK_ID": "AKIDTEST", "T_BEDROCK_SECRET": "secret"})
    store = SQLiteStore(str(tmp_path / "store.db"))
    directory = Directory(config, store)
    account = await directory.create_account("b@example.com")
    await directory.pay(account, 10_000_000_000)
    _, secret = await directory.create_key(account, name="k")
    upstream = Upstream(connect_timeout_s=1, stream_idle_timeout_s=5)
    clouds = Clouds()
    upstream.transport = httpx.MockTransport(clouds.handle)
    relay = Relay(config, directory, Ledger(store), upstream)
    yield relay, secret, clouds, store, account
    await store.close()


async def chat(relay, secret, model="c", stream=False):
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    ctx = Ctx(request_id="req", client_ip="127.0.0.1", headers=Headers({"authorization": f"Bearer {secret}"}),
              endpoint="chat")
    status, headers, out = await relay.serve(endpoints.CHAT, ctx, orjson.dumps(body))
    if not isinstance(out, bytes):
        out = b"".join([piece async for piece in out])
    return status, headers, out


async def test_bedrock_serves_signed_and_the_default_base_url_is_regional(world):
    relay, secret, clouds, _, _ = world
    assert relay.config.providers["bd"].base_url == "https://bedrock-runtime.us-east-1.amazonaws.com"
    for stream in (False, True):
        status, _, out = await chat(relay, secret, stream=stream)
        assert status == 200 and b"from bedrock" in out
    assert clouds.seen == ["bedrock-runtime", "bedrock-runtime"]


async def test_throttling_with_retry_after_cools_bedrock_and_anthropic_serves(world):
    relay, secret, clouds, store, account = world
    clouds.bedrock = "throttle_after_30s"
    status, _, out = await chat(relay, secret)
    assert status == 200 and b"from anthropic" in out and clouds.seen == ["bedrock-runtime", "k"]
    report = {r["route"]: r for r in relay.router.report(relay.config.models)}
    cooled = report["bd/us.anthropic.claude-x-v1:0"]
    assert cooled["state"] == "cooling" and 29 <= cooled["cooling_for_s"] <= 30
    clouds.seen.clear()
    status, _, _ = await chat(relay, secret)
    assert status == 200 and clouds.seen == ["k"]  # skipped while it cools
    await store.flush()
    rows = await store.usage_rows(UsageQuery(account_id=account.id), 10)
    assert [(r.provider, r.attempts, r.status) for r in reversed(rows)] == [("k", 2, "ok"), ("k", 1, "ok")]


async def test_throttling_on_the_only_route_is_a_429_with_bedrocks_message(world):
    relay, secret, clouds, _, _ = world
    clouds.bedrock = "throttle"
    status, _, out = await chat(relay, secret, model="solo")
    assert status == 429
    assert orjson.loads(out)["error"] == {"message": "Too many requests, please wait", "type": "rate_limit_error",
                                          "param": None, "code": None}


async def test_an_exception_frame_before_any_event_is_the_providers_429_and_costs_nothing(world):
    relay, secret, clouds, store, account = world
    clouds.bedrock = "stream_throttle"
    status, _, out = await chat(relay, secret, model="solo", stream=True)
    assert status == 429 and orjson.loads(out)["error"]["message"] == "Too many tokens"
    await store.flush()
    [row] = await store.usage_rows(UsageQuery(account_id=account.id), 10)
    assert (row.status, row.cost_nano) == ("upstream_error", 0)


async def test_an_exception_frame_before_any_event_gives_way_to_the_next_route(world):
    relay, secret, clouds, store, account = world
    clouds.bedrock = "stream_throttle"
    status, _, out = await chat(relay, secret, model="c", stream=True)
    assert status == 200 and b"from anthropic" in out and clouds.seen == ["bedrock-runtime", "k"]
    await store.flush()
    [row] = await store.usage_rows(UsageQuery(account_id=account.id), 10)
    assert (row.provider, row.attempts, row.status, row.cost_nano) == ("k", 2, "ok", 10 * 1000 + 5 * 2000)


def _bedrock(extra: str) -> str:
    return f"[[providers]]\nname = 'b'\nprotocol = 'bedrock'\n{extra}\n[[models]]\nid = 'm'\nprovider = 'b'\n"


@pytest.mark.parametrize("extra, message", [
    ("region = 'Virginia'\napi_key = 'k'", "providers[0].region: must be an AWS region such as us-east-1"),
    ("api_key = 'k'", "providers[0].region: must be an AWS region"),
    ("region = 'us-east-1'\napi_key_env = 'T_UNSET_KEY'", "providers[0].api_key_env: environment variable T_UNSET_KEY is not set"),
    ("region = 'us-east-1'\naws_access_key_id_env = 'T_UNSET_ID'\naws_secret_access_key_env = 'T_UNSET_SECRET'",
     "providers[0].aws_access_key_id_env: environment variable T_UNSET_ID is not set"),
    ("region = 'us-east-1'\naws_secret_access_key_env = 'HOME'", "providers[0].aws_access_key_id_env: required"),
    ("region = 'us-east-1'", "providers[0].credentials: no AWS credentials found"),
    ("region = 'us-east-1'\napi_key = 'k'\ncolour = 'p'", "providers[0].colour: unknown key"),
    ("region = 'us-east-1'\napi_key = 'k'\nproject = 'p'",
     "providers[0].project: not a setting of protocol bedrock (only of vertex)"),
])
def test_bad_bedrock_config_names_the_key(tmp_path, monkeypatch, extra, message):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(bedrock_auth, "_chain", None)
    path = tmp_path / "g.toml"
    path.write_text(_bedrock(extra))
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert message in str(info.value)


def test_credential_variables_are_read_from_the_loaders_environment_only(tmp_path, monkeypatch):
    """As every ``*_env`` key of the config: what ``load_config(environ=...)`` is given, not
    whatever the process happens to have."""
    monkeypatch.setenv("T_IN_PROCESS_ONLY", "from-the-process")
    path = tmp_path / "g.toml"
    path.write_text(_bedrock("region = 'us-east-1'\napi_key_env = 'T_IN_PROCESS_ONLY'"))
    with pytest.raises(ConfigError, match="environment variable T_IN_PROCESS_ONLY is not set"):
        load_config(path, environ={})
    config = load_config(path, environ={"T_IN_PROCESS_ONLY": "given"})
    assert config.providers["b"].settings["auth"].api_key == "given"


@pytest.mark.live
def test_cli_prints_one_line_and_exits_2_for_an_unset_credential_variable(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text(_bedrock("region = 'us-east-1'\naws_access_key_id_env = 'T_UNSET_ID'\n"
                             "aws_secret_access_key_env = 'T_UNSET_SECRET'"))
    result = subprocess.run([str(BIN / "gatewayd"), "serve", "--config", str(path)], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "gatewayd: config error: providers[0].aws_access_key_id_env: environment variable T_UNSET_ID is not set"]


async def test_demo_signs_with_the_simulators_keys(world):
    """``--demo`` points Bedrock at the simulator and signs with its key pair, which the
    simulator's SigV4 check accepts."""
    from gatewayd.providers.bedrock import _request
    from gatewayd.sim import bedrock as sim_bedrock

    relay, *_ = world
    config = relay.config.with_simulator("http://127.0.0.1:9")
    target = config.models["solo"].routes[0]
    assert target.provider.base_url == "http://127.0.0.1:9/bedrock"
    request = _request(Upstream(connect_timeout_s=1, stream_idle_timeout_s=1), target, b"{}", "invoke", stream=False)
    await request.extensions[AUTHORIZE_EXTENSION](request)  # what Upstream.send does before sending
    headers = {k.lower(): v for k, v in request.headers.items()}
    assert sim_bedrock.check_signature("POST", request.url.raw_path.decode(), "", headers, b"{}") is None
    assert request.url.raw_path == b"/bedrock/model/anthropic.claude-x-v1%3A0/invoke"
