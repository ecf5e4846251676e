"""POST /v1/messages end to end: the official anthropic SDK (and raw HTTP) -> gatewayd -> simulator.

What is shown here (issue 8): the body and the events pass through untouched, the headers
the provider needs are set (version, betas, the provider's key and never the client's),
a model that is not dual-format is refused, every charge is exact to the nano-dollar
(cache reads and cache writes included) and the usage row carries all four numbers.
Error shapes are in test_messages_errors_live.py.
"""

from __future__ import annotations

import json
import re

import anthropic
import httpx
import pytest

# claude-sonnet-4-5: $3 / $15 / cached $0.30 / cache write $3.75 per 1M tokens -> nano per token
SONNET = {"input": 3000, "output": 15000, "cached": 300, "cache_write": 3750}
PAID = 10_000_000_000

WEATHER = {
    "name": "get_weather", "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "units": {"type": "string"}},
                     "required": ["city"]},
}
WEATHER_INPUT = {"city": "sim-city", "units": "sim-units"}  # the simulator's arguments for that schema


def expected_cost(usage) -> int:
    """A messages-format usage (SDK object or dict) priced at claude-sonnet-4-5's rates."""
    get = usage.get if isinstance(usage, dict) else lambda name: getattr(usage, name)
    return (get("input_tokens") * SONNET["input"] + (get("cache_read_input_tokens") or 0) * SONNET["cached"]
            + (get("cache_creation_input_tokens") or 0) * SONNET["cache_write"]
            + get("output_tokens") * SONNET["output"])


def client(gateway, secret) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=secret, max_retries=0)


def post(gateway, body, headers=None, path="/v1/messages", **kw) -> httpx.Response:
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(gateway.url + path, content=content,
                      headers={"content-type": "application/json", **(headers or {})}, timeout=30, **kw)


def sse_events(raw: bytes) -> list[tuple[str | None, dict]]:
    """(event name, data) of each event of a raw SSE body; the name is None when a block has no event line."""
    out = []
    for block in raw.split(b"\n\n"):
        if not block.strip():
            continue
        name, data = None, b""
        for line in block.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[7:].decode()
            elif line.startswith(b"data: "):
                data += line[6:]
        out.append((name, json.loads(data)))
    return out


def body(text: str | list, **extra) -> dict:
    return {"model": "claude-sonnet-4-5", "max_tokens": 200, "messages": [{"role": "user", "content": text}], **extra}


# -- the official SDK ----------------------------------------------------------------------------


def test_sdk_create_charges_exactly_and_forwards_the_sdk_version(gateway, sim, funded):
    account, key, secret = funded
    raw = client(gateway, secret).messages.with_raw_response.create(
        model="claude-sonnet-4-5", max_tokens=300, messages=[{"role": "user", "content": "Hello sdk-create-4b1"}])
    sent = raw.http_request.headers
    assert sent["authorization"] == f"Bearer {secret}" and "x-api-key" not in sent  # what the SDK sends
    assert raw.headers["x-request-id"].startswith("req_")
    message = raw.parse()
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "This is a simulated reply to: Hello sdk-create-4b1."
    assert message.model == "claude-sonnet-4-5" and message.stop_reason == "end_turn"

    received = sim.last_request("sdk-create-4b1")
    assert received["headers"]["anthropic-version"] == sent["anthropic-version"]  # the SDK's own version
    assert received["headers"]["x-api-key"] == "sim-provider-key"
    assert "authorization" not in received["headers"]

    cost = expected_cost(message.usage)
    assert gateway.admin.balance(account["id"]) == {"balance_nano": PAID - cost, "held_nano": 0,
                                                     "total_paid_nano": PAID}
    [row] = gateway.admin.usage(account["id"])
    assert row["request_id"] == raw.headers["x-request-id"]
    assert (row["model"], row["endpoint"], row["stream"], row["status"]) == ("claude-sonnet-4-5", "messages", False,
                                                                           "ok")
    assert (row["input_tokens"], row["output_tokens"]) == (message.usage.input_tokens, message.usage.output_tokens)
    assert row["cost_nano"] == cost
    assert gateway.admin.call("GET", f"/keys/{key['id']}")["spent_nano"] == cost


def test_sdk_stream_thinking_text_and_fragmented_tool_input(gateway, funded):
    account, _, secret = funded
    with client(gateway, secret).messages.stream(
        model="claude-sonnet-4-5", max_tokens=1000, tools=[WEATHER],
        messages=[{"role": "user", "content": "[[sim:thinking]] [[sim:text_then_tool]] weather in Paris?"}],
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    fragments = [e.delta.partial_json for e in events
                 if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert len(fragments) >= 3, "the tool input should arrive in several input_json_delta fragments"
    assert json.loads("".join(fragments)) == WEATHER_INPUT
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    thinking, text, tool = final.content
    assert thinking.thinking == "Let me think about this step by step." and thinking.signature.startswith("sig-")
    assert text.text == "Let me check."
    assert (tool.name, tool.input) == ("get_weather", WEATHER_INPUT) and tool.id.startswith("toolu_")
    assert final.stop_reason == "tool_use"

    [row] = gateway.admin.usage(account["id"])
    assert (row["endpoint"], row["stream"], row["status"]) == ("messages", True, "ok")
    assert (row["input_tokens"], row["output_tokens"]) == (final.usage.input_tokens, final.usage.output_tokens)
    assert row["cost_nano"] == expected_cost(final.usage)
    assert gateway.admin.balance(account["id"])["balance_nano"] == PAID - expected_cost(final.usage)


def test_sdk_tool_round_trip_is_two_billed_requests(gateway, sim, funded):
    account, _, secret = funded
    c = client(gateway, secret)
    messages = [{"role": "user", "content": "What is the weather in Paris? round-trip-9c2"}]
    thinking = {"type": "enabled", "budget_tokens": 1024}
    first = c.messages.create(model="claude-sonnet-4-5", max_tokens=2000, tools=[WEATHER], messages=messages,
                              thinking=thinking)
    assert first.stop_reason == "tool_use"
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert (call.name, call.input) == ("get_weather", WEATHER_INPUT)
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                               "content": "sunny, 21 C"}]}]
    second = c.messages.create(model="claude-sonnet-4-5", max_tokens=2000, tools=[WEATHER], messages=messages,
                               thinking=thinking)
    assert second.stop_reason == "end_turn"
    assert second.content[-1].text == "Tool result received: sunny, 21 C"
    sent = sim.last_request("sunny, 21 C")["json"]
    assert sent["thinking"] == thinking
    # the thinking block goes back with its signature, untouched, as the provider requires
    assert sent["messages"][1]["content"][0] == {"type": "thinking", "thinking": first.content[0].thinking,
                                                 "signature": first.content[0].signature}
    assert sent["messages"][-1]["content"][0] == {"type": "tool_result", "tool_use_id": call.id,
                                                  "content": "sunny, 21 C"}
    rows = gateway.admin.usage(account["id"])
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert sum(r["cost_nano"] for r in rows) == expected_cost(first.usage) + expected_cost(second.usage)


def test_sdk_models_list_only_the_keys_models(gateway, funded):
    account, _, _ = funded
    secret = gateway.admin.key(account["id"], models=["claude-sonnet-4-5", "gpt-4.1-mini"])["secret"]
    page = client(gateway, secret).models.list()
    assert [m.id for m in page] == ["gpt-4.1-mini", "claude-sonnet-4-5"]
    assert all(m.type == "model" and m.display_name == m.id for m in page)
    assert client(gateway, secret).models.retrieve("claude-sonnet-4-5").id == "claude-sonnet-4-5"
    with pytest.raises(anthropic.NotFoundError):
        client(gateway, secret).models.retrieve("claude-haiku-4-5")  # not on this key's list
    # the raw shape, with x-api-key (what older clients send) and a version header
    r = httpx.get(gateway.url + "/v1/models", headers={"x-api-key": secret, "anthropic-version": "2023-06-01"})
    assert r.status_code == 200
    doc = r.json()
    assert set(doc) == {"data", "has_more", "first_id", "last_id"}
    assert doc["has_more"] is False
    assert (doc["first_id"], doc["last_id"]) == ("gpt-4.1-mini", "claude-sonnet-4-5")
    for item in doc["data"]:
        assert set(item) == {"type", "id", "display_name", "created_at"} and item["type"] == "model"
        assert item["created_at"].endswith("Z")


def test_sdk_models_list_for_an_unrestricted_key_has_every_chat_model(gateway, funded):
    _, _, secret = funded
    ids = [m.id for m in client(gateway, secret).models.list()]
    assert "claude-sonnet-4-5" in ids and "gpt-4.1-mini" in ids
    assert not any(i.startswith("text-embedding") for i in ids)


# -- headers -------------------------------------------------------------------------------------


def test_x_api_key_without_version_gets_2023_06_01_and_the_providers_key(gateway, sim, funded):
    _, _, secret = funded
    r = post(gateway, body("no-version-5d0"), {"x-api-key": secret})
    assert r.status_code == 200, r.text
    received = sim.last_request("no-version-5d0")["headers"]
    assert received["anthropic-version"] == "2023-06-01"
    assert received["x-api-key"] == "sim-provider-key"
    assert "authorization" not in received and "anthropic-beta" not in received
    assert not any(secret in value or secret[3:] in value for value in received.values())


def test_client_version_forwarded_as_sent(gateway, sim, funded):
    _, _, secret = funded
    r = post(gateway, body("version-kept-8e1"), {"x-api-key": secret, "anthropic-version": "2024-01-01"})
    assert r.status_code == 200, r.text
    assert sim.last_request("version-kept-8e1")["headers"]["anthropic-version"] == "2024-01-01"


def test_bearer_key_is_never_forwarded(gateway, sim, funded):
    _, _, secret = funded
    r = post(gateway, body("bearer-7a9"), {"authorization": f"Bearer {secret}", "anthropic-version": "2023-06-01"})
    assert r.status_code == 200, r.text
    received = sim.last_request("bearer-7a9")["headers"]
    assert received["x-api-key"] == "sim-provider-key" and "authorization" not in received
    assert not any(secret[3:] in value for value in received.values())


def test_every_beta_header_forwarded(gateway, sim, funded):
    _, _, secret = funded
    headers = [("content-type", "application/json"), ("x-api-key", secret),
               ("anthropic-beta", "interleaved-thinking-2025-05-14, context-management-2025-06-27"),
               ("anthropic-beta", "files-api-2025-04-14"),
               ("anthropic-beta", "prompt-caching-scope-2026-01-05,token-efficient-tools-2025-02-19")]
    r = httpx.post(gateway.url + "/v1/messages", content=json.dumps(body("betas-3f6")), headers=headers)
    assert r.status_code == 200, r.text
    received = sim.last_request("betas-3f6")["headers"]["anthropic-beta"]
    assert [b.strip() for b in received.split(",")] == [
        "interleaved-thinking-2025-05-14", "context-management-2025-06-27", "files-api-2025-04-14",
        "prompt-caching-scope-2026-01-05", "token-efficient-tools-2025-02-19"]


def test_query_string_accepted(gateway, sim, funded):
    """Claude Code calls POST /v1/messages?beta=true on every turn."""
    account, _, secret = funded
    r = post(gateway, body("query-string-2c4", stream=True), {"x-api-key": secret}, path="/v1/messages?beta=true")
    assert r.status_code == 200, r.text
    assert sse_events(r.content)[-1][0] == "message_stop"
    assert sim.last_request("query-string-2c4")["path"] == "/v1/messages"
    assert gateway.admin.usage(account["id"])[0]["status"] == "ok"


# -- the body and the events pass through ----------------------------------------------------------


def test_body_passes_through_byte_for_byte(gateway, sim, funded):
    """Fields the gateway does not know (newer API versions, betas) reach the provider untouched."""
    _, _, secret = funded
    raw = ('{ "model":"claude-sonnet-4-5", "max_tokens" : 32000, "stream": false,\n'
           ' "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],\n'
           ' "messages": [{"role": "system", "content": "beta system turn"},\n'
           '   {"role": "user", "content": [{"type": "text", "text": "bytes-6b2 caf\\u00e9 \u00fcber",'
           ' "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}],\n'
           ' "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},\n'
           ' "thinking": {"type": "adaptive", "display": "summarized"}, "output_config": {"effort": "high"},\n'
           ' "metadata": {"user_id": "{\\"device_id\\":\\"abc\\",\\"session_id\\":\\"s1\\"}"},\n'
           ' "tools": [{"name": "noop", "input_schema": {"type": "object"}, "defer_loading": true}],\n'
           ' "temperature": 1, "some_future_field": {"nested": [1, 2.50, null]} }')
    r = httpx.post(gateway.url + "/v1/messages", content=raw.encode(),
                   headers={"x-api-key": secret, "content-type": "application/json",
                            "anthropic-beta": "context-management-2025-06-27"})
    assert r.status_code == 200, r.text
    received = sim.last_request("bytes-6b2")
    assert received["body"] == raw
    assert received["json"]["metadata"]["user_id"] == '{"device_id":"abc","session_id":"s1"}'


def test_only_the_model_is_mapped_in_the_bytes(gateway, sim, funded):
    """claude-3-5-haiku is served upstream as claude-3-5-haiku-latest: that value changes, no other byte."""
    _, _, secret = funded
    raw = ('{"max_tokens": 50,  "model" : "claude-3-5-haiku", "temperature": 0.50,\n'
           ' "messages": [{"role": "user", "content": "mapped-0e5 caf\\u00e9"}], "metadata": {"model": "x"}}')
    r = httpx.post(gateway.url + "/v1/messages", content=raw, headers={"x-api-key": secret})
    assert r.status_code == 200, r.text
    received = sim.last_request("mapped-0e5")
    assert received["body"] == raw.replace('"claude-3-5-haiku"', '"claude-3-5-haiku-latest"')


def test_stream_events_pass_through_with_event_lines(gateway, sim, funded):
    account, _, secret = funded
    request = body("[[sim:thinking]] [[sim:text_then_tool]] events-1d7", stream=True, max_tokens=500,
                   tools=[WEATHER])
    with httpx.stream("POST", gateway.url + "/v1/messages", content=json.dumps(request),
                      headers={"x-api-key": secret, "content-type": "application/json",
                               "accept": "application/json"}) as r:  # Claude Code's accept, even streaming
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-request-id"].startswith("req_")
        raw = r.read()
    events = sse_events(raw)
    names = [name for name, _ in events]
    assert None not in names, "every event must keep its event: line"
    assert all(data["type"] == name for name, data in events)
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    starts = [data["content_block"]["type"] for name, data in events if name == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use"]
    assert [data["index"] for name, data in events if name == "content_block_start"] == [0, 1, 2]
    # the gateway changed nothing: the same request straight to the simulator streams the same bytes
    # (but for the ids, which carry the simulator's request counter)
    direct = httpx.post(sim.url + "/v1/messages", content=json.dumps(request),
                        headers={"x-api-key": "k", "anthropic-version": "2023-06-01"}).content
    assert re.sub(rb"_sim_\d+", b"_sim_N", direct) == re.sub(rb"_sim_\d+", b"_sim_N", raw)

    usage = dict(events[0][1]["message"]["usage"], output_tokens=events[-2][1]["usage"]["output_tokens"])
    [row] = gateway.admin.usage(account["id"])
    assert row["cost_nano"] == expected_cost(usage)


# -- what is refused -------------------------------------------------------------------------------


def test_model_that_is_not_dual_format_is_refused_and_nothing_charged(gateway, sim, funded):
    account, _, secret = funded
    before = len(sim.requests("not-dual-4e8"))
    r = post(gateway, {"model": "gpt-4.1-mini", "max_tokens": 50,
                       "messages": [{"role": "user", "content": "not-dual-4e8"}]}, {"x-api-key": secret})
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert "gpt-4.1-mini" in message and "/v1/chat/completions" in message
    assert len(sim.requests("not-dual-4e8")) == before
    with pytest.raises(anthropic.BadRequestError) as info:
        client(gateway, secret).messages.create(model="gpt-4.1-mini", max_tokens=50,
                                                messages=[{"role": "user", "content": "x"}])
    assert "/v1/chat/completions" in str(info.value)
    assert gateway.admin.balance(account["id"]) == {"balance_nano": PAID, "held_nano": 0, "total_paid_nano": PAID}
    assert gateway.admin.usage(account["id"]) == []


@pytest.mark.parametrize("method,path", [
    ("POST", "/v1/messages/count_tokens"),
    ("POST", "/v1/messages/batches"),
    ("GET", "/v1/messages/batches"),
    ("GET", "/v1/messages/batches/msgbatch_123/results"),
    ("POST", "/v1/files"),
    ("GET", "/v1/files"),
    ("GET", "/v1/files/file_123/content"),
])
def test_unoffered_messages_apis_answer_501(gateway, funded, method, path):
    _, _, secret = funded
    r = httpx.request(method, gateway.url + path, headers={"x-api-key": secret, "anthropic-version": "2023-06-01"},
                      json=body("x") if method == "POST" else None)
    assert r.status_code == 501, r.text
    error = r.json()["error"]
    assert error["code"] == "api_not_implemented"
    assert error["message"].endswith(f"(request id: {r.headers['x-request-id']})")


def test_count_tokens_through_the_sdk_is_a_clear_501(gateway, funded):
    _, _, secret = funded
    with pytest.raises(anthropic.APIStatusError) as info:
        client(gateway, secret).messages.count_tokens(model="claude-sonnet-4-5",
                                                      messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 501 and "api_not_implemented" in str(info.value)


# -- billing with cache tokens ---------------------------------------------------------------------


def test_exact_charge_with_cache_read_and_cache_write(gateway, funded):
    account, _, secret = funded
    # the simulator counts cache tokens on top of the prompt's words; a provider counts them
    # inside the prompt, so the prompt carries that many tokens' worth of text (else the charge
    # would escape the hold, and the audit would rightly say so), with its cache breakpoint
    text = "[[sim:cache_read=300]] [[sim:cache_write=1200]] cached prompt " + "lorem " * 1500
    block = {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
    r = post(gateway, body([block]), {"x-api-key": secret})
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert (usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]) == (300, 1200)
    cost = (usage["input_tokens"] * 3000 + 300 * 300 + 1200 * 3750 + usage["output_tokens"] * 15000)
    [row] = gateway.admin.usage(account["id"])
    # the row's input is the whole prompt (uncached + read + written); the parts are kept apart
    assert (row["input_tokens"], row["cached_tokens"], row["cache_write_tokens"], row["output_tokens"]) == (
        usage["input_tokens"] + 1500, 300, 1200, usage["output_tokens"])
    assert row["cost_nano"] == cost <= row["hold_nano"]
    assert gateway.admin.balance(account["id"])["balance_nano"] == PAID - cost


def test_exact_charge_with_cache_tokens_when_streamed(gateway, funded):
    account, _, secret = funded
    with client(gateway, secret).messages.stream(
        model="claude-sonnet-4-5", max_tokens=300,
        messages=[{"role": "user", "content": "[[sim:cache_read=4000]] [[sim:cache_write=77]] [[sim:words=9]]"}],
    ) as stream:
        final = stream.get_final_message()
    assert (final.usage.cache_read_input_tokens, final.usage.cache_creation_input_tokens) == (4000, 77)
    assert final.usage.output_tokens == 9
    [row] = gateway.admin.usage(account["id"])
    assert (row["input_tokens"], row["cached_tokens"], row["cache_write_tokens"], row["output_tokens"]) == (
        final.usage.input_tokens + 4077, 4000, 77, 9)
    assert row["cost_nano"] == final.usage.input_tokens * 3000 + 4000 * 300 + 77 * 3750 + 9 * 15000


def test_reply_without_usage_is_charged_for_what_it_carries(gateway, funded):
    """A provider reply with no usage is never free output: the prompt as estimated, the output counted."""
    from gatewayd import tokens
    from gatewayd.billing.estimate import estimate_input_tokens

    account, _, secret = funded
    request = body("[[sim:fault=no_usage]] [[sim:words=12]] no usage here")
    r = post(gateway, request, {"x-api-key": secret})
    assert r.status_code == 200 and "usage" not in r.json()
    text = r.json()["content"][0]["text"]
    [row] = gateway.admin.usage(account["id"])
    assert (row["input_tokens"], row["output_tokens"]) == (estimate_input_tokens(request, "messages"), tokens.count(text, "claude"))
    assert row["output_tokens"] > 0 and row["cost_nano"] == row["input_tokens"] * 3000 + row["output_tokens"] * 15000


async def test_async_sdk_stream(gateway, funded):
    account, _, secret = funded
    c = anthropic.AsyncAnthropic(base_url=gateway.url, api_key=secret, max_retries=0)
    stream = await c.messages.create(model="claude-sonnet-4-5", max_tokens=100, stream=True,
                                     messages=[{"role": "user", "content": "[[sim:text=Hello from async]]"}])
    kinds, text = [], ""
    async for event in stream:
        kinds.append(event.type)
        if event.type == "content_block_delta":
            text += event.delta.text
    await c.close()
    assert text == "Hello from async"
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    [row] = gateway.admin.usage(account["id"])
    assert (row["stream"], row["status"], row["output_tokens"]) == (True, "ok", 3)


def test_cache_writes_at_anthropics_rule_when_the_catalogue_has_no_cache_write_price(sim, tmp_path):
    """An anthropic-protocol model without ``cache_write_price`` takes Anthropic's published
    rule, 1.25x the input rate for 5-minute writes (issue 19; docs/billing.md)."""
    from tests.live import Daemon, unique_email

    extra = ('[[models]]\nid = "claude-no-write-price"\nprovider = "anthropic"\nfamily = "claude"\n'
             'input_price = 2.00\noutput_price = 10.00\ncached_input_price = 0.20\nmax_output_tokens = 4096\n')
    daemon = Daemon(tmp_path, sim.url, extra=extra)
    try:
        account = daemon.admin.account(unique_email())
        secret = daemon.admin.key(account["id"])["secret"]
        r = post(daemon, {"model": "claude-no-write-price", "max_tokens": 100, "messages": [
            {"role": "user", "content": "[[sim:cache_read=100]] [[sim:cache_write=40]] [[sim:words=5]]"}]},
            {"x-api-key": secret})
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        [row] = daemon.admin.usage(account["id"])
        assert (row["cached_tokens"], row["cache_write_tokens"], row["output_tokens"]) == (100, 40, 5)
        assert row["cost_nano"] == usage["input_tokens"] * 2000 + 40 * 2500 + 100 * 200 + 5 * 10000
    finally:
        daemon.stop()
