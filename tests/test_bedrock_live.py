"""Issue 21, Bedrock, live: the official SDKs through gatewayd to the simulator's Bedrock
runtime (SigV4 verified there), one daemon for the module.

Claude on Bedrock (InvokeModel, event-stream ``chunk`` frames) serves messages (passed
through), chat and responses; Amazon Nova (Converse / ConverseStream) serves the same three
translated. Every charge equals the provider's own bill for the answer the simulator
logged (tests/sim/provider_bill.py), cache reads and both write TTLs included.
"""

from __future__ import annotations

import json
import time
import uuid

import anthropic
import httpx
import openai
import pytest

from gatewayd.sim import bedrock as sim_bedrock
from tests.live import Daemon, free_port
from tests.sim.provider_bill import provider_bill

CLAUDE = "claude-on-bedrock"
CLAUDE_ID = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
NOVA = "nova-on-bedrock"
NOVA_ID = "amazon.nova-pro-v1:0"
LLAMA = "llama-on-bedrock"
LLAMA_ID = "meta.llama3-3-70b-instruct-v1:0"
PRICES = {  # nano-USD a token
    CLAUDE: {"input": 3000, "output": 15000, "cached_input": 300, "cache_write": 3750, "cache_write_1h": 6000},
    NOVA: {"input": 800, "output": 3200, "cached_input": 200, "cache_write": 800},
    LLAMA: {"input": 720, "output": 720, "cached_input": 720, "cache_write": 720},
}
ENV = {"TEST_BEDROCK_KEY_ID": sim_bedrock.ACCESS_KEY_ID, "TEST_BEDROCK_SECRET": sim_bedrock.SECRET_ACCESS_KEY,
       "TEST_BEDROCK_WRONG_SECRET": "not-the-secret", "TEST_BEDROCK_API_KEY": sim_bedrock.API_KEY}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                          "required": ["city"]}}}


def _extra(sim_url: str) -> str:
    dead = free_port()
    return f"""
[[providers]]
name = "bedrock"
protocol = "bedrock"
region = "us-east-1"
base_url = "{sim_url}/bedrock"
aws_access_key_id_env = "TEST_BEDROCK_KEY_ID"
aws_secret_access_key_env = "TEST_BEDROCK_SECRET"

[[providers]]
name = "bedrock-wrong-secret"
protocol = "bedrock"
region = "eu-west-1"
base_url = "{sim_url}/bedrock"
aws_access_key_id_env = "TEST_BEDROCK_KEY_ID"
aws_secret_access_key_env = "TEST_BEDROCK_WRONG_SECRET"

[[providers]]
name = "bedrock-api-key"
protocol = "bedrock"
region = "us-west-2"
base_url = "{sim_url}/bedrock"
api_key_env = "TEST_BEDROCK_API_KEY"

[[providers]]
name = "anthropic-down"
protocol = "anthropic"
base_url = "http://127.0.0.1:{dead}"
api_key = "k"

[[models]]
id = "{CLAUDE}"
provider = "bedrock"
upstream_id = "{CLAUDE_ID}"
family = "claude"
input_price = 3.00
output_price = 15.00
cached_input_price = 0.30
cache_write_price = 3.75
max_output_tokens = 64000

[[models]]
id = "{NOVA}"
provider = "bedrock"
upstream_id = "{NOVA_ID}"
input_price = 0.80
output_price = 3.20
cached_input_price = 0.20
cache_write_price = 0.80
max_output_tokens = 10000

[[models]]
id = "{LLAMA}"
provider = "bedrock"
upstream_id = "{LLAMA_ID}"
input_price = 0.72
output_price = 0.72
max_output_tokens = 8192

[[models]]
id = "claude-bedrock-wrong-secret"
provider = "bedrock-wrong-secret"
upstream_id = "anthropic.claude-3-haiku-20240307-v1:0"
family = "claude"
input_price = 1.00
output_price = 5.00

[[models]]
id = "claude-bedrock-api-key"
provider = "bedrock-api-key"
upstream_id = "global.anthropic.claude-haiku-4-5-20251001-v1:0"
family = "claude"
input_price = 1.00
output_price = 5.00

[[models]]
id = "claude-anthropic-then-bedrock"
family = "claude"
input_price = 3.00
output_price = 15.00
cached_input_price = 0.30
cache_write_price = 3.75
cache_write_1h_price = 6.00
[[models.routes]]
provider = "anthropic-down"
upstream_id = "claude-sonnet-4-5"
priority = 2
[[models.routes]]
provider = "bedrock"
upstream_id = "{CLAUDE_ID}"
priority = 1
"""


@pytest.fixture(scope="module")
def gateway(sim, tmp_path_factory):
    """The module's own daemon (named ``gateway`` so tests/conftest.py audits it after each test)."""
    d = Daemon(tmp_path_factory.mktemp("bedrock"), sim.url, extra=_extra(sim.url), env=ENV)
    yield d
    d.stop()


def tag() -> str:
    return "bdrk-" + uuid.uuid4().hex[:10]


def assert_billed(gateway, account, sim, marker: str, model: str, *, stream: bool, provider: str = "bedrock") -> dict:
    """The one usage row is ok and costs what the provider bills for the answer it logged."""
    [row] = gateway.admin.usage(account["id"])[:1]
    received = sim.last_request(marker)
    kind = "converse" if "/converse" in received["path"] else "messages"
    assert (row["model"], row["stream"], row["status"]) == (model, stream, "ok")
    assert row["cost_nano"] == provider_bill(kind, received["answer"], PRICES[model if model in PRICES else CLAUDE])
    return row


def oa(gateway, secret) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)


def an(gateway, secret) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=secret, max_retries=0)


# -- Claude through InvokeModel ----------------------------------------------------------------


def test_messages_pass_through_to_invoke_model_with_both_cache_ttls(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    system = [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    done = an(gateway, secret).messages.create(
        model=CLAUDE, max_tokens=300, system=system, extra_headers={"anthropic-beta": "context-1m-2025-08-07"},
        messages=[{"role": "user", "content": f"hi {marker} [[sim:words=6]] [[sim:cache_read=50]] "
                                              f"[[sim:cache_write=20]]"}])
    assert len(done.content[0].text.split()) == 6
    received = sim.last_request(marker)
    assert received["path"] == "/bedrock/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke"  # the log shows the path decoded
    assert received["headers"]["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={sim_bedrock.ACCESS_KEY_ID}/")
    body = received["json"]
    assert body["anthropic_version"] == "bedrock-2023-05-31" and body["anthropic_beta"] == ["context-1m-2025-08-07"]
    assert "model" not in body and "stream" not in body and body["system"] == system
    usage = received["answer"]["usage"]
    assert usage["cache_creation"]["ephemeral_1h_input_tokens"] == 20 and usage["cache_read_input_tokens"] == 50
    row = assert_billed(gateway, account, sim, marker, CLAUDE, stream=False)
    assert (row["cached_tokens"], row["cache_write_tokens"]) == (50, 20)

    marker = tag()
    with an(gateway, secret).messages.stream(
            model=CLAUDE, max_tokens=4000, thinking={"type": "enabled", "budget_tokens": 1024},
            messages=[{"role": "user", "content": f"think {marker} [[sim:words=5]] [[sim:thinking]]"}]) as s:
        final = s.get_final_message()
    assert final.content[0].type == "thinking" and final.content[0].signature
    assert len(final.content[-1].text.split()) == 5
    assert sim.last_request(marker)["path"].endswith("/invoke-with-response-stream")
    assert_billed(gateway, account, sim, marker, CLAUDE, stream=True)


def test_chat_tool_round_trip_and_stream_to_claude_on_bedrock(gateway, sim, funded):
    account, _, secret = funded
    client = oa(gateway, secret)
    marker = tag()
    messages = [{"role": "user", "content": f"weather in Paris? {marker}"}]
    first = client.chat.completions.create(model=CLAUDE, messages=messages, tools=[WEATHER])
    [call] = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls" and json.loads(call.function.arguments) == {"city": "sim-city"}
    assert_billed(gateway, account, sim, marker, CLAUDE, stream=False)

    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    chunks = list(client.chat.completions.create(model=CLAUDE, messages=messages, tools=[WEATHER], stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "sunny" in text and chunks[-1].usage.completion_tokens > 0
    received = sim.last_request(marker)
    assert received["path"].endswith("/invoke-with-response-stream")
    assert received["json"]["messages"][-1]["content"][0]["type"] == "tool_result"
    assert_billed(gateway, account, sim, marker, CLAUDE, stream=True)


def test_responses_to_claude_on_bedrock(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    done = oa(gateway, secret).responses.create(model=CLAUDE, input=f"hello {marker} [[sim:words=4]]")
    assert len(done.output_text.split()) == 4
    assert_billed(gateway, account, sim, marker, CLAUDE, stream=False)
    marker = tag()
    events = list(oa(gateway, secret).responses.create(model=CLAUDE, input=f"hey {marker} [[sim:words=3]]",
                                                       stream=True))
    assert events[-1].type == "response.completed" and len(events[-1].response.output_text.split()) == 3
    assert_billed(gateway, account, sim, marker, CLAUDE, stream=True)


# -- Nova through Converse -----------------------------------------------------------------------


def test_chat_to_a_converse_model_with_tools_and_cache(gateway, sim, funded):
    account, _, secret = funded
    client = oa(gateway, secret)
    marker = tag()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"weather? {marker}"}]
    first = client.chat.completions.create(model=NOVA, messages=messages, tools=[WEATHER], max_tokens=500)
    [call] = first.choices[0].message.tool_calls
    assert json.loads(call.function.arguments) == {"city": "sim-city"}
    received = sim.last_request(marker)
    assert received["path"] == "/bedrock/model/amazon.nova-pro-v1:0/converse"
    assert received["json"]["system"] == [{"text": "Be brief."}]
    assert received["json"]["inferenceConfig"] == {"maxTokens": 500}
    assert received["json"]["toolConfig"]["tools"][0]["toolSpec"]["name"] == "get_weather"
    assert_billed(gateway, account, sim, marker, NOVA, stream=False)

    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "rainy"}]
    chunks = list(client.chat.completions.create(
        model=NOVA, messages=messages, tools=[WEATHER], stream=True, stream_options={"include_usage": True}))
    assert "rainy" in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    received = sim.last_request(marker)
    assert received["path"].endswith("/converse-stream")
    assert received["json"]["messages"][-1]["content"][0]["toolResult"]["content"] == [{"text": "rainy"}]
    assert_billed(gateway, account, sim, marker, NOVA, stream=True)

    marker = tag()
    client.chat.completions.create(model=NOVA, messages=[
        {"role": "user", "content": f"cached {marker} [[sim:cache_read=30]] [[sim:cache_write=12]]"}])
    row = assert_billed(gateway, account, sim, marker, NOVA, stream=False)
    assert (row["cached_tokens"], row["cache_write_tokens"]) == (30, 12)


@pytest.mark.parametrize("model", [NOVA, LLAMA])
def test_a_converse_model_is_refused_on_messages_before_the_provider(gateway, sim, funded, model):
    """Issue 36: only dual-format models (an upstream that speaks Anthropic Messages) are served
    on /v1/messages (the spec); a Converse model is told to use the chat endpoint, with a 4xx,
    and nothing reaches Bedrock or is charged."""
    account, _, secret = funded
    marker = tag()
    with pytest.raises(anthropic.APIStatusError) as refused:
        an(gateway, secret).messages.create(model=model, max_tokens=200, messages=[
            {"role": "user", "content": f"hi {marker}"}])
    assert 400 <= refused.value.status_code < 500
    assert "/v1/chat/completions" in refused.value.message
    assert sim.requests(marker) == []
    assert gateway.admin.balance(account["id"])["held_nano"] == 0
    listed = {m.id for m in oa(gateway, secret).models.list()}
    assert model in listed  # still offered, through the chat and responses endpoints


def test_responses_and_chat_to_a_converse_model(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    done = oa(gateway, secret).responses.create(model=NOVA, input=f"hello {marker} [[sim:words=4]]")
    assert len(done.output_text.split()) == 4
    assert_billed(gateway, account, sim, marker, NOVA, stream=False)
    marker = tag()
    chunks = list(oa(gateway, secret).chat.completions.create(
        model=LLAMA, stream=True, messages=[{"role": "user", "content": f"hi {marker} [[sim:words=5]]"}]))
    assert len("".join(c.choices[0].delta.content or "" for c in chunks if c.choices).split()) == 5
    assert sim.last_request(marker)["path"] == "/bedrock/model/meta.llama3-3-70b-instruct-v1:0/converse-stream"
    assert_billed(gateway, account, sim, marker, LLAMA, stream=True)


# -- failures ----------------------------------------------------------------------------------


def test_anthropic_route_down_bedrock_serves(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    done = an(gateway, secret).messages.create(model="claude-anthropic-then-bedrock", max_tokens=100, messages=[
        {"role": "user", "content": f"hi {marker} [[sim:words=3]]"}])
    assert len(done.content[0].text.split()) == 3
    row = assert_billed(gateway, account, sim, marker, "claude-anthropic-then-bedrock", stream=False)
    assert row["request_id"]


def test_an_exception_frame_mid_stream_ends_the_stream_as_a_provider_error(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    with pytest.raises(openai.APIError) as chat_mid:
        list(oa(gateway, secret).chat.completions.create(model=CLAUDE, stream=True, messages=[
            {"role": "user", "content": f"long {marker} [[sim:words=40]] [[sim:fault=error_after:3]]"}]))
    assert "simulated mid-stream error" in str(chat_mid.value)
    with pytest.raises(anthropic.APIError) as mid:
        with an(gateway, secret).messages.stream(model=CLAUDE, max_tokens=300, messages=[
                {"role": "user", "content": f"long {marker} [[sim:words=40]] [[sim:fault=error_after:3]]"}]) as s:
            s.get_final_message()
    assert "simulated mid-stream error" in str(mid.value)
    rows = gateway.admin.usage(account["id"])
    assert [r["status"] for r in rows[:2]] == ["upstream_error", "upstream_error"]


def test_chat_stream_with_an_exception_frame_tells_the_client(gateway, sim, funded):
    _, _, secret = funded
    with pytest.raises(openai.APIError) as mid:
        list(oa(gateway, secret).chat.completions.create(model=NOVA, stream=True, messages=[
            {"role": "user", "content": f"long {tag()} [[sim:words=40]] [[sim:fault=error_after:3]]"}]))
    assert "simulated mid-stream error" in str(mid.value)


def test_throttling_is_a_429_with_bedrocks_message(gateway, sim, funded):
    _, _, secret = funded
    with pytest.raises(openai.RateLimitError) as throttled:
        oa(gateway, secret).chat.completions.create(model=NOVA, messages=[
            {"role": "user", "content": f"{tag()} [[sim:fault=status:429]]"}])
    assert "simulated error 429" in throttled.value.message
    with pytest.raises(anthropic.RateLimitError) as throttled_messages:
        an(gateway, secret).messages.create(model=CLAUDE, max_tokens=10, messages=[
            {"role": "user", "content": f"{tag()} [[sim:fault=status:429]]"}])
    assert throttled_messages.value.body["error"]["type"] == "rate_limit_error"


def test_a_wrong_secret_is_the_gateways_502_and_nothing_is_charged(gateway, sim, funded):
    account, _, secret = funded
    with pytest.raises(openai.APIStatusError) as refused:
        oa(gateway, secret).chat.completions.create(model="claude-bedrock-wrong-secret", messages=[
            {"role": "user", "content": "hi"}])
    assert refused.value.status_code == 502
    assert "Bedrock refused the gateway's credentials (InvalidSignatureException)" in refused.value.message
    [row] = gateway.admin.usage(account["id"])
    assert (row["status"], row["cost_nano"]) == ("upstream_error", 0)


def test_a_bedrock_api_key_is_sent_as_bearer(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    oa(gateway, secret).chat.completions.create(model="claude-bedrock-api-key", messages=[
        {"role": "user", "content": f"hi {marker}"}])
    received = sim.last_request(marker)
    assert received["headers"]["authorization"] == f"Bearer {sim_bedrock.API_KEY}"
    assert received["path"] == "/bedrock/model/global.anthropic.claude-haiku-4-5-20251001-v1:0/invoke"  # the log shows the path decoded


@pytest.mark.parametrize("path, model", [("/v1/messages", CLAUDE), ("/v1/chat/completions", CLAUDE),
                                         ("/v1/chat/completions", NOVA)])
def test_a_client_that_leaves_mid_stream_pays_the_providers_bill(gateway, sim, funded, path, model):
    """The pump reads the Bedrock stream on to its usage (message_delta / Converse metadata)."""
    account, _, secret = funded
    marker = tag()
    text = f"long {marker} [[sim:words=200]] [[sim:fault=chunk_delay_ms:10]]"
    body = ({"model": model, "max_tokens": 1000, "stream": True, "messages": [{"role": "user", "content": text}]}
            if path == "/v1/messages" else {"model": model, "stream": True,
                                            "messages": [{"role": "user", "content": text}]})
    got = b""
    with httpx.Client(timeout=15) as http:
        with http.stream("POST", gateway.url + path, json=body, headers={"authorization": f"Bearer {secret}"}) as r:
            assert r.status_code == 200
            for chunk in r.iter_raw():
                got += chunk
                if got.count(b"\n\n") >= 6:
                    break
    for _ in range(100):  # the gateway settles once it has read the provider's stream to its end
        rows = gateway.admin.usage(account["id"])
        if rows and rows[0]["status"] != "pending":
            break
        time.sleep(0.1)
    [row] = rows
    entry = sim.last_request(marker)
    assert entry["cancelled"] is False and row["status"] == "client_disconnected"
    kind = "converse" if model == NOVA else "messages"
    assert row["cost_nano"] == provider_bill(kind, entry["answer"], PRICES[model])
    assert row["output_tokens"] == 200
