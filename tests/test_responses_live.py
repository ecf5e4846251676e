"""POST /v1/responses end to end: the official openai SDK -> gatewayd -> simulator.

Two routes are shown. gpt-4.1-mini (GPT-like family) is passed through to the
upstream's /v1/responses, body unchanged. claude-sonnet-4-5 (responses -> chat ->
messages) and deepseek-chat (responses -> chat) are translated. Every charge is checked
to the nano-dollar against the ``usage`` the client received and the catalogue prices.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

# nano-dollars per token: (input, output, cached input, cache write)
PRICES = {
    "gpt-4.1-mini": (400, 1600, 100, 400),
    "claude-sonnet-4-5": (3000, 15000, 300, 3750),
    "deepseek-chat": (270, 1100, 70, 270),
}
TRANSLATED = ["claude-sonnet-4-5", "deepseek-chat"]
ALL = ["gpt-4.1-mini", *TRANSLATED]
START = 10_000_000_000

WEATHER = [{
    "type": "function", "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}]


def client(gateway, secret) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)


def expected_cost(model: str, usage) -> int:
    """Uncached input, cache reads, cache writes and output, each at its rate."""
    input_rate, output_rate, cached_rate, write_rate = PRICES[model]
    details = usage.input_tokens_details
    cached = details.cached_tokens or 0
    written = getattr(details, "cache_write_tokens", 0) or 0
    return ((usage.input_tokens - cached - written) * input_rate + cached * cached_rate + written * write_rate
            + usage.output_tokens * output_rate)


def assert_billed(gateway, account, response, model: str, *, stream: bool) -> dict:
    """The newest usage row and the balance match the usage the client was shown, exactly."""
    usage = response.usage
    cost = expected_cost(model, usage)
    row = gateway.admin.usage(account["id"], limit=1)[0]
    assert (row["model"], row["endpoint"], row["stream"], row["status"]) == (model, "responses", stream, "ok")
    assert (row["input_tokens"], row["output_tokens"], row["cached_tokens"]) == (
        usage.input_tokens, usage.output_tokens, usage.input_tokens_details.cached_tokens)
    assert row["cost_nano"] == cost
    return row


def spent(gateway, account) -> int:
    balance = gateway.admin.balance(account["id"])
    assert balance["held_nano"] == 0
    return START - balance["balance_nano"]


def upstream_body(sim, marker: str) -> dict:
    return sim.last_request(marker)["json"]


# -- text, non-streaming and streaming --------------------------------------------------


@pytest.mark.parametrize("model", ALL)
def test_create_text_and_exact_billing(gateway, sim, funded, model):
    account, _, secret = funded
    marker = f"plain-{model}"
    raw = client(gateway, secret).responses.with_raw_response.create(
        model=model, input=f"Hello {marker} [[sim:cache_read=6]]", instructions="Answer briefly.")
    assert raw.headers["x-request-id"].startswith("req_")
    response = raw.parse()
    assert response.object == "response" and response.status == "completed"
    assert response.model == model
    assert response.output_text == f"This is a simulated reply to: Hello {marker}."
    assert response.usage.input_tokens > 6 and response.usage.output_tokens == 8
    assert response.usage.input_tokens_details.cached_tokens == 6
    row = assert_billed(gateway, account, response, model, stream=False)
    assert row["request_id"] == raw.headers["x-request-id"]
    assert spent(gateway, account) == row["cost_nano"]


@pytest.mark.parametrize("model", ALL)
def test_stream_final_response_and_exact_billing(gateway, funded, model):
    account, _, secret = funded
    with client(gateway, secret).responses.stream(
        model=model, input="stream it [[sim:words=9]] [[sim:cache_read=4]]", instructions="Be terse."
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed"
    assert final.output_text == "w1 w2 w3 w4 w5 w6 w7 w8 w9" == "".join(deltas)
    assert final.usage.output_tokens == 9
    assert final.usage.input_tokens_details.cached_tokens == 4
    row = assert_billed(gateway, account, final, model, stream=True)
    assert spent(gateway, account) == row["cost_nano"]


@pytest.mark.parametrize("stream", [False, True])
def test_claude_cache_writes_shown_and_billed_at_cache_write_rate(gateway, funded, stream):
    account, _, secret = funded
    prompt = "cache [[sim:cache_write=11]] [[sim:cache_read=5]]"
    if stream:
        with client(gateway, secret).responses.stream(model="claude-sonnet-4-5", input=prompt) as events:
            response = events.get_final_response()
    else:
        response = client(gateway, secret).responses.create(model="claude-sonnet-4-5", input=prompt)
    details = response.usage.input_tokens_details
    assert (details.cached_tokens, details.cache_write_tokens) == (5, 11)
    row = assert_billed(gateway, account, response, "claude-sonnet-4-5", stream=stream)
    assert row["cache_write_tokens"] == 11
    uncached = response.usage.input_tokens - 16
    assert row["cost_nano"] == uncached * 3000 + 5 * 300 + 11 * 3750 + response.usage.output_tokens * 15000


@pytest.mark.parametrize("model", ALL)
def test_stream_event_sequence_on_the_wire(gateway, funded, model):
    """Named SSE events whose ``type`` matches, ``sequence_number`` 0, 1, 2, ... and the
    lifecycle the SDK checks: created first, completed last, nothing after it."""
    _, _, secret = funded
    with httpx.stream("POST", gateway.url + "/v1/responses", headers={"authorization": f"Bearer {secret}"},
                      json={"model": model, "input": "events [[sim:words=3]]", "stream": True}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        text = r.read().decode()
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        data = json.loads(lines["data"])
        assert lines["event"] == data["type"]
        events.append(data)
    names = [e["type"] for e in events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    assert names.count("response.output_text.delta") == 3
    for expected in ("response.output_item.added", "response.content_part.added", "response.output_text.done",
                     "response.content_part.done", "response.output_item.done"):
        assert expected in names
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


# -- the pass-through route --------------------------------------------------------------


def test_gpt_body_reaches_upstream_unchanged(gateway, sim, funded):
    """Byte for byte, fields the gateway does not read included (store, previous_response_id...)."""
    _, _, secret = funded
    marker = "resp-passthrough-51c9"
    earlier = client(gateway, secret).responses.create(model="gpt-4.1-mini", input="an earlier turn").id
    raw = ('{ "model": "gpt-4.1-mini", "input": [{"role": "user", "content": [{"type": "input_text", "text": "'
           + marker + '"}]}], "instructions": "be brief", "store": true, "previous_response_id": "' + earlier + '",'
           ' "reasoning": {"effort": "low"}, "text": {"verbosity": "low"}, "include": ["reasoning.encrypted_content"],'
           ' "max_output_tokens": 300 }')
    r = httpx.post(gateway.url + "/v1/responses", content=raw,
                   headers={"authorization": f"Bearer {secret}", "content-type": "application/json"})
    assert r.status_code == 200, r.text
    received = sim.last_request(marker)
    assert received["path"] == "/v1/responses"
    assert received["body"] == raw
    assert received["headers"]["authorization"] == "Bearer sim-provider-key"


def test_gpt_sdk_body_unchanged_and_answer_passed_through(gateway, sim, funded):
    _, _, secret = funded
    marker = "sdk-passthrough-9d2e"
    earlier = client(gateway, secret).responses.create(model="gpt-4.1-mini", input="an earlier turn").id
    response = client(gateway, secret).responses.create(
        model="gpt-4.1-mini", input=marker, store=True, previous_response_id=earlier, metadata={"k": "v"})
    received = sim.last_request(marker)
    # unchanged but for the output cap the hold covers (the model's maximum: the client set none)
    assert received["json"] == {"model": "gpt-4.1-mini", "input": marker, "store": True,
                                "previous_response_id": earlier, "metadata": {"k": "v"}, "max_output_tokens": 32768}
    assert received["body"].startswith('{"max_output_tokens":32768,')
    # the simulator's own ids come back: the gateway did not rebuild the answer
    assert response.id.startswith("resp_sim_") and response.output[0].id.startswith("msg_sim_")


def test_gpt_stream_passes_usage_through(gateway, sim, funded):
    account, _, secret = funded
    marker = "stream-passthrough-3b1"
    with client(gateway, secret).responses.stream(model="gpt-4.1-mini", input=marker + " [[sim:words=4]]",
                                                  store=True) as stream:
        final = stream.get_final_response()
    assert upstream_body(sim, marker)["store"] is True
    assert upstream_body(sim, marker)["stream"] is True
    assert final.output_text == "w1 w2 w3 w4"
    assert_billed(gateway, account, final, "gpt-4.1-mini", stream=True)


# -- translated routes: what reaches the upstream ------------------------------------------


def test_claude_request_translated_to_messages(gateway, sim, funded):
    _, _, secret = funded
    marker = "to-messages-6a0"
    client(gateway, secret).responses.create(
        model="claude-sonnet-4-5", input=marker, instructions="Be kind.", max_output_tokens=200, store=True)
    received = sim.last_request(marker)
    assert received["path"] == "/v1/messages"
    body = received["json"]
    assert body["model"] == "claude-sonnet-4-5" and body["max_tokens"] == 200
    assert body["system"] in ("Be kind.", [{"type": "text", "text": "Be kind."}],
                              [{"type": "text", "text": "Be kind.", "cache_control": {"type": "ephemeral"}}])
    assert body["messages"] == [{"role": "user", "content": marker}] or \
        body["messages"][0]["content"][0]["text"] == marker
    assert "store" not in body and "instructions" not in body and "input" not in body


def test_deepseek_request_translated_to_chat(gateway, sim, funded):
    _, _, secret = funded
    marker = "to-chat-2f7"
    client(gateway, secret).responses.create(
        model="deepseek-chat", input=marker, instructions="Be kind.", max_output_tokens=200, store=True)
    received = sim.last_request(marker)
    assert received["path"] == "/v1/chat/completions"
    body = received["json"]
    # OpenAI-compatible providers other than OpenAI read max_tokens (docs/translation.md)
    assert body["model"] == "deepseek-chat" and body["max_tokens"] == 200
    assert body.get("max_completion_tokens") is None
    assert body["messages"] == [{"role": "system", "content": "Be kind."}, {"role": "user", "content": marker}]
    assert "store" not in body and "instructions" not in body and "input" not in body


@pytest.mark.parametrize("model", TRANSLATED)
def test_store_true_is_ignored(gateway, funded, model):
    _, _, secret = funded
    response = client(gateway, secret).responses.create(model=model, input="keep this", store=True)
    assert response.status == "completed" and response.output_text
    assert response.store is False  # nothing was stored, and the answer says so


@pytest.mark.parametrize("model", TRANSLATED)
@pytest.mark.parametrize("field,value", [("previous_response_id", "resp_abc123"), ("conversation", "conv_abc123")])
def test_stored_state_refused_for_translated_families(gateway, sim, funded, model, field, value):
    """An id the account never received is refused on every route (docs/responses.md); one it
    received from a passed-through model is refused by the translation: nothing is stored."""
    account, _, secret = funded
    marker = f"refused-{field}-{model}"
    with pytest.raises(openai.BadRequestError) as caught:
        client(gateway, secret).responses.create(model=model, input=marker, **{field: value})
    error = caught.value
    assert error.status_code == 400
    assert error.body["param"] == field
    assert "was not received by this account" in error.body["message"]
    assert "(request id: req_" in error.body["message"]
    assert error.response.headers["x-request-id"] in error.body["message"]
    if field == "previous_response_id":
        received = client(gateway, secret).responses.create(model="gpt-4.1-mini", input="passed through").id
        before = spent(gateway, account)
        with pytest.raises(openai.BadRequestError) as caught:
            client(gateway, secret).responses.create(model=model, input=marker, previous_response_id=received)
        assert caught.value.body["param"] == field and "not stored" in caught.value.body["message"]
        assert spent(gateway, account) == before
    else:
        assert gateway.admin.usage(account["id"]) == [] and spent(gateway, account) == 0
    assert sim.requests(marker) == []  # refused before the upstream


# -- function calls: a round trip as Codex CLI sends it ------------------------------------


@pytest.mark.parametrize("model", ALL)
def test_function_call_round_trip(gateway, sim, funded, model):
    """The output items go back as input items, ids and statuses included (as Codex CLI
    does), followed by the tool's ``function_call_output``."""
    account, _, secret = funded
    c = client(gateway, secret)
    question = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris? [[sim:text_then_tool]]"}]}
    first = c.responses.create(model=model, input=[question], tools=WEATHER, instructions="Use tools.")
    assert [item.type for item in first.output] == ["message", "function_call"]
    assert first.output[0].content[0].text == "Let me check."
    call = first.output[1]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "sim-city"}
    assert call.call_id and call.id and call.status == "completed"
    assert_billed(gateway, account, first, model, stream=False)

    replayed = [item.model_dump(exclude_none=True) for item in first.output]
    assert all("id" in item for item in replayed)
    second = c.responses.create(
        model=model, instructions="Use tools.", tools=WEATHER,
        input=[question, *replayed, {"type": "function_call_output", "call_id": call.call_id,
                                     "output": "sunny, 21 C"}])
    assert second.output_text == "Tool result received: sunny, 21 C"
    assert_billed(gateway, account, second, model, stream=False)
    assert spent(gateway, account) == expected_cost(model, first.usage) + expected_cost(model, second.usage)

    upstream = sim.requests("sunny, 21 C")[-1]["json"]
    if model == "claude-sonnet-4-5":
        results = [block for m in upstream["messages"] if isinstance(m["content"], list)
                   for block in m["content"] if block.get("type") == "tool_result"]
        assert results[0]["tool_use_id"] == call.call_id
    elif model == "deepseek-chat":
        tool_messages = [m for m in upstream["messages"] if m["role"] == "tool"]
        assert tool_messages == [{"role": "tool", "tool_call_id": call.call_id, "content": "sunny, 21 C"}]
    else:
        assert upstream["input"][-1] == {"type": "function_call_output", "call_id": call.call_id,
                                         "output": "sunny, 21 C"}


@pytest.mark.parametrize("model", ALL)
def test_streamed_function_call(gateway, funded, model):
    account, _, secret = funded
    tools = [{"type": "function", "name": "lookup",
              "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}}}]
    with client(gateway, secret).responses.stream(model=model, input="look it up", tools=tools) as stream:
        argument_deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    [call] = [item for item in final.output if item.type == "function_call"]
    assert json.loads(call.arguments) == {"q": "sim-q", "n": 42} == json.loads("".join(argument_deltas))
    assert_billed(gateway, account, final, model, stream=True)


# -- max_output_tokens ------------------------------------------------------------------


@pytest.mark.parametrize("model", ALL)
def test_small_max_output_tokens_gives_incomplete(gateway, funded, model):
    account, _, secret = funded
    response = client(gateway, secret).responses.create(
        model=model, input="a long answer please [[sim:words=40]]", max_output_tokens=16)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == " ".join(f"w{i}" for i in range(1, 17))
    assert response.usage.output_tokens == 16
    assert_billed(gateway, account, response, model, stream=False)


@pytest.mark.parametrize("model", ALL)
def test_small_max_output_tokens_streamed(gateway, funded, model):
    account, _, secret = funded
    with httpx.stream("POST", gateway.url + "/v1/responses", headers={"authorization": f"Bearer {secret}"},
                      json={"model": model, "input": "long [[sim:words=40]]", "stream": True,
                            "max_output_tokens": 16}) as r:
        text = r.read().decode()
    last = json.loads(text.strip().split("\n\n")[-1].split("data: ", 1)[1])
    assert last["type"] == "response.incomplete"
    assert last["response"]["status"] == "incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    usage = openai.types.responses.ResponseUsage.model_validate(last["response"]["usage"])
    row = gateway.admin.usage(account["id"], limit=1)[0]
    assert row["stream"] is True and row["output_tokens"] == 16 == usage.output_tokens
    assert row["cost_nano"] == expected_cost(model, usage)


# -- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("body,param", [
    ({"model": "claude-sonnet-4-5"}, "input"),
    ({"model": "claude-sonnet-4-5", "input": 7}, "input"),
    ({"input": "hi"}, "model"),
    ({"model": "deepseek-chat", "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "deepseek-chat", "input": "hi", "stream": "yes"}, "stream"),
    ({"model": "deepseek-chat", "input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
    ({"model": "claude-sonnet-4-5", "input": "hi", "tools": [{"type": "web_search"}],
      "tool_choice": {"type": "web_search"}}, "tool_choice"),
    ({"model": "deepseek-chat", "input": "hi", "tools": [{"type": "web_search"}], "tool_choice": "required"},
     "tool_choice"),
    ({"model": "deepseek-chat", "input": "hi", "tools": [{"type": "file_search"}]}, "tools[0].vector_store_ids"),
])
def test_bad_bodies_are_clear_400s(gateway, funded, body, param):
    account, _, secret = funded
    r = httpx.post(gateway.url + "/v1/responses", json=body, headers={"authorization": f"Bearer {secret}"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"].endswith(f"(request id: {r.headers['x-request-id']})")
    assert gateway.admin.usage(account["id"]) == []


# -- what Codex CLI sends, and provider errors ---------------------------------------------


CODEX_TOOLS = [{"type": "function", "name": "shell", "description": "Run a command", "strict": False,
                "parameters": {"type": "object", "properties": {"command": {"type": "array",
                                                                            "items": {"type": "string"}}}}}]


@pytest.mark.parametrize("model", ALL)
def test_codex_style_turn(gateway, sim, funded, model):
    """A later Codex turn: developer message, the earlier reasoning (sealed), assistant message and
    function call items with their ids and statuses, the call's output, and the fields Codex
    always sends (store false, include, prompt_cache_key, parallel_tool_calls, reasoning)."""
    account, _, secret = funded
    marker = f"codex-{model}"
    items = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
        {"type": "message", "role": "user", "id": "msg_u1", "content": [{"type": "input_text", "text": marker}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAsealed"},
        {"type": "message", "role": "assistant", "id": "msg_a1", "status": "completed",
         "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell", "status": "completed",
         "arguments": '{"command": ["ls"]}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "README.md"},
    ]
    response = client(gateway, secret).responses.create(
        model=model, input=items, tools=CODEX_TOOLS, tool_choice="auto", parallel_tool_calls=False, store=False,
        include=["reasoning.encrypted_content"], prompt_cache_key="codex-session-1",
        reasoning={"effort": "medium", "summary": "auto"}, instructions="Follow the user.")
    assert response.status == "completed"
    assert response.output_text == "Tool result received: README.md"
    assert_billed(gateway, account, response, model, stream=False)
    upstream = sim.last_request(marker)["json"]
    if model == "gpt-4.1-mini":
        assert upstream["input"] == items  # passed through, ids, sealed reasoning and all
    else:
        assert "gAAAAsealed" not in json.dumps(upstream)  # sealed for OpenAI's models: dropped


@pytest.mark.parametrize("model", TRANSLATED)
@pytest.mark.parametrize("stream", [False, True])
def test_hosted_tools_are_dropped_with_a_header_and_custom_tools_called(gateway, sim, funded, model, stream):
    """Codex offers web_search and image generation on every turn: a translated model runs
    without them (the header says so), and its call to a free-form tool comes back as a
    custom_tool_call."""
    account, _, secret = funded
    marker = f"hosted-{model}-{stream}"
    tools = [{"type": "web_search", "external_web_access": True}, {"type": "image_generation"},
             {"type": "custom", "name": "apply_patch", "description": "Edit files",
              "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}]
    body = {"model": model, "input": f"{marker} [[sim:args={{\"input\": \"patch text\"}}]]", "tools": tools,
            "stream": stream}
    with httpx.stream("POST", gateway.url + "/v1/responses", json=body,
                      headers={"authorization": f"Bearer {secret}"}) as r:
        raw = r.read()
    assert r.status_code == 200, raw
    assert r.headers["x-gatewayd-dropped-tools"] == (
        'web_search, image_generation; reason="built-in tools run only on OpenAI\'s own Responses API; '
        'this model is served by translation"')
    if stream:
        done = [json.loads(line[5:]) for line in raw.decode().splitlines() if line.startswith("data:")][-1]
        output = done["response"]["output"]
    else:
        output = json.loads(raw)["output"]
    [call] = output
    assert (call["type"], call["name"], call["input"]) == ("custom_tool_call", "apply_patch", "patch text")
    upstream = sim.last_request(marker)["json"]
    assert "web_search" not in json.dumps(upstream) and "image_generation" not in json.dumps(upstream)
    assert len(gateway.admin.usage(account["id"])) == 1


@pytest.mark.parametrize("model", ALL)
def test_provider_error_keeps_status_and_is_not_charged(gateway, funded, model):
    account, _, secret = funded
    with pytest.raises(openai.RateLimitError) as caught:
        client(gateway, secret).responses.create(model=model, input="busy [[sim:fault=status:429]]")
    error = caught.value
    assert error.status_code == 429
    assert error.response.headers.get("retry-after")
    assert "simulated error 429" in error.body["message"]
    assert spent(gateway, account) == 0
    assert gateway.admin.usage(account["id"], limit=1)[0]["status"] == "upstream_error"


@pytest.mark.parametrize("model", TRANSLATED)
def test_broken_translated_stream_ends_failed(gateway, funded, model):
    """The provider's error mid-stream becomes an ``error`` event and ``response.failed``;
    the SDK refuses to hand out the partial response as final."""
    account, _, secret = funded
    with client(gateway, secret).responses.stream(
        model=model, input="x [[sim:words=10]] [[sim:fault=error_after:3]]"
    ) as stream:
        names = [event.type for event in stream]
        with pytest.raises(RuntimeError):
            stream.get_final_response()
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-2:] == ["error", "response.failed"]
    assert "response.completed" not in names
    assert gateway.admin.balance(account["id"])["held_nano"] == 0
