"""Issue 12 item 5, live: the official openai SDK calls Gemini-protocol models
(gemini-2.5-flash, gemini-2.5-pro) through /v1/chat/completions and /v1/responses; the
gateway speaks Google's generateContent / streamGenerateContent?alt=sse to the simulator.

Billing is checked against the simulator's own token counts: each test replays the
request the gateway sent straight to the simulator and prices its ``usageMetadata`` at
the catalogue's rates (thoughts as output, cached content at the cached rate).
"""

from __future__ import annotations

import json
import uuid

import httpx
import openai
import pytest

from gatewayd.sim.behaviour import THINKING_TEXT, signature_for

FLASH = "gemini-2.5-flash"
PRO = "gemini-2.5-pro"
PRICES = {  # nano-USD per token: the catalogue's USD per 1M tokens
    FLASH: {"input": 300, "output": 2500, "cached": 30},
    PRO: {"input": 1250, "output": 10000, "cached": 125},
}
PAID = 10_000_000_000

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "additionalProperties": False,
                   "properties": {"city": {"type": "string"}, "units": {"type": ["string", "null"]}},
                   "required": ["city", "units"]}, "strict": True}}
LOOKUP = {"type": "function", "function": {
    "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}}}}


def client(gateway, secret) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)


def tag() -> str:
    return "gem-" + uuid.uuid4().hex[:10]


def sim_usage(sim, received: dict) -> dict:
    """The simulator's usageMetadata for the request the gateway sent (replayed, non-stream)."""
    model = received["path"].split("/models/")[1].split(":")[0]
    doc = httpx.post(f"{sim.url}/v1beta/models/{model}:generateContent", json=received["json"],
                     headers={"x-goog-api-key": "k"}).json()
    return doc["usageMetadata"]


def priced(model: str, meta: dict) -> int:
    p = PRICES[model]
    cached = meta.get("cachedContentTokenCount", 0)
    output = meta["candidatesTokenCount"] + meta.get("thoughtsTokenCount", 0)
    return (meta["promptTokenCount"] - cached) * p["input"] + cached * p["cached"] + output * p["output"]


def assert_billed(gateway, account: dict, sim, marker: str, model: str, *, stream: bool) -> dict:
    [row] = gateway.admin.usage(account["id"])
    received = sim.last_request(marker)
    meta = sim_usage(sim, received)
    assert (row["model"], row["stream"], row["status"]) == (model, stream, "ok")
    assert row["input_tokens"] == meta["promptTokenCount"]
    assert row["output_tokens"] == meta["candidatesTokenCount"] + meta.get("thoughtsTokenCount", 0)
    assert row["cached_tokens"] == meta.get("cachedContentTokenCount", 0)
    assert row["cost_nano"] == priced(model, meta)
    assert gateway.admin.balance(account["id"]) == {"balance_nano": PAID - row["cost_nano"], "held_nano": 0,
                                                     "total_paid_nano": PAID}
    return row


# -- chat, non-streaming ---------------------------------------------------------------------------


def test_chat_non_stream_translated_both_ways_and_billed_exactly(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    raw = client(gateway, secret).chat.completions.with_raw_response.create(
        model=FLASH, messages=[{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": f"Hello {marker}"}],
        max_tokens=400, stop=["\n\n"], temperature=0.2)
    completion = raw.parse()
    assert completion.model == FLASH and completion.object == "chat.completion"
    assert completion.choices[0].message.content == f"This is a simulated reply to: Hello {marker}."
    assert completion.choices[0].finish_reason == "stop"

    received = sim.last_request(marker)
    assert received["path"] == f"/v1beta/models/{FLASH}:generateContent" and received["query"] == ""
    assert received["headers"]["x-goog-api-key"] == "sim-provider-key" and "authorization" not in received["headers"]
    assert received["json"] == {
        "contents": [{"role": "user", "parts": [{"text": f"Hello {marker}"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "generationConfig": {"maxOutputTokens": 400, "temperature": 0.2, "stopSequences": ["\n\n"]},
    }
    row = assert_billed(gateway, account, sim, marker, FLASH, stream=False)
    assert row["request_id"] == raw.headers["x-request-id"]
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (row["input_tokens"],
                                                                                     row["output_tokens"])


def test_chat_tool_round_trip_with_parallel_calls(gateway, sim, funded):
    account, _, secret = funded
    c = client(gateway, secret)
    marker = tag()
    messages = [{"role": "user", "content": f"Weather and lookup [[sim:tools=2]] {marker}"}]
    first = c.chat.completions.create(model=FLASH, messages=messages, tools=[WEATHER, LOOKUP])
    assert first.choices[0].finish_reason == "tool_calls"
    calls = first.choices[0].message.tool_calls
    assert [call.function.name for call in calls] == ["get_weather", "lookup"]
    assert len({call.id for call in calls}) == 2
    assert json.loads(calls[0].function.arguments) == {"city": "sim-city", "units": "sim-units"}
    assert json.loads(calls[1].function.arguments) == {"q": "sim-q", "n": 42}
    declared = sim.last_request(marker)["json"]["tools"][0]["functionDeclarations"][0]
    assert declared == {"name": "get_weather", "description": "Weather for a city", "parameters": {
        "type": "OBJECT", "required": ["city", "units"],
        "properties": {"city": {"type": "STRING"}, "units": {"type": "STRING", "nullable": True}}}}

    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny, 21 C"},
                 {"role": "tool", "tool_call_id": calls[1].id, "content": "found 3"}]
    second = c.chat.completions.create(model=FLASH, messages=messages, tools=[WEATHER, LOOKUP])
    assert second.choices[0].message.content == "Tool result received: found 3"
    upstream = sim.last_request("found 3")["json"]["contents"]
    assert upstream[1] == {"role": "model", "parts": [
        {"functionCall": {"name": "get_weather", "args": {"city": "sim-city", "units": "sim-units"}}},
        {"functionCall": {"name": "lookup", "args": {"q": "sim-q", "n": 42}}}]}
    assert upstream[2] == {"role": "user", "parts": [
        {"functionResponse": {"name": "get_weather", "response": {"output": "sunny, 21 C"}}},
        {"functionResponse": {"name": "lookup", "response": {"output": "found 3"}}}]}
    assert len(gateway.admin.usage(account["id"])) == 2


def test_thought_signature_survives_a_tool_loop(gateway, sim, funded):
    _, _, secret = funded
    c = client(gateway, secret)
    marker = tag()
    messages = [{"role": "user", "content": f"Weather? {marker}"}]
    first = c.chat.completions.create(model=FLASH, messages=messages, tools=[WEATHER], reasoning_effort="low")
    [call] = first.choices[0].message.tool_calls
    signature = call.id.split("__thought__")[1]
    assert signature == signature_for(THINKING_TEXT)  # what the simulator signed the call with
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "cloudy"}]
    c.chat.completions.create(model=FLASH, messages=messages, tools=[WEATHER], reasoning_effort="low")
    model_turn = sim.last_request("cloudy")["json"]["contents"][1]
    assert model_turn["parts"][0]["thoughtSignature"] == signature


def test_thinking_and_cached_tokens_are_billed_at_their_rates(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    completion = client(gateway, secret).chat.completions.create(
        model=PRO, reasoning_effort="low",
        messages=[{"role": "user", "content": f"[[sim:words=5]] [[sim:cache_read=40]] {marker}"}])
    message = completion.choices[0].message
    assert message.content == "w1 w2 w3 w4 w5"
    assert message.model_extra["reasoning_content"] == "Let me think about this step by step."
    assert completion.usage.completion_tokens == 5 + 8
    assert completion.usage.completion_tokens_details.reasoning_tokens == 8
    assert completion.usage.prompt_tokens_details.cached_tokens == 40
    generation = sim.last_request(marker)["json"]["generationConfig"]
    # the cap the hold covers is always sent (the model's maximum: the client set none)
    assert generation == {"thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True},
                          "maxOutputTokens": 65536}
    row = assert_billed(gateway, account, sim, marker, PRO, stream=False)
    assert (row["cached_tokens"], row["output_tokens"]) == (40, 13)


# -- chat, streaming ---------------------------------------------------------------------------------


def test_chat_stream_with_parallel_tool_calls_and_include_usage(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    with client(gateway, secret).chat.completions.stream(
        model=FLASH, tools=[WEATHER, LOOKUP], stream_options={"include_usage": True},
        messages=[{"role": "user", "content": f"[[sim:text_then_tool]] [[sim:tools=3]] {marker}"}],
    ) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    chunks = [e.chunk for e in events if e.type == "chunk"]
    assert chunks[0].choices[0].delta.role == "assistant"
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or ())]
    for index in (0, 1, 2):
        mine = [d for d in deltas if d.index == index]
        assert mine[0].id and mine[0].type == "function" and mine[0].function.arguments == ""
        assert all(d.id is None for d in mine[1:])
    message = final.choices[0].message
    assert message.content == "Let me check."
    assert final.choices[0].finish_reason == "tool_calls"
    assert [(t.index, t.function.name) for t in message.tool_calls] == [(0, "get_weather"), (1, "lookup"),
                                                                          (2, "get_weather")]
    assert len({t.id for t in message.tool_calls}) == 3
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage is not None

    received = sim.last_request(marker)
    assert received["path"] == f"/v1beta/models/{FLASH}:streamGenerateContent" and received["query"] == "alt=sse"
    row = assert_billed(gateway, account, sim, marker, FLASH, stream=True)
    assert (usage_chunk.usage.prompt_tokens, usage_chunk.usage.completion_tokens) == (row["input_tokens"],
                                                                                       row["output_tokens"])


def test_chat_stream_text_without_include_usage_is_still_billed(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    chunks = list(client(gateway, secret).chat.completions.create(
        model=FLASH, stream=True, messages=[{"role": "user", "content": f"[[sim:words=7]] {marker}"}]))
    assert all(c.choices and c.usage is None for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "w1 w2 w3 w4 w5 w6 w7"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert len({c.id for c in chunks}) == 1
    assert assert_billed(gateway, account, sim, marker, FLASH, stream=True)["output_tokens"] == 7


def test_max_tokens_ends_with_length(gateway, funded):
    _, _, secret = funded
    completion = client(gateway, secret).chat.completions.create(
        model=FLASH, max_completion_tokens=3, messages=[{"role": "user", "content": "[[sim:words=10]]"}])
    assert completion.choices[0].finish_reason == "length"
    assert completion.choices[0].message.content == "w1 w2 w3"


def test_mid_stream_error_makes_the_sdk_raise_and_charges_what_was_streamed(gateway, funded):
    account, _, secret = funded
    seen = []
    with pytest.raises(openai.APIError) as info:
        for chunk in client(gateway, secret).chat.completions.create(
                model=FLASH, stream=True,
                messages=[{"role": "user", "content": "[[sim:fault=error_after:2]] [[sim:words=10]]"}]):
            seen.append(chunk)
    assert "simulated mid-stream error" in str(info.value)
    assert "".join(c.choices[0].delta.content or "" for c in seen if c.choices) == "w1 w2 "
    [row] = gateway.admin.usage(account["id"])
    assert row["status"] == "upstream_error" and row["output_tokens"] >= 2 and row["cost_nano"] > 0


# -- responses clients -----------------------------------------------------------------------------


def test_responses_stream_with_a_tool_call(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
    with client(gateway, secret).responses.stream(
        model=FLASH, input=f"[[sim:text_then_tool]] {marker}", tools=[tool], instructions="Be brief.",
    ) as stream:
        types = [e.type for e in stream]
        final = stream.get_final_response()
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["message", "function_call"]
    assert final.output_text == "Let me check."
    assert final.output[1].name == "get_weather" and json.loads(final.output[1].arguments)["city"] == "sim-city"
    upstream = sim.last_request(marker)["json"]
    assert upstream["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    row = assert_billed(gateway, account, sim, marker, FLASH, stream=True)
    assert (final.usage.input_tokens, final.usage.output_tokens) == (row["input_tokens"], row["output_tokens"])


def test_responses_hosted_tools_are_dropped_and_named(gateway, sim, funded):
    _, _, secret = funded
    marker = tag()
    raw = client(gateway, secret).responses.with_raw_response.create(
        model=FLASH, input=f"[[sim:words=2]] {marker}", tools=[{"type": "web_search"}])
    assert raw.parse().output_text == "w1 w2"
    assert raw.headers["x-gatewayd-dropped-tools"].startswith("web_search")
    assert "tools" not in sim.last_request(marker)["json"]


def test_responses_non_stream_with_cache_and_thinking(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    response = client(gateway, secret).responses.create(
        model=PRO, input=f"[[sim:words=3]] [[sim:cache_read=12]] {marker}", reasoning={"effort": "medium"})
    assert response.output_text == "w1 w2 w3"
    assert response.usage.input_tokens_details.cached_tokens == 12
    assert response.usage.output_tokens_details.reasoning_tokens == 8
    assert sim.last_request(marker)["json"]["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 8192
    assert assert_billed(gateway, account, sim, marker, PRO, stream=False)["cached_tokens"] == 12


# -- refusals and provider errors: clear status, nothing charged -------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_blocked_prompt_is_a_clear_400_and_not_charged(gateway, sim, funded, stream):
    account, _, secret = funded
    marker = tag()
    with pytest.raises(openai.BadRequestError) as info:
        reply = client(gateway, secret).chat.completions.create(
            model=FLASH, stream=stream, messages=[{"role": "user", "content": f"[[sim:blocked]] {marker}"}])
        list(reply) if stream else None
    error = info.value
    assert error.status_code == 400 and error.code == "content_filter"
    assert "blockReason SAFETY" in error.message and "nothing was generated" in error.message
    assert sim.last_request(marker)["status"] == 200
    [row] = gateway.admin.usage(account["id"])
    assert (row["status"], row["cost_nano"]) == ("upstream_error", 0)
    assert gateway.admin.balance(account["id"]) == {"balance_nano": PAID, "held_nano": 0, "total_paid_nano": PAID}


def test_blocked_prompt_on_responses_is_a_400(gateway, funded):
    _, _, secret = funded
    with pytest.raises(openai.BadRequestError) as info:
        client(gateway, secret).responses.create(model=FLASH, input="[[sim:blocked=PROHIBITED_CONTENT]]")
    assert "blockReason PROHIBITED_CONTENT" in info.value.message


@pytest.mark.parametrize("status,error_class", [(429, openai.RateLimitError), (503, openai.InternalServerError),
                                                (400, openai.BadRequestError)])
def test_provider_errors_keep_status_and_message_and_are_not_charged(gateway, funded, status, error_class):
    account, _, secret = funded
    with pytest.raises(error_class) as info:
        client(gateway, secret).chat.completions.create(
            model=FLASH, messages=[{"role": "user", "content": f"[[sim:fault=status:{status}]]"}])
    error = info.value
    assert error.status_code == status and error.body["message"] == f"simulated error {status}"
    if status == 429:  # the simulator says 7 s as Google does, in RetryInfo: the gateway tells it as Retry-After
        assert error.response.headers["retry-after"] == "7" and error.code == "resource_exhausted"
    [row] = gateway.admin.usage(account["id"])
    assert (row["status"], row["cost_nano"]) == ("upstream_error", 0)
    assert gateway.admin.balance(account["id"])["balance_nano"] == PAID


def test_messages_endpoint_refuses_a_gemini_model(gateway, funded):
    _, _, secret = funded
    r = httpx.post(gateway.url + "/v1/messages", headers={"x-api-key": secret, "anthropic-version": "2023-06-01"},
                   json={"model": FLASH, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "not available on /v1/messages" in r.json()["error"]["message"]


def test_untranslatable_request_is_a_400_naming_the_field(gateway, funded):
    _, _, secret = funded
    with pytest.raises(openai.BadRequestError) as info:
        client(gateway, secret).chat.completions.create(
            model=FLASH, messages=[{"role": "user", "content": "hi"},
                                   {"role": "tool", "tool_call_id": "call_nowhere", "content": "x"}])
    assert info.value.param == "messages[1].tool_call_id"


def test_models_list_has_the_gemini_models(gateway, funded):
    _, _, secret = funded
    models = {m.id: m for m in client(gateway, secret).models.list()}
    assert models[FLASH].owned_by == "google" and PRO in models
