"""Issue 23 point 1, live: Google's google-genai SDK calls gatewayd's Gemini API
(``/v1beta/models/...``) on a Gemini-routed model (pass-through), a Claude model and a GPT
model (translated through their chat routes), with the simulator as every upstream.

Each charge is checked against the simulator's own bill for the answer it gave (the request
log keeps it), priced from the catalogue by ``tests.sim.provider_bill``.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from gatewayd.config import load_config
from tests.sim.provider_bill import provider_bill

MODELS = load_config(None, environ={}).models  # the default catalogue (its providers need no key here)
# (model, the protocol its simulator answer is billed in)
TARGETS = [("gemini-2.5-flash", "gemini"), ("claude-sonnet-4-5", "messages"), ("gpt-4.1-mini", "chat")]


def prices_of(model_id: str) -> dict:
    r = MODELS[model_id].base_rates
    return {"input": r.input, "output": r.output, "cached_input": r.cached_input, "cache_write": r.cache_write,
            "cache_write_1h": r.cache_write_1h}


def client(gateway, secret: str) -> genai.Client:
    return genai.Client(api_key=secret, http_options=types.HttpOptions(base_url=gateway.url, api_version="v1beta"))


def tag() -> str:
    return "gapi-" + uuid.uuid4().hex[:10]


def assert_billed(gateway, sim, account: dict, marker: str, model: str, protocol: str, *, stream: bool,
                  status: str = "ok") -> dict:
    rows = [r for r in gateway.admin.usage(account["id"]) if r["status"] == status]
    row = rows[0]
    answer = sim.last_request(marker)["answer"]
    assert (row["model"], row["stream"], row["endpoint"]) == (model, stream, "gemini")
    assert row["cost_nano"] == provider_bill(protocol, answer, prices_of(model))
    balance = gateway.admin.balance(account["id"])
    assert balance["held_nano"] == 0
    return row


@pytest.mark.parametrize(("model", "protocol"), TARGETS)
def test_generate_and_stream_billed_exactly(gateway, sim, funded, model, protocol):
    account, _, secret = funded
    c = client(gateway, secret)
    marker = tag()
    reply = c.models.generate_content(model=model, contents=f"Say hello {marker}",
                                      config=types.GenerateContentConfig(system_instruction="Be brief",
                                                                         max_output_tokens=300))
    assert reply.text
    assert reply.candidates[0].finish_reason == types.FinishReason.STOP
    row = assert_billed(gateway, sim, account, marker, model, protocol, stream=False)
    meta = reply.usage_metadata
    assert meta.prompt_token_count == row["input_tokens"]
    assert meta.candidates_token_count + (meta.thoughts_token_count or 0) == row["output_tokens"]

    marker2 = tag()
    chunks = list(c.models.generate_content_stream(model=model, contents=f"Tell a story {marker2}",
                                                   config=types.GenerateContentConfig(max_output_tokens=300)))
    text = "".join(ch.text or "" for ch in chunks)
    assert text
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    rows = gateway.admin.usage(account["id"])
    assert len(rows) == 2 and rows[0]["stream"] is True
    answer = sim.last_request(marker2)["answer"]
    assert rows[0]["cost_nano"] == provider_bill(protocol, answer, prices_of(model))
    assert chunks[-1].usage_metadata.prompt_token_count == rows[0]["input_tokens"]


WEATHER = types.FunctionDeclaration(
    name="get_weather", description="Weather for a city",
    parameters=types.Schema(type=types.Type.OBJECT, properties={"city": types.Schema(type=types.Type.STRING)},
                            required=["city"]))


@pytest.mark.parametrize(("model", "protocol"), TARGETS)
def test_function_call_round_trip(gateway, sim, funded, model, protocol):
    account, _, secret = funded
    c = client(gateway, secret)
    marker = tag()
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])], max_output_tokens=300,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    ask = types.Content(role="user", parts=[types.Part(text=f"Weather in Paris? [[sim:tools=1]] {marker}")])
    first = c.models.generate_content(model=model, contents=[ask], config=config)
    [call] = first.function_calls
    assert call.name == "get_weather" and isinstance(call.args, dict)
    answer = types.Part.from_function_response(name="get_weather", response={"temp_c": 21})
    if call.id:
        answer.function_response.id = call.id
    second = c.models.generate_content(
        model=model, config=config,
        contents=[ask, first.candidates[0].content, types.Content(role="user", parts=[answer])])
    assert second.text and not second.function_calls
    rows = gateway.admin.usage(account["id"])
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows)
    assert gateway.admin.balance(account["id"])["held_nano"] == 0


@pytest.mark.parametrize(("model", "protocol"), TARGETS)
def test_count_tokens_is_free(gateway, funded, model, protocol):
    account, _, secret = funded
    c = client(gateway, secret)
    counted = c.models.count_tokens(model=model, contents="How many tokens is this sentence?")
    assert 5 <= counted.total_tokens <= 40
    assert gateway.admin.usage(account["id"]) == []
    assert gateway.admin.balance(account["id"])["balance_nano"] == gateway.admin.balance(account["id"])[
        "total_paid_nano"]


def test_list_models_only_the_keys(gateway):
    from tests.live import unique_email

    account = gateway.admin.account(unique_email())
    key = gateway.admin.key(account["id"], models=["claude-sonnet-4-5", "gemini-2.5-flash"])
    c = client(gateway, key["secret"])
    names = sorted(m.name for m in c.models.list())
    assert names == ["models/claude-sonnet-4-5", "models/gemini-2.5-flash"]
    one = c.models.get(model="gemini-2.5-flash")
    assert one.name == "models/gemini-2.5-flash" and "generateContent" in one.supported_actions
    assert one.output_token_limit == MODELS["gemini-2.5-flash"].max_output_tokens
    page = httpx.get(f"{gateway.url}/v1beta/models", params={"pageSize": 1, "key": key["secret"]}).json()
    assert len(page["models"]) == 1 and page["nextPageToken"] == "1"
    # a model the key may not use: the spec's 403, before any hold
    with pytest.raises(genai_errors.ClientError) as refused:
        c.models.generate_content(model="gpt-4.1-mini", contents="hi")
    assert refused.value.code == 403 and "no access to model" in refused.value.message
    assert gateway.admin.usage(account["id"]) == []


def test_errors(gateway, funded):
    _, _, secret = funded
    url = f"{gateway.url}/v1beta/models/claude-sonnet-4-5:generateContent"
    # a bad key: the spec's one 401, whichever place the key came in
    for headers, params in (({"x-goog-api-key": "sk-nope"}, {}), ({}, {"key": "sk-nope"}),
                            ({"authorization": "Bearer sk-nope"}, {})):
        r = httpx.post(url, headers=headers, params=params, json={"contents": [{"parts": [{"text": "hi"}]}]})
        assert r.status_code == 401 and r.json()["error"]["message"].startswith("Invalid token")
    # the body: Google's envelope
    r = httpx.post(url, headers={"x-goog-api-key": secret}, json={"contents": []})
    assert r.status_code == 400
    assert r.json()["error"]["status"] == "INVALID_ARGUMENT" and r.json()["error"]["code"] == 400
    r = httpx.post(url, headers={"x-goog-api-key": secret},
                   json={"contents": [{"parts": [{"text": "hi"}]}], "tools": [{"googleSearch": {}}]})
    assert r.status_code == 400 and "Gemini models" in r.json()["error"]["message"]
    r = httpx.post(url, headers={"x-goog-api-key": secret},
                   json={"contents": [{"parts": [{"text": "hi"}]}],
                         "generationConfig": {"responseMimeType": "application/json"}})
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
    # a provider error (the simulator's 400 for an unknown field) in Google's envelope, status kept
    r = httpx.post(f"{gateway.url}/v1beta/models/unknown-model:generateContent", headers={"x-goog-api-key": secret},
                   json={"contents": [{"parts": [{"text": "hi"}]}]})
    assert r.status_code == 503 and r.json()["error"]["code"] == "model_not_found"


def test_json_array_stream_without_alt_sse(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    for model in ("gemini-2.5-flash", "gpt-4.1-mini"):
        r = httpx.post(f"{gateway.url}/v1beta/models/{model}:streamGenerateContent",
                       headers={"x-goog-api-key": secret}, timeout=30,
                       json={"contents": [{"parts": [{"text": f"Count {marker}"}]}]})
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
        chunks = r.json()
        assert isinstance(chunks, list) and len(chunks) >= 2
        assert chunks[-1]["candidates"][0]["finishReason"] == "STOP" and chunks[-1]["usageMetadata"]
    assert len(gateway.admin.usage(account["id"])) == 2


@pytest.mark.parametrize(("model", "protocol"), TARGETS)
def test_client_leaving_mid_stream_is_billed_what_it_got(gateway, sim, funded, model, protocol):
    account, _, secret = funded
    marker = tag()
    with httpx.stream("POST", f"{gateway.url}/v1beta/models/{model}:streamGenerateContent",
                      params={"alt": "sse"}, headers={"x-goog-api-key": secret}, timeout=30,
                      json={"contents": [{"parts": [{"text": f"[[sim:words=200]] [[sim:fault=chunk_delay_ms:20]] {marker}"}]}],
                            "generationConfig": {"maxOutputTokens": 2000}}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                break
    import time

    for _ in range(100):
        rows = gateway.admin.usage(account["id"])
        if rows:
            break
        time.sleep(0.1)
    [row] = rows
    assert row["status"] == "client_disconnected"
    assert row["cost_nano"] > 0 and row["output_tokens"] > 0
    assert gateway.admin.balance(account["id"])["held_nano"] == 0


# -- issue 36: the Gemini API to Claude ------------------------------------------------------------

# PDF bytes whose base64 holds "+" and "/" in the standard alphabet: google-genai sends them as
# "-" and "_" (the URL-safe alphabet Google's parser accepts and Anthropic refuses)
BINARY_PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\xfb\xff\xfe\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


def test_an_inline_pdf_reaches_claude_as_standard_base64(gateway, sim, funded):
    import base64

    account, _, secret = funded
    c = client(gateway, secret)
    marker = tag()
    reply = c.models.generate_content(model="claude-sonnet-4-5", contents=[
        types.Part.from_bytes(data=BINARY_PDF, mime_type="application/pdf"), f"Summarise {marker}"])
    assert reply.text == f"This is a simulated reply to: Summarise {marker}."
    [turn] = sim.last_request(marker)["json"]["messages"]
    document = turn["content"][0]
    assert document["source"] == {"type": "base64", "media_type": "application/pdf",
                                  "data": base64.b64encode(BINARY_PDF).decode()}
    assert_billed(gateway, sim, account, marker, "claude-sonnet-4-5", "messages", stream=False)


def test_inline_data_that_is_not_base64_is_the_clients_400(gateway, sim, funded):
    _, _, secret = funded
    marker = tag()
    r = httpx.post(f"{gateway.url}/v1beta/models/claude-sonnet-4-5:generateContent",
                   headers={"x-goog-api-key": secret}, json={"contents": [{"role": "user", "parts": [
                       {"inlineData": {"mimeType": "application/pdf", "data": "not base64 at all!"}},
                       {"text": marker}]}]})
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "contents[0].parts[0].inlineData.data" in r.json()["error"]["message"]
    assert sim.requests(marker) == []


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "claude-3-5-haiku"])
def test_thinking_config_on_claude_gets_a_budget_the_provider_takes(gateway, sim, funded, model):
    """google-genai's thinkingConfig (every budget from 512 up, dynamic -1) under caps from
    2,048 to 64,000: 1024 <= budget < max_tokens on every request, or the simulator (which
    refuses it as Anthropic does) would answer 400."""
    _, _, secret = funded
    c = client(gateway, secret)
    for cap in (2048, 8192, 16000, 64000):
        for budget in (512, 2048, 8192, 24576, -1):
            marker = tag()
            reply = c.models.generate_content(model=model, contents=f"Think {marker}", config=types.GenerateContentConfig(
                max_output_tokens=cap, thinking_config=types.ThinkingConfig(thinking_budget=budget,
                                                                            include_thoughts=True)))
            assert reply.text == f"This is a simulated reply to: Think {marker}."
            upstream = sim.last_request(marker)["json"]
            assert 1024 <= upstream["thinking"]["budget_tokens"] < upstream["max_tokens"], (cap, budget)
