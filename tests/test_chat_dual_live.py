"""Issue 3, live: the official openai SDK calls a dual-format model (claude-sonnet-4-5)
through /v1/chat/completions; the gateway speaks Anthropic Messages to the simulator and
answers in the chat format. Each test also looks at the request the simulator received.

Billing is the messages endpoint's, to the nano-dollar: the same prompt through both
endpoints gives the same usage row numbers and the same cost.
"""

from __future__ import annotations

import base64
import json
import uuid

import httpx
import openai
import orjson
import pytest

MODEL = "claude-sonnet-4-5"
SONNET = {"input": 3000, "output": 15000, "cached": 300, "cache_write": 3750}  # nano-USD per token
PAID = 10_000_000_000
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 24).decode()
PDF = base64.b64encode(b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n").decode()

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "units": {"type": "string"}},
                   "required": ["city"]}}}
LOOKUP = {"type": "function", "function": {
    "name": "lookup",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}}}}


def client(gateway, secret) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)


def without_breakpoints(value):
    """``value`` without the prompt-cache breakpoints the gateway places on Claude routes
    (auto_cache, tested on its own below), a one-text content as the plain string it was."""
    if isinstance(value, list):
        return [without_breakpoints(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: without_breakpoints(v) for k, v in value.items() if k != "cache_control"}
    content = out.get("content")
    if "role" in out and isinstance(content, list) and len(content) == 1 and content[0].get("type") == "text" \
            and set(content[0]) == {"type", "text"} and "cache_control" in json.dumps(value):
        out["content"] = content[0]["text"]
    return out


def tag() -> str:
    return "dual-" + uuid.uuid4().hex[:10]


def row_cost(row: dict) -> int:
    """The charge a usage row must carry at claude-sonnet-4-5's prices (its input is the whole prompt)."""
    uncached = row["input_tokens"] - row["cached_tokens"] - row["cache_write_tokens"]
    return (uncached * SONNET["input"] + row["cached_tokens"] * SONNET["cached"]
            + row["cache_write_tokens"] * SONNET["cache_write"] + row["output_tokens"] * SONNET["output"])


def sim_stream_pieces(sim, upstream_body: dict) -> list[str]:
    """Replay the request the gateway sent, straight to the simulator, streamed: each tool_use
    block's input JSON exactly as the simulator streams it."""
    raw = httpx.post(sim.url + "/v1/messages", json={**upstream_body, "stream": True},
                     headers={"x-api-key": "k", "anthropic-version": "2023-06-01"}).content
    pieces: dict[int, str] = {}
    for block in raw.split(b"\n\n"):
        data = b"".join(ln[6:] for ln in block.split(b"\n") if ln.startswith(b"data: "))
        if data:
            event = json.loads(data)
            if event["type"] == "content_block_delta" and event["delta"]["type"] == "input_json_delta":
                pieces[event["index"]] = pieces.get(event["index"], "") + event["delta"]["partial_json"]
    return [pieces[i] for i in sorted(pieces)]


# -- non-streaming ---------------------------------------------------------------------------------


def test_non_stream_is_translated_both_ways_and_billed_exactly(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    raw = client(gateway, secret).chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": f"Hello {marker}"}], max_tokens=400, stop=["\n\n"])
    completion = raw.parse()
    assert completion.object == "chat.completion" and completion.model == MODEL
    assert completion.choices[0].message.content == f"This is a simulated reply to: Hello {marker}."
    assert completion.choices[0].finish_reason == "stop"

    received = sim.last_request(marker)
    assert received["path"] == "/v1/messages"
    assert received["headers"]["anthropic-version"] == "2023-06-01"
    assert received["headers"]["x-api-key"] == "sim-provider-key" and "authorization" not in received["headers"]
    assert without_breakpoints(received["json"]) == {"model": MODEL, "max_tokens": 400,
                                "system": [{"type": "text", "text": "Be brief."}],
                                "messages": [{"role": "user", "content": f"Hello {marker}"}],
                                "stop_sequences": ["\n\n"]}

    [row] = gateway.admin.usage(account["id"])
    assert row["request_id"] == raw.headers["x-request-id"]
    assert (row["model"], row["endpoint"], row["stream"], row["status"]) == (MODEL, "chat", False, "ok")
    assert (row["input_tokens"], row["output_tokens"]) == (completion.usage.prompt_tokens,
                                                           completion.usage.completion_tokens)
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    cost = completion.usage.prompt_tokens * SONNET["input"] + completion.usage.completion_tokens * SONNET["output"]
    assert row["cost_nano"] == cost
    assert gateway.admin.balance(account["id"]) == {"balance_nano": PAID - cost, "held_nano": 0,
                                                     "total_paid_nano": PAID}


def test_non_stream_tool_round_trip(gateway, sim, funded):
    account, _, secret = funded
    c = client(gateway, secret)
    marker = tag()
    messages = [{"role": "user", "content": f"Weather in Paris? {marker}"}]
    first = c.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER])
    assert first.choices[0].finish_reason == "tool_calls"
    [call] = first.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "sim-city", "units": "sim-units"}
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    second = c.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER])
    assert second.choices[0].message.content == "Tool result received: sunny, 21 C"
    upstream = without_breakpoints(sim.last_request("sunny, 21 C")["json"])
    assert upstream["messages"][1]["content"][-1] == {"type": "tool_use", "id": call.id, "name": "get_weather",
                                                      "input": {"city": "sim-city", "units": "sim-units"}}
    assert upstream["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C"}]}
    rows = gateway.admin.usage(account["id"])
    assert len(rows) == 2 and all(r["cost_nano"] == row_cost(r) for r in rows)


# -- streaming -------------------------------------------------------------------------------------


def test_stream_text_then_two_tool_calls_with_fragmented_arguments(gateway, sim, funded):
    account, _, secret = funded
    marker = tag()
    with client(gateway, secret).chat.completions.stream(
        model=MODEL, tools=[WEATHER, LOOKUP],
        messages=[{"role": "user", "content": f"[[sim:text_then_tool]] [[sim:tools=2]] {marker}"}],
    ) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    chunks = [e.chunk for e in events if e.type == "chunk"]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.choices for c in chunks), "no usage chunk without include_usage"
    # each call: a first delta with id, type, name and "" arguments, then several fragments
    deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or ())]
    for index in (0, 1):
        mine = [d for d in deltas if d.index == index]
        assert mine[0].id and mine[0].type == "function" and mine[0].function.arguments == ""
        assert len([d for d in mine[1:] if d.function.arguments]) >= 2, "arguments should arrive in fragments"
        assert all(d.id is None for d in mine[1:])
    message = final.choices[0].message
    assert message.content == "Let me check."
    assert final.choices[0].finish_reason == "tool_calls"
    assert [(t.index, t.function.name) for t in message.tool_calls] == [(0, "get_weather"), (1, "lookup")]
    upstream = sim.last_request(marker)["json"]
    assert upstream["stream"] is True
    assert [t["name"] for t in upstream["tools"]] == ["get_weather", "lookup"]
    assert [t.function.arguments for t in message.tool_calls] == sim_stream_pieces(sim, upstream)
    assert json.loads(message.tool_calls[1].function.arguments) == {"q": "sim-q", "n": 42}
    [row] = gateway.admin.usage(account["id"])
    assert (row["stream"], row["status"]) == (True, "ok") and row["cost_nano"] == row_cost(row)


def test_stream_with_include_usage_ends_with_the_usage_chunk(gateway, funded):
    account, _, secret = funded
    stream = client(gateway, secret).chat.completions.create(
        model=MODEL, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "[[sim:words=6]] [[sim:cache_read=50]] [[sim:cache_write=20]]"}])
    chunks = list(stream)
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    assert "".join(c.choices[0].delta.content or "" for c in chunks[:-1]) == "w1 w2 w3 w4 w5 w6"
    assert last.usage.completion_tokens == 6 and last.usage.prompt_tokens_details.cached_tokens == 50
    [row] = gateway.admin.usage(account["id"])
    assert (row["input_tokens"], row["output_tokens"], row["cached_tokens"], row["cache_write_tokens"]) == (
        last.usage.prompt_tokens, 6, 50, 20)
    assert row["cost_nano"] == row_cost(row)


def test_stream_without_include_usage_has_no_usage_chunk_but_is_billed(gateway, funded):
    account, _, secret = funded
    chunks = list(client(gateway, secret).chat.completions.create(
        model=MODEL, stream=True, messages=[{"role": "user", "content": "[[sim:words=4]] no usage"}]))
    assert all(c.choices and c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    [row] = gateway.admin.usage(account["id"])
    assert (row["status"], row["output_tokens"]) == ("ok", 4) and row["cost_nano"] == row_cost(row)


def test_raw_stream_ends_with_done_and_drops_pings(gateway, funded):
    _, _, secret = funded
    r = httpx.post(gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                   json={"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.content.endswith(b"data: [DONE]\n\n")
    assert b"event:" not in r.content and b"ping" not in r.content


def test_upstream_error_mid_stream_makes_the_sdk_raise(gateway, funded):
    account, _, secret = funded
    seen = []
    with pytest.raises(openai.APIError) as info:
        for chunk in client(gateway, secret).chat.completions.create(
                model=MODEL, stream=True,
                messages=[{"role": "user", "content": "[[sim:fault=error_after:2]] [[sim:words=10]]"}]):
            seen.append(chunk)
    assert "simulated mid-stream error" in str(info.value)
    assert "".join(c.choices[0].delta.content or "" for c in seen) == "w1 w2 "
    [row] = gateway.admin.usage(account["id"])
    assert row["status"] == "upstream_error" and row["cost_nano"] == row_cost(row)


def test_upstream_error_status_kept_in_the_chat_envelope(gateway, funded):
    account, _, secret = funded
    with pytest.raises(openai.RateLimitError) as info:
        client(gateway, secret).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "[[sim:fault=status:429]]"}])
    assert info.value.status_code == 429 and info.value.response.headers["retry-after"] == "7"
    assert info.value.body["message"] == "simulated error 429" and info.value.body["type"] == "rate_limit_error"
    with pytest.raises(openai.APIStatusError) as info:
        client(gateway, secret).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "[[sim:fault=status:529]]"}])
    assert info.value.status_code == 529 and info.value.body["type"] == "overloaded_error"
    assert all(r["cost_nano"] == 0 for r in gateway.admin.usage(account["id"]))
    assert gateway.admin.balance(account["id"])["balance_nano"] == PAID


# -- what the translation carries ------------------------------------------------------------------


def test_images_and_pdf_reach_the_provider_as_blocks(gateway, sim, funded):
    _, _, secret = funded
    marker = tag()
    content = [
        {"type": "text", "text": f"Describe these {marker}"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "high"}},
        {"type": "file", "file": {"filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF}"}},
    ]
    reply = client(gateway, secret).chat.completions.create(model=MODEL, messages=[{"role": "user",
                                                                                     "content": content}])
    assert reply.choices[0].message.content.startswith("This is a simulated reply to: Describe these")
    [turn] = without_breakpoints(sim.last_request(marker)["json"]["messages"])
    assert turn["role"] == "user"
    assert turn["content"] == [
        {"type": "text", "text": f"Describe these {marker}"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
    ]


@pytest.mark.parametrize("effort", ["low", "high"])
def test_reasoning_effort_becomes_thinking_with_a_budget(gateway, sim, funded, effort):
    _, _, secret = funded
    marker = tag()
    reply = client(gateway, secret).chat.completions.create(
        model=MODEL, reasoning_effort=effort, max_completion_tokens=4000, temperature=0.2,
        messages=[{"role": "user", "content": f"Think {marker}"}])
    message = reply.choices[0].message
    assert message.content == f"This is a simulated reply to: Think {marker}."
    assert message.model_extra["reasoning_content"] == "Let me think about this step by step."
    upstream = sim.last_request(marker)["json"]
    budget = upstream["thinking"]["budget_tokens"]
    assert upstream["thinking"]["type"] == "enabled" and 1024 <= budget < upstream["max_tokens"]
    assert "temperature" not in upstream  # Anthropic takes only temperature 1 with thinking
    assert budget == {"low": 2048, "high": 24576}[effort]
    assert upstream["max_tokens"] == (4000 if effort == "low" else budget + 4096)


CAPS = (2048, 4000, 8192, 16000, 32000, 64000)


@pytest.mark.parametrize("model", [MODEL, "claude-3-5-haiku"])  # a 64,000 and an 8,192 maximum
def test_every_effort_under_every_cap_gets_a_budget_the_provider_takes(gateway, sim, funded, model):
    """Issue 36: ``reasoning_effort`` at every level, caps from 2,048 to 64,000: the provider
    (the simulator refuses ``budget_tokens >= max_tokens`` as Anthropic does) answers every one;
    1024 <= budget < max_tokens <= the model's maximum, and the budget grows with the effort."""
    _, _, secret = funded
    c = client(gateway, secret)
    model_max = {MODEL: 64000, "claude-3-5-haiku": 8192}[model]
    for cap in CAPS:
        budgets = []
        for effort in ("none", "minimal", "low", "medium", "high", "xhigh", "max"):
            marker = tag()
            reply = c.chat.completions.create(model=model, reasoning_effort=effort, max_completion_tokens=cap,
                                              messages=[{"role": "user", "content": f"Think {marker}"}])
            assert reply.choices[0].message.content == f"This is a simulated reply to: Think {marker}."
            upstream = sim.last_request(marker)["json"]
            if effort == "none":
                assert "thinking" not in upstream and upstream["max_tokens"] == min(cap, model_max)
                continue
            budget = upstream["thinking"]["budget_tokens"]
            assert 1024 <= budget < upstream["max_tokens"] <= model_max, (effort, cap, upstream["max_tokens"])
            assert upstream["max_tokens"] >= min(cap, model_max)  # the client's cap is never lowered
            budgets.append(budget)
        assert budgets == sorted(budgets), (cap, budgets)


def test_tool_round_trip_with_thinking_keeps_the_signed_thinking_block(gateway, sim, funded):
    """Anthropic needs the thinking block (with its signature) back in front of the tool_use of
    the turn it came with; the SDK's accumulated message carries it through as thinking_blocks."""
    _, _, secret = funded
    c = client(gateway, secret)
    marker = tag()
    messages = [{"role": "user", "content": f"weather? {marker}"}]
    with c.chat.completions.stream(model=MODEL, reasoning_effort="low", tools=[WEATHER], messages=messages) as s:
        first = s.get_final_completion().choices[0].message
    assert first.model_extra["reasoning_content"] == "Let me think about this step by step."
    [call] = first.tool_calls
    messages += [first.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": call.id, "content": "rainy"}]
    second = c.chat.completions.create(model=MODEL, reasoning_effort="low", tools=[WEATHER], messages=messages)
    assert second.choices[0].message.content == "Tool result received: rainy"
    upstream = sim.last_request("rainy")["json"]
    assert upstream["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    thinking, tool_use = upstream["messages"][1]["content"]
    assert thinking == {"type": "thinking", "thinking": "Let me think about this step by step.",
                        "signature": first.model_extra["thinking_blocks"][0]["signature"]}
    assert (tool_use["type"], tool_use["id"]) == ("tool_use", call.id)


def test_reasoning_streams_as_reasoning_content(gateway, funded):
    _, _, secret = funded
    chunks = list(client(gateway, secret).chat.completions.create(
        model=MODEL, reasoning_effort="medium", stream=True, messages=[{"role": "user", "content": "ponder"}]))
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks)
    assert reasoning == "Let me think about this step by step."


def test_bad_tool_arguments_are_a_400_naming_the_message(gateway, funded):
    account, _, secret = funded
    with pytest.raises(openai.BadRequestError) as info:
        client(gateway, secret).chat.completions.create(model=MODEL, tools=[WEATHER], messages=[
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{oops"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "r"}])
    assert "messages[1]" in info.value.body["message"]
    assert gateway.admin.usage(account["id"]) == []


# -- billing identical to the messages endpoint ----------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_billing_identical_to_the_messages_endpoint(gateway, funded, stream):
    account, _, secret = funded
    prompt = "[[sim:cache_read=900]] [[sim:cache_write=333]] [[sim:words=15]] same prompt both ways"
    chat = client(gateway, secret).chat.completions.create(
        model=MODEL, max_tokens=500, stream=stream, messages=[{"role": "user", "content": prompt}])
    if stream:
        list(chat)
    r = httpx.post(gateway.url + "/v1/messages", headers={"x-api-key": secret},
                   json={"model": MODEL, "max_tokens": 500, "stream": stream,
                         "messages": [{"role": "user", "content": prompt}]})
    assert r.status_code == 200
    via_messages, via_chat = gateway.admin.usage(account["id"])
    assert (via_chat["endpoint"], via_messages["endpoint"]) == ("chat", "messages")
    numbers = ("input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens", "cost_nano")
    assert [via_chat[n] for n in numbers] == [via_messages[n] for n in numbers]
    assert (via_chat["cached_tokens"], via_chat["cache_write_tokens"], via_chat["output_tokens"]) == (900, 333, 15)
    assert via_chat["cost_nano"] == row_cost(via_chat)
    assert gateway.admin.balance(account["id"])["balance_nano"] == PAID - 2 * via_chat["cost_nano"]


def test_reply_without_usage_is_charged_for_what_it_carries(gateway, sim, funded):
    from gatewayd import tokens
    from gatewayd.billing.estimate import estimate_input_tokens

    account, _, secret = funded
    marker = tag()
    reply = client(gateway, secret).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": f"[[sim:fault=no_usage]] [[sim:words=9]] {marker}"}])
    assert reply.choices[0].message.content == "w1 w2 w3 w4 w5 w6 w7 w8 w9"
    [row] = gateway.admin.usage(account["id"])
    upstream = sim.last_request(marker)["json"]
    assert (row["input_tokens"], row["output_tokens"]) == (estimate_input_tokens(upstream, "messages"),
                                                           tokens.count("w1 w2 w3 w4 w5 w6 w7 w8 w9", "claude"))
    assert row["cost_nano"] == row_cost(row)


def test_response_format_and_the_clients_cache_control_are_not_carried(gateway, sim, funded):
    """The spec: translation does not carry response_format (use /v1/messages), nor a chat
    client's cache_control (only an operator's explicit ``auto_cache = true`` carries it: issue
    36). On a Claude route by default the gateway places its own breakpoints instead: the
    system prompt and the last block, 5-minute ones, not the client's 1-hour marker."""
    _, _, secret = funded
    marker = tag()
    reply = client(gateway, secret).chat.completions.create(
        model=MODEL, response_format={"type": "json_object"},
        messages=[{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": [{"type": "text", "text": f"json please {marker}",
                                                "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}])
    assert reply.choices[0].message.content
    upstream = sim.last_request(marker)["json"]
    assert "response_format" not in upstream and "output_config" not in upstream
    assert upstream["system"] == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    assert upstream["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": f"json please {marker}", "cache_control": {"type": "ephemeral"}}]}]
    assert b'"1h"' not in orjson.dumps(upstream)


@pytest.mark.parametrize("part,fragment", [
    ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "audio"),
    ({"type": "file", "file": {"filename": "a.txt", "file_data": "data:text/plain;base64,aGk="}}, "PDF"),
    ({"type": "image_url", "image_url": {"url": "ftp://example.com/cat.png"}}, "image"),
])
def test_unsupported_parts_are_a_clear_400_and_nothing_charged(gateway, funded, part, fragment):
    account, _, secret = funded
    with pytest.raises(openai.BadRequestError) as info:
        client(gateway, secret).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": [{"type": "text", "text": "x"}, part]}])
    assert fragment in info.value.body["message"]
    assert gateway.admin.usage(account["id"]) == []
    assert gateway.admin.balance(account["id"])["balance_nano"] == PAID
