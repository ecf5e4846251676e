"""Vertex AI live: the simulator as Google (its token endpoint verifies the service account's
signed JWT; its rawPredict / generateContent take only the tokens it issued), first spoken to
by the libraries a user would check it with (the anthropic SDK's ``AnthropicVertex``,
google-auth + httpx for Gemini), then through one gatewayd daemon: messages, chat and
responses to Claude and Gemini on Vertex, streaming and not, a tool round trip, exact
charges (each usage row equals what the simulator's own answer bills), failover across
clouds both ways, and tokens refreshed before they expire.

Two simulators: ``anth`` plays Anthropic's API (the default catalogue's providers point
there), ``vsim`` plays Vertex AI.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import anthropic
import httpx
import openai
import pytest
from google.oauth2 import service_account

from gatewayd.sim import bedrock as sim_bedrock
from gatewayd.sim.behaviour import signature_for
from gatewayd.sim.vertex import new_key_pair
from tests.faults import new_account, settled_row
from tests.live import BIN, Daemon, Sim, free_port
from tests.sim.provider_bill import provider_bill

pytestmark = pytest.mark.slow

PROJECT = "sim-project"
REGION = "us-east5"
CLAUDE = "claude-sonnet-4-5@20250929"
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
EMAIL = "gateway-test@sim-project.iam.gserviceaccount.com"
CLAUDE_PRICES = {"input": 3000, "output": 15000, "cached_input": 300, "cache_write": 3750, "cache_write_1h": 6000}
GEMINI_PRICES = {"input": 300, "output": 2500, "cached_input": 30}
PRICES = {"vx-claude": ("messages", CLAUDE_PRICES), "vx-failover": ("messages", CLAUDE_PRICES),
          "vx-cooled": ("messages", CLAUDE_PRICES), "vx-short": ("messages", CLAUDE_PRICES),
          "vx-gemini": ("gemini", GEMINI_PRICES), "vx-three-clouds": ("messages", CLAUDE_PRICES)}
# the Bedrock route of vx-three-clouds signs with the simulator's own key pair
BEDROCK_ENV = {"TEST_BEDROCK_KEY_ID": sim_bedrock.ACCESS_KEY_ID, "TEST_BEDROCK_SECRET": sim_bedrock.SECRET_ACCESS_KEY}
CLAUDE_RATES = ("input_price = 3.0\noutput_price = 15.0\ncached_input_price = 0.30\ncache_write_price = 3.75\n"
                "cache_write_1h_price = 6.0\nfamily = 'claude'\nmax_output_tokens = 64000\n")
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def vertex_models(vsim_url: str, sa_path: str, anth_url: str) -> str:
    provider = f"""
protocol = "vertex"
project = "{PROJECT}"
region = "{REGION}"
base_url = "{vsim_url}/vertex"
credentials_file = "{sa_path}"
"""
    return f"""
[[providers]]
name = "vertex"{provider}
[[providers]]
name = "vertex-short"{provider}
[[models]]
id = "vx-claude"
{CLAUDE_RATES}[[models.routes]]
provider = "vertex"
upstream_id = "{CLAUDE}"

[[models]]
id = "vx-gemini"
input_price = 0.30
output_price = 2.50
cached_input_price = 0.03
max_output_tokens = 65536
[[models.routes]]
provider = "vertex"
upstream_id = "gemini-2.5-flash"

[[models]]
id = "vx-failover"
{CLAUDE_RATES}[[models.routes]]
provider = "anthropic"
upstream_id = "claude-sonnet-4-5"
priority = 1
[[models.routes]]
provider = "vertex"
upstream_id = "{CLAUDE}"

[[models]]
id = "vx-cooled"
{CLAUDE_RATES}[[models.routes]]
provider = "vertex"
upstream_id = "{CLAUDE}"
priority = 1
[[models.routes]]
provider = "anthropic"
upstream_id = "claude-sonnet-4-5"

[[models]]
id = "vx-short"
{CLAUDE_RATES}[[models.routes]]
provider = "vertex-short"
upstream_id = "{CLAUDE}"

[[providers]]
name = "anthropic-down"
protocol = "anthropic"
base_url = "http://127.0.0.1:{free_port()}"
api_key = "k"
[[providers]]
name = "bedrock"
protocol = "bedrock"
region = "us-east-1"
base_url = "{anth_url}/bedrock"
aws_access_key_id_env = "TEST_BEDROCK_KEY_ID"
aws_secret_access_key_env = "TEST_BEDROCK_SECRET"
[[models]]
id = "vx-three-clouds"
{CLAUDE_RATES}[[models.routes]]
provider = "anthropic-down"
upstream_id = "claude-sonnet-4-5"
priority = 2
[[models.routes]]
provider = "bedrock"
upstream_id = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
priority = 1
[[models.routes]]
provider = "vertex"
upstream_id = "{CLAUDE}"

[routing]
first_byte_timeout_s = 5
non_stream_first_byte_timeout_s = 5
"""


@pytest.fixture(scope="module")
def key_pair():
    return new_key_pair()


@pytest.fixture(scope="module")
def sims():
    anth, vsim = Sim(), Sim()
    yield anth, vsim
    anth.stop()
    vsim.stop()


@pytest.fixture(scope="module")
def sa_path(sims, key_pair, tmp_path_factory):
    """A service-account key file whose tokens come from the Vertex simulator, which trusts its key."""
    _, vsim = sims
    private, public = key_pair
    path = tmp_path_factory.mktemp("vertex-sa") / "sa.json"
    path.write_text(json.dumps({
        "type": "service_account", "project_id": PROJECT, "private_key_id": "test-key-1", "private_key": private,
        "client_email": EMAIL, "client_id": "100000000000000000042", "token_uri": f"{vsim.url}/token"}))
    vsim.http.put("/_sim/vertex", json={"service_accounts": {EMAIL: public}}).raise_for_status()
    return str(path)


@pytest.fixture(scope="module")
def daemon(sims, sa_path, tmp_path_factory):
    anth, vsim = sims
    d = Daemon(tmp_path_factory.mktemp("vertex-daemon"), anth.url, extra=vertex_models(vsim.url, sa_path, anth.url),
               server="stream_idle_timeout_s = 2\n", env=BEDROCK_ENV)
    yield d
    d.stop()


@pytest.fixture(autouse=True)
def _audit_holds(request):
    yield
    if "daemon" in request.fixturenames:
        report = request.getfixturevalue("daemon").admin.audit()
        assert report["ok"] is True, report


@pytest.fixture
def markers(sims):
    """Set one simulator's every-request markers for one test: markers("vertex", "...")."""
    anth, vsim = sims

    def set_markers(which: str, text: str) -> None:
        (vsim if which == "vertex" else anth).http.put("/_sim/settings", json={"markers": text}).raise_for_status()

    yield set_markers
    for sim in (anth, vsim):
        sim.http.put("/_sim/settings", json={"markers": ""}).raise_for_status()


def tag() -> str:
    return "vx-" + uuid.uuid4().hex[:10]


def credentials(sa_path: str):
    return service_account.Credentials.from_service_account_file(sa_path, scopes=SCOPES)


def assert_billed_exactly(daemon, sim, account: dict, response_id: str, marker: str, model: str, *,
                          provider: str = "vertex") -> dict:
    """The row of a request equals the provider's bill for the answer the simulator gave."""
    row = settled_row(daemon, account["id"], response_id)
    received = sim.last_request(marker)
    protocol, prices = PRICES[model]
    assert (row["model"], row["status"], row["provider"]) == (model, "ok", provider), row
    assert received["status"] == 200 and received["answer"] is not None
    assert row["cost_nano"] == provider_bill(protocol, received["answer"], prices) > 0
    return row


# -- the simulator speaks Vertex: the users' own libraries against it ---------------------------


def test_anthropic_vertex_sdk_against_the_simulator(sims, sa_path):
    _, vsim = sims
    client = anthropic.AnthropicVertex(region=REGION, project_id=PROJECT, credentials=credentials(sa_path),
                                       base_url=f"{vsim.url}/vertex/v1", max_retries=0)
    marker = tag()
    message = client.messages.create(model=CLAUDE, max_tokens=200,
                                     messages=[{"role": "user", "content": f"hello {marker}"}])
    assert message.content[0].text.startswith("This is a simulated reply to: hello")
    received = vsim.last_request(marker)
    assert received["path"] == (f"/vertex/v1/projects/{PROJECT}/locations/{REGION}/publishers/anthropic/models/"
                                f"{CLAUDE}:rawPredict")
    assert received["json"]["anthropic_version"] and "model" not in received["json"]
    assert received["headers"]["authorization"].startswith("Bearer ya29.sim-")
    with client.messages.stream(model=CLAUDE, max_tokens=2000, thinking={"type": "enabled", "budget_tokens": 1024},
                                messages=[{"role": "user", "content": f"stream {marker}"}]) as stream:
        final = stream.get_final_message()
    thinking, text = final.content
    assert thinking.type == "thinking" and thinking.signature == signature_for(thinking.thinking)
    assert text.text.startswith("This is a simulated reply to: stream")
    assert vsim.last_request(f"stream {marker}")["path"].endswith(f"{CLAUDE}:streamRawPredict")


def test_gemini_on_vertex_with_google_auth_and_httpx(sims, sa_path):
    """What google-genai (vertexai=True) sends: a bearer token from google-auth, Vertex's URL."""
    import google.auth.transport.requests

    _, vsim = sims
    creds = credentials(sa_path)
    creds.refresh(google.auth.transport.requests.Request())
    base = f"{vsim.url}/vertex/v1/projects/{PROJECT}/locations/{REGION}/publishers/google/models/gemini-2.5-flash"
    marker = tag()
    body = {"contents": [{"role": "user", "parts": [{"text": f"hi {marker}"}]}]}
    auth = {"authorization": f"Bearer {creds.token}"}
    answer = httpx.post(f"{base}:generateContent", json=body, headers=auth).json()
    assert answer["candidates"][0]["content"]["parts"][0]["text"].startswith("This is a simulated reply to: hi")
    assert answer["usageMetadata"]["promptTokenCount"] > 0
    with httpx.stream("POST", f"{base}:streamGenerateContent?alt=sse", json=body, headers=auth) as streamed:
        events = [json.loads(line[6:]) for line in streamed.iter_lines() if line.startswith("data: ")]
    assert events[-1]["candidates"][0]["finishReason"] == "STOP"
    refused = httpx.post(f"{base}:generateContent", json=body, headers={"authorization": "Bearer ya29.forged"})
    assert refused.status_code == 401 and refused.json()["error"]["status"] == "UNAUTHENTICATED"
    missing = httpx.post(f"{base}:generateContent", json=body)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == 401


def test_token_endpoint_verifies_the_signed_assertion(sims, sa_path, tmp_path):
    """A key the simulator does not trust (same account name, another key) gets no token."""
    import google.auth.exceptions
    import google.auth.transport.requests

    _, vsim = sims
    info = json.loads(open(sa_path).read())
    info["private_key"] = new_key_pair()[0]
    forged = service_account.Credentials.from_service_account_info(info, scopes=SCOPES)
    with pytest.raises(google.auth.exceptions.RefreshError, match="invalid_grant: Invalid JWT Signature"):
        forged.refresh(google.auth.transport.requests.Request())
    wrong_grant = httpx.post(f"{vsim.url}/token", data={"grant_type": "client_credentials", "assertion": "x"})
    assert wrong_grant.status_code == 400 and wrong_grant.json()["error"] == "unsupported_grant_type"


# -- through gatewayd ---------------------------------------------------------------------------


def test_messages_pass_through_to_claude_on_vertex_billed_with_both_cache_ttls(daemon, sims):
    _, vsim = sims
    account, _, secret = new_account(daemon)
    client = anthropic.Anthropic(base_url=daemon.url, api_key=secret, max_retries=0)
    marker = tag()
    raw = client.messages.with_raw_response.create(
        model="vx-claude", max_tokens=300, system=[{"type": "text", "text": "be brief",
                                                    "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": f"{marker} [[sim:cache_read=120]] [[sim:cache_write=40]] "
                                              "[[sim:cache_write_1h=30]]"}])
    message = raw.parse()
    assert message.model == CLAUDE and message.usage.cache_read_input_tokens == 120
    received = vsim.last_request(marker)
    assert received["path"].endswith(f"/publishers/anthropic/models/{CLAUDE}:rawPredict")
    assert "model" not in received["json"] and received["json"]["anthropic_version"] == "vertex-2023-10-16"
    assert received["json"]["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "x-api-key" not in received["headers"] and received["headers"]["authorization"].startswith("Bearer ya29.")
    row = assert_billed_exactly(daemon, vsim, account, raw.headers["x-request-id"], marker, "vx-claude")
    assert (row["cached_tokens"], row["cache_write_tokens"]) == (120, 70)


def test_messages_stream_with_thinking_and_signature(daemon, sims):
    _, vsim = sims
    account, _, secret = new_account(daemon)
    client = anthropic.Anthropic(base_url=daemon.url, api_key=secret, max_retries=0)
    marker = tag()
    with client.messages.stream(model="vx-claude", max_tokens=3000, thinking={"type": "enabled", "budget_tokens": 1024},
                                messages=[{"role": "user", "content": f"think {marker}"}]) as stream:
        final = stream.get_final_message()
        request_id = stream.response.headers["x-request-id"]
    thinking, text = final.content
    assert thinking.signature == signature_for(thinking.thinking) and text.text.startswith("This is a simulated")
    assert vsim.last_request(marker)["path"].endswith(":streamRawPredict")
    assert_billed_exactly(daemon, vsim, account, request_id, marker, "vx-claude")


def test_chat_tool_round_trip_to_claude_on_vertex_streaming(daemon, sims):
    _, vsim = sims
    account, _, secret = new_account(daemon)
    client = openai.OpenAI(base_url=daemon.url + "/v1", api_key=secret, max_retries=0)
    marker = tag()
    messages = [{"role": "user", "content": f"weather in Paris? {marker}"}]
    calls: dict[int, dict] = {}
    with client.chat.completions.with_streaming_response.create(
            model="vx-claude", messages=messages, tools=[WEATHER], stream=True,
            stream_options={"include_usage": True}) as response:
        first_id = response.headers["x-request-id"]
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[6:])["choices"]:
                for call in choice["delta"].get("tool_calls") or ():
                    entry = calls.setdefault(call["index"], {"id": None, "arguments": ""})
                    entry["id"] = call.get("id") or entry["id"]
                    entry["name"] = (call.get("function") or {}).get("name") or entry.get("name")
                    entry["arguments"] += (call.get("function") or {}).get("arguments") or ""
    assert calls[0]["name"] == "get_weather" and json.loads(calls[0]["arguments"]) == {"city": "sim-city"}
    assert_billed_exactly(daemon, vsim, account, first_id, marker, "vx-claude")
    messages += [{"role": "assistant", "content": None, "tool_calls": [
        {"id": calls[0]["id"], "type": "function", "function": {"name": "get_weather", "arguments": calls[0]["arguments"]}}]},
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": f"sunny {marker}-result"}]
    second = client.chat.completions.with_raw_response.create(model="vx-claude", messages=messages, tools=[WEATHER])
    answer = second.parse()
    assert answer.choices[0].message.content.startswith("Tool result received: sunny")
    received = vsim.last_request(f"{marker}-result")
    assert received["json"]["messages"][-1]["content"][0]["type"] == "tool_result"
    row = settled_row(daemon, account["id"], second.headers["x-request-id"])
    assert row["cost_nano"] == provider_bill("messages", received["answer"], CLAUDE_PRICES)


def test_responses_to_claude_on_vertex(daemon, sims):
    _, vsim = sims
    account, _, secret = new_account(daemon)
    client = openai.OpenAI(base_url=daemon.url + "/v1", api_key=secret, max_retries=0)
    marker = tag()
    raw = client.responses.with_raw_response.create(model="vx-claude", input=f"hello {marker}")
    response = raw.parse()
    assert response.output_text.startswith("This is a simulated reply to: hello")
    assert_billed_exactly(daemon, vsim, account, raw.headers["x-request-id"], marker, "vx-claude")


@pytest.mark.parametrize("stream", [False, True])
def test_chat_to_gemini_on_vertex(daemon, sims, stream):
    _, vsim = sims
    account, _, secret = new_account(daemon)
    client = openai.OpenAI(base_url=daemon.url + "/v1", api_key=secret, max_retries=0)
    marker = tag()
    body = {"model": "vx-gemini", "messages": [{"role": "user", "content": f"hi {marker} [[sim:cache_read=50]]"}]}
    if stream:
        with client.chat.completions.with_streaming_response.create(
                **body, stream=True, stream_options={"include_usage": True}) as response:
            request_id = response.headers["x-request-id"]
            chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    else:
        raw = client.chat.completions.with_raw_response.create(**body)
        request_id, text = raw.headers["x-request-id"], raw.parse().choices[0].message.content
    assert text.startswith("This is a simulated reply to: hi")
    received = vsim.last_request(marker)
    method = "streamGenerateContent" if stream else "generateContent"
    assert received["path"] == f"/vertex/v1/projects/{PROJECT}/locations/{REGION}/publishers/google/models/gemini-2.5-flash:{method}"
    assert received["query"] == ("alt=sse" if stream else "")
    row = assert_billed_exactly(daemon, vsim, account, request_id, marker, "vx-gemini")
    assert row["cached_tokens"] == 50


def test_responses_stream_to_gemini_on_vertex_with_a_tool_call(daemon, sims):
    _, vsim = sims
    account, _, secret = new_account(daemon)
    client = openai.OpenAI(base_url=daemon.url + "/v1", api_key=secret, max_retries=0)
    marker = tag()
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
    with client.responses.with_streaming_response.create(model="vx-gemini", input=f"weather {marker}",
                                                         tools=[tool], stream=True) as response:
        request_id = response.headers["x-request-id"]
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    done = events[-1]
    assert done["type"] == "response.completed"
    [call] = [item for item in done["response"]["output"] if item["type"] == "function_call"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "sim-city"}
    assert_billed_exactly(daemon, vsim, account, request_id, marker, "vx-gemini")


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_api_to_gemini_on_vertex_passes_through(daemon, sims, stream):
    """A Gemini-API client (Gemini CLI, google-genai) of a Gemini model on Vertex: the same
    wire, so its bytes go to Vertex as they came (the model is in the URL) and Vertex's answer
    back as it was sent; billed exactly what Vertex bills."""
    _, vsim = sims
    account, _, secret = new_account(daemon)
    marker = tag()
    raw = (b'{"contents": [{"role": "user", "parts": [{"text": "hi ' + marker.encode() + b' [[sim:cache_read=50]]"}]}],'
           b' "generationConfig": {"maxOutputTokens": 200, "temperature": 0.5}}')
    method = "streamGenerateContent" if stream else "generateContent"
    response = httpx.post(f"{daemon.url}/v1beta/models/vx-gemini:{method}", params={"alt": "sse"} if stream else None,
                          content=raw, headers={"x-goog-api-key": secret, "content-type": "application/json"},
                          timeout=30)
    assert response.status_code == 200, response.text
    received = vsim.last_request(marker)
    assert received["path"] == f"/vertex/v1/projects/{PROJECT}/locations/{REGION}/publishers/google/models/gemini-2.5-flash:{method}"
    assert received["query"] == ("alt=sse" if stream else "")
    assert received["body"].encode() == raw  # forwarded unchanged: no re-encode, no model field added
    if stream:
        events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
        text = "".join(p.get("text", "") for e in events for p in e["candidates"][0]["content"]["parts"])
        assert response.headers["content-type"].startswith("text/event-stream")
    else:
        text = "".join(p.get("text", "") for p in response.json()["candidates"][0]["content"]["parts"])
    assert text.startswith("This is a simulated reply to: hi")
    row = assert_billed_exactly(daemon, vsim, account, response.headers["x-request-id"], marker, "vx-gemini")
    assert row["cached_tokens"] == 50 and row["endpoint"] == "gemini"


def test_gemini_api_to_claude_on_vertex_is_translated(daemon, sims):
    _, vsim = sims
    account, _, secret = new_account(daemon)
    marker = tag()
    body = {"contents": [{"role": "user", "parts": [{"text": f"hi {marker}"}]}]}
    response = httpx.post(f"{daemon.url}/v1beta/models/vx-claude:generateContent", params={"key": secret}, json=body,
                          timeout=30)
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["candidates"][0]["content"]["parts"][0]["text"].startswith("This is a simulated reply to: hi")
    assert vsim.last_request(marker)["path"].endswith(":rawPredict")
    assert doc["usageMetadata"]["totalTokenCount"] > 0
    assert_billed_exactly(daemon, vsim, account, response.headers["x-request-id"], marker, "vx-claude")


def test_messages_to_a_gemini_model_on_vertex_is_refused(daemon):
    account, _, secret = new_account(daemon)
    response = httpx.post(daemon.url + "/v1/messages", headers={"x-api-key": secret, "anthropic-version": "2023-06-01"},
                          json={"model": "vx-gemini", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
    # refused up front, as any model that is not dual-format is: a gateway check, so the spec's
    # chat envelope on every endpoint, code invalid_model (its routes serve no messages)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_model"
    assert "is not available on /v1/messages" in response.json()["error"]["message"]
    assert daemon.admin.balance(account["id"])["balance_nano"] == 10_000_000_000


# -- streams cut short: the client leaves, the provider goes silent ---------------------------


def stream_request(model: str, text: str) -> tuple[str, dict]:
    if model == "vx-claude":
        return "/v1/messages", {"model": model, "max_tokens": 1000, "stream": True,
                                "messages": [{"role": "user", "content": text}]}
    return "/v1/chat/completions", {"model": model, "stream": True, "messages": [{"role": "user", "content": text}]}


@pytest.mark.parametrize("model", ["vx-claude", "vx-gemini"])
def test_client_that_leaves_mid_stream_pays_what_vertex_bills(daemon, sims, model):
    """The gateway reads Vertex's stream on to its usage after the client hung up."""
    _, vsim = sims
    account, _, secret = new_account(daemon)
    marker = tag()
    path, body = stream_request(model, f"{marker} [[sim:words=150]] [[sim:fault=chunk_delay_ms:5]]")
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", daemon.url + path, json=body,
                         headers={"authorization": f"Bearer {secret}", "anthropic-version": "2023-06-01"}) as response:
            assert response.status_code == 200
            request_id = response.headers["x-request-id"]
            got = b""
            for chunk in response.iter_raw():
                got += chunk
                if got.count(b"\n\n") >= 8:
                    break
    row = settled_row(daemon, account["id"], request_id)
    received = vsim.last_request(marker)
    assert received["cancelled"] is False and received["completed"] is True
    assert row["status"] == "client_disconnected"
    assert row["cost_nano"] == provider_bill(PRICES[model][0], received["answer"], PRICES[model][1]) > 0


@pytest.mark.parametrize("model", ["vx-claude", "vx-gemini"])
def test_vertex_silent_mid_stream_is_cut_at_the_idle_timeout(daemon, model):
    account, _, secret = new_account(daemon)
    path, body = stream_request(model, f"{tag()} [[sim:words=20]] [[sim:fault=stall_after:3]]")
    with httpx.Client(timeout=30) as http:  # the daemon's idle cut ends it (a stall never would)
        response = http.post(daemon.url + path, json=body,
                             headers={"authorization": f"Bearer {secret}", "anthropic-version": "2023-06-01"})
    assert response.status_code == 200
    last = [line for line in response.text.splitlines() if line.startswith("data: ")][-1]
    assert json.loads(last[6:])["error"]["type"] == "timeout_error"
    row = settled_row(daemon, account["id"], response.headers["x-request-id"])
    assert row["status"] == "idle_timeout" and row["output_tokens"] >= 3 and row["cost_nano"] > 0


# -- failover across clouds, cool-down ------------------------------------------------------


def test_anthropic_throttled_vertex_serves(daemon, sims, markers):
    anth, vsim = sims
    markers("anthropic", "[[sim:fault=status:429]]")
    account, _, secret = new_account(daemon)
    client = anthropic.Anthropic(base_url=daemon.url, api_key=secret, max_retries=0)
    marker = tag()
    raw = client.messages.with_raw_response.create(model="vx-failover", max_tokens=100,
                                                   messages=[{"role": "user", "content": f"hi {marker}"}])
    assert raw.parse().content[0].text.startswith("This is a simulated reply")
    assert anth.last_request(marker)["status"] == 429
    row = assert_billed_exactly(daemon, vsim, account, raw.headers["x-request-id"], marker, "vx-failover")
    assert row["attempts"] == 2


def test_anthropic_down_bedrock_throttled_vertex_serves(daemon, sims, markers):
    """One Claude model on three clouds: Anthropic unreachable, Bedrock answering
    ThrottlingException (the ``anth`` simulator serves /bedrock too), Vertex serves; the
    charge is exactly Vertex's bill, the refused attempts cost nothing."""
    anth, vsim = sims
    markers("anthropic", "[[sim:fault=status:429]]")  # every request to the anth simulator: Bedrock's here
    account, _, secret = new_account(daemon)
    client = anthropic.Anthropic(base_url=daemon.url, api_key=secret, max_retries=0)
    marker = tag()
    raw = client.messages.with_raw_response.create(model="vx-three-clouds", max_tokens=100,
                                                   messages=[{"role": "user", "content": f"hi {marker}"}])
    assert raw.parse().content[0].text.startswith("This is a simulated reply")
    throttled = anth.last_request(marker)
    assert throttled["status"] == 429 and throttled["path"].startswith("/bedrock/model/us.anthropic.claude-sonnet-4-5")
    row = assert_billed_exactly(daemon, vsim, account, raw.headers["x-request-id"], marker, "vx-three-clouds")
    assert row["attempts"] == 3
    assert daemon.admin.balance(account["id"])["balance_nano"] == 10_000_000_000 - row["cost_nano"]


def test_vertex_resource_exhausted_cools_the_route_and_anthropic_serves(daemon, sims, markers):
    anth, vsim = sims
    markers("vertex", "[[sim:fault=status:429]]")
    account, _, secret = new_account(daemon)
    client = openai.OpenAI(base_url=daemon.url + "/v1", api_key=secret, max_retries=0)
    rows = []
    for i in range(2):
        marker = tag()
        raw = client.chat.completions.with_raw_response.create(
            model="vx-cooled", messages=[{"role": "user", "content": f"turn {i} {marker}"}])
        assert raw.parse().choices[0].message.content.startswith("This is a simulated reply")
        rows.append(assert_billed_exactly(daemon, anth, account, raw.headers["x-request-id"], marker, "vx-cooled",
                                          provider="anthropic"))
    assert [r["attempts"] for r in rows] == [2, 1]  # RESOURCE_EXHAUSTED's RetryInfo (7 s) cooled the Vertex route
    out = subprocess.run([str(BIN / "gatewayctl"), "routes", "--model", "vx-cooled", "--json", "--socket",
                          daemon.socket], capture_output=True, text=True, timeout=30)
    routes = {r["provider"]: r for r in json.loads(out.stdout)}
    assert routes["vertex"]["state"] == "cooling" and 0 < routes["vertex"]["cooling_for_s"] <= 7
    assert routes["vertex"]["last_error"] == "429: simulated error 429"


def test_vertex_429_is_told_to_a_lone_route_client_with_retry_after(daemon, markers):
    markers("vertex", "[[sim:fault=status:429]]")
    account, _, secret = new_account(daemon)
    response = httpx.post(daemon.url + "/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                          json={"model": "vx-gemini", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert response.status_code == 429 and response.headers["retry-after"] == "7"
    assert response.json()["error"]["message"] == "simulated error 429"
    assert daemon.admin.balance(account["id"])["balance_nano"] == 10_000_000_000


# -- tokens ---------------------------------------------------------------------------------


def test_tokens_are_cached_and_refreshed_before_they_expire(daemon, sims):
    _, vsim = sims
    vsim.http.put("/_sim/vertex", json={"token_ttl_s": 8}).raise_for_status()
    try:
        account, _, secret = new_account(daemon)
        client = anthropic.Anthropic(base_url=daemon.url, api_key=secret, max_retries=0)
        before = vsim.http.get("/_sim/vertex").json()["tokens_issued"]
        sent = []
        for pause in (0, 0, 6.5, 0):  # an 8 s token is refreshed once under 2 s are left
            time.sleep(pause)
            marker = tag()
            client.messages.create(model="vx-short", max_tokens=50, messages=[{"role": "user", "content": marker}])
            sent.append(vsim.last_request(marker)["headers"]["authorization"])
        assert sent[0] == sent[1] != sent[2] == sent[3]
        assert vsim.http.get("/_sim/vertex").json()["tokens_issued"] - before == 2
        assert len(daemon.admin.usage(account["id"])) == 4
    finally:
        vsim.http.put("/_sim/vertex", json={"token_ttl_s": 3600}).raise_for_status()


# -- --demo ---------------------------------------------------------------------------------


def test_demo_routes_a_vertex_model_to_the_built_in_simulator(sa_path, tmp_path):
    """``--demo`` points a Vertex provider at the in-process simulator and signs with the
    simulator's demo service account: Claude and Gemini on Vertex answer with the demo key."""
    import signal

    from tests.live import _spawn

    config = tmp_path / "demo.toml"
    config.write_text(f"""
[[providers]]
name = "vertex"
protocol = "vertex"
project = "{PROJECT}"
region = "global"
credentials_file = "{sa_path}"
[[models]]
id = "vx-claude"
{CLAUDE_RATES}provider = "vertex"
upstream_id = "{CLAUDE}"
[[models]]
id = "vx-gemini"
input_price = 0.30
output_price = 2.50
provider = "vertex"
upstream_id = "gemini-2.5-flash"
""")
    proc, output = _spawn([str(BIN / "gatewayd"), "serve", "--demo", "--config", str(config), "--listen",
                           "127.0.0.1:0", "--data-dir", str(tmp_path / "data")])
    try:
        base_url = output.wait_for(r"demo is running at (http://\S+)", 60, proc).group(1)
        secret = output.wait_for(r"demo key: (sk-\S+)", 10, proc).group(1)
        claude = anthropic.Anthropic(base_url=base_url, api_key=secret, max_retries=0).messages.create(
            model="vx-claude", max_tokens=50, messages=[{"role": "user", "content": "Hello!"}])
        assert claude.content[0].text == "This is a simulated reply to: Hello!." and claude.model == CLAUDE
        gemini = openai.OpenAI(base_url=base_url + "/v1", api_key=secret, max_retries=0).chat.completions.create(
            model="vx-gemini", messages=[{"role": "user", "content": "Hello!"}])
        assert gemini.choices[0].message.content == "This is a simulated reply to: Hello!."
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_a_revoked_token_is_refused_then_replaced(daemon, sims):
    """Vertex's 401 is answered as it came (the request is not retried) and the token is
    dropped: the next request fetches a new one."""
    _, vsim = sims
    account, _, secret = new_account(daemon)
    client = anthropic.Anthropic(base_url=daemon.url, api_key=secret, max_retries=0)
    client.messages.create(model="vx-claude", max_tokens=20, messages=[{"role": "user", "content": tag()}])
    vsim.http.put("/_sim/vertex", json={"revoke_tokens": True}).raise_for_status()
    with pytest.raises(anthropic.AuthenticationError) as refused:
        client.messages.create(model="vx-claude", max_tokens=20, messages=[{"role": "user", "content": tag()}])
    assert refused.value.body["error"]["message"].startswith("Request had invalid authentication credentials")
    before = vsim.http.get("/_sim/vertex").json()["tokens_issued"]
    marker = tag()
    client.messages.create(model="vx-claude", max_tokens=20, messages=[{"role": "user", "content": marker}])
    assert vsim.http.get("/_sim/vertex").json()["tokens_issued"] == before + 1
    assert vsim.last_request(marker)["status"] == 200
    rows = daemon.admin.usage(account["id"])
    assert [r["status"] for r in rows] == ["ok", "upstream_error", "ok"][::-1] and rows[1]["cost_nano"] == 0


PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
PDF = "JVBERi0xLjQKJcOkw7zDtsOfCjEgMCBvYmoKPDwvVHlwZS9DYXRhbG9nPj4KZW5kb2JqCnRyYWlsZXIKPDwvUm9vdCAxIDAgUj4+CiUlRU9G"


def test_images_and_pdfs_reach_claude_and_gemini_on_vertex_billed_exactly(daemon, sims):
    _, vsim = sims
    account, _, secret = new_account(daemon)
    marker = tag()
    raw = anthropic.Anthropic(base_url=daemon.url, api_key=secret, max_retries=0).messages.with_raw_response.create(
        model="vx-claude", max_tokens=100, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
            {"type": "text", "text": f"describe {marker}"}]}])
    received = vsim.last_request(marker)
    assert [block["type"] for block in received["json"]["messages"][0]["content"]] == ["image", "document", "text"]
    row = assert_billed_exactly(daemon, vsim, account, raw.headers["x-request-id"], marker, "vx-claude")
    assert row["input_tokens"] > 2500  # the simulator counts an image 1,000 tokens and a document 1,500
    marker = tag()
    chat = openai.OpenAI(base_url=daemon.url + "/v1", api_key=secret, max_retries=0).chat.completions.with_raw_response
    raw = chat.create(model="vx-gemini", messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
        {"type": "text", "text": f"describe {marker}"}]}])
    parts = vsim.last_request(marker)["json"]["contents"][0]["parts"]
    assert parts[0] == {"inlineData": {"mimeType": "image/png", "data": PIXEL}}
    row = assert_billed_exactly(daemon, vsim, account, raw.headers["x-request-id"], marker, "vx-gemini")
    assert row["input_tokens"] > 1000
