"""The upstream simulator over real HTTP: wire formats, markers, faults, the request log."""

from __future__ import annotations

import base64
import struct

import httpx
import orjson
import pytest
import trio

from gatewayd.sim import count_input_tokens, serve_simulator, sim_embedding

OPENAI = {"authorization": "Bearer sk-test"}
ANTHROPIC = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "metric": {"type": "boolean"},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "extra": {"type": "object"},
        },
    },
}
WEATHER_ARGS = {"city": "sim-city", "days": 42, "metric": True, "unit": "c", "extra": None}
CHAT_TOOL = {"type": "function", "function": {"name": WEATHER["name"], "parameters": WEATHER["schema"]}}
MSG_TOOL = {"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["schema"]}
RESP_TOOL = {"type": "function", "name": WEATHER["name"], "parameters": WEATHER["schema"]}


@pytest.fixture
async def sim(nursery):
    port = await nursery.start(serve_simulator)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        yield client


def chat(text: str, **extra) -> dict:
    return {"model": "gpt-sim", "messages": [{"role": "user", "content": text}], **extra}


def msgs(text: str, **extra) -> dict:
    return {"model": "claude-sim", "max_tokens": 1000, "messages": [{"role": "user", "content": text}], **extra}


def sse(text: str) -> list[tuple[str | None, str]]:
    """(event name, data) per event; a tiny parser independent of the code under test."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        events.append((name, "\n".join(data)))
    return events


def chunks(text: str) -> list[dict]:
    return [orjson.loads(data) for _, data in sse(text) if data != "[DONE]"]


# -- chat completions --------------------------------------------------------------------


async def test_chat_non_stream(sim):
    body = chat("hello there, how are you today my dear old friend?")
    reply = (await sim.post("/v1/chat/completions", json=body, headers=OPENAI)).json()
    assert reply["id"] == "chatcmpl-sim-1" and reply["object"] == "chat.completion"
    assert reply["model"] == "gpt-sim" and isinstance(reply["created"], int)
    message = reply["choices"][0]["message"]
    assert message == {
        "role": "assistant",
        "content": "This is a simulated reply to: hello there, how are you today my dear.",
        "refusal": None,
        "annotations": [],
    }
    assert reply["choices"][0]["finish_reason"] == "stop"
    usage = reply["usage"]
    assert usage["prompt_tokens"] == count_input_tokens(body, "chat") == 10 + 1 + 3
    assert usage["completion_tokens"] == 14
    assert usage["total_tokens"] == usage["prompt_tokens"] + 14
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 0


async def test_chat_stream_include_usage_matches_non_stream(sim):
    body = chat("[[sim:words=12]] go", stream_options={"include_usage": True})
    plain = (await sim.post("/v1/chat/completions", json=body, headers=OPENAI)).json()
    response = await sim.post("/v1/chat/completions", json={**body, "stream": True}, headers=OPENAI)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.endswith("data: [DONE]\n\n")
    parts = chunks(response.text)
    assert all("usage" in part for part in parts)
    assert all(part["usage"] is None for part in parts[:-1])
    assert parts[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert parts[0]["object"] == "chat.completion.chunk"
    texts = [p["choices"][0]["delta"].get("content") for p in parts[1:-2]]
    assert texts == [f"w{i} " for i in range(1, 12)] + ["w12"]
    assert "".join(texts) == plain["choices"][0]["message"]["content"]
    assert parts[-2]["choices"][0]["finish_reason"] == "stop"
    assert parts[-1]["choices"] == [] and parts[-1]["usage"] == plain["usage"]


async def test_chat_stream_without_include_usage_has_no_usage(sim):
    response = await sim.post("/v1/chat/completions", json=chat("hi", stream=True), headers=OPENAI)
    parts = chunks(response.text)
    assert all("usage" not in part for part in parts)
    assert parts[-1]["choices"][0]["finish_reason"] == "stop"


async def test_chat_tool_call_and_stream_fragments(sim):
    body = chat("what is the weather?", tools=[CHAT_TOOL])
    reply = (await sim.post("/v1/chat/completions", json=body, headers=OPENAI)).json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["id"] == "call_sim_1_0" and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert orjson.loads(call["function"]["arguments"]) == WEATHER_ARGS

    body["stream_options"] = {"include_usage": True}
    streamed = chunks((await sim.post("/v1/chat/completions", json={**body, "stream": True}, headers=OPENAI)).text)
    deltas = [p["choices"][0]["delta"]["tool_calls"][0] for p in streamed if p["choices"] and "tool_calls" in p["choices"][0]["delta"]]
    first, rest = deltas[0], deltas[1:]
    assert first == {"index": 0, "id": "call_sim_2_0", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    assert len(rest) == 3 and all(set(d) == {"index", "function"} for d in rest)
    assert "".join(d["function"]["arguments"] for d in rest) == call["function"]["arguments"]
    assert streamed[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert streamed[-1]["usage"] == reply["usage"]


async def test_chat_parallel_calls_text_then_tool_and_tool_result(sim):
    two = (await sim.post("/v1/chat/completions", json=chat("[[sim:tools=2]] x", tools=[CHAT_TOOL]), headers=OPENAI)).json()
    calls = two["choices"][0]["message"]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_sim_1_0", "call_sim_1_1"]
    assert {c["function"]["name"] for c in calls} == {"get_weather"}

    mixed = (await sim.post("/v1/chat/completions", json=chat("[[sim:text_then_tool]] x", tools=[CHAT_TOOL]), headers=OPENAI)).json()
    assert mixed["choices"][0]["message"]["content"] == "Let me check."
    assert len(mixed["choices"][0]["message"]["tool_calls"]) == 1

    no_tool = (await sim.post("/v1/chat/completions", json=chat("[[sim:tools=0]] x", tools=[CHAT_TOOL]), headers=OPENAI)).json()
    assert no_tool["choices"][0]["finish_reason"] == "stop"

    body = chat("weather?", tools=[CHAT_TOOL])
    body["messages"] += [
        {"role": "assistant", "content": None, "tool_calls": calls[:1]},
        {"role": "tool", "tool_call_id": "call_sim_1_0", "content": "Sunny, 21 degrees " + "x" * 80},
    ]
    after = (await sim.post("/v1/chat/completions", json=body, headers=OPENAI)).json()
    expected = "Tool result received: " + ("Sunny, 21 degrees " + "x" * 80)[:60]
    assert after["choices"][0]["message"]["content"] == expected
    assert after["choices"][0]["finish_reason"] == "stop"


async def test_chat_reasoning_limits_stop_and_cache(sim):
    reasoned = (await sim.post("/v1/chat/completions", json=chat("hi", reasoning_effort="high"), headers=OPENAI)).json()
    assert reasoned["choices"][0]["message"]["content"] == "This is a simulated reply to: hi."
    assert reasoned["usage"]["completion_tokens_details"]["reasoning_tokens"] == 8
    assert reasoned["usage"]["completion_tokens"] == 8 + 7

    cut = (await sim.post("/v1/chat/completions", json=chat("[[sim:words=50]]", max_completion_tokens=5), headers=OPENAI)).json()
    assert cut["choices"][0]["message"]["content"] == "w1 w2 w3 w4 w5"
    assert cut["choices"][0]["finish_reason"] == "length" and cut["usage"]["completion_tokens"] == 5

    stopped = (await sim.post("/v1/chat/completions", json=chat("[[sim:text=Hello world. STOP here]]", stop=["STOP"]), headers=OPENAI)).json()
    assert stopped["choices"][0]["message"]["content"] == "Hello world. "
    assert stopped["choices"][0]["finish_reason"] == "stop"

    body = chat("[[sim:cache_read=100]] [[sim:cache_write=20]] hi")
    cached = (await sim.post("/v1/chat/completions", json=body, headers=OPENAI)).json()
    assert cached["usage"]["prompt_tokens"] == count_input_tokens(body, "chat") + 120
    assert cached["usage"]["prompt_tokens_details"]["cached_tokens"] == 100


# -- responses -----------------------------------------------------------------------------


async def test_responses_non_stream_and_stream_agree(sim):
    body = {"model": "gpt-sim", "input": "tell me something nice", "instructions": "Be brief."}
    plain = (await sim.post("/v1/responses", json=body, headers=OPENAI)).json()
    assert plain["object"] == "response" and plain["status"] == "completed"
    (item,) = plain["output"]
    assert item["type"] == "message" and item["role"] == "assistant"
    assert item["content"][0]["text"] == "This is a simulated reply to: tell me something nice."
    usage = plain["usage"]
    assert usage["input_tokens"] == count_input_tokens(body, "responses") == 4 + 2 + 3 + 3
    assert usage["output_tokens"] == 10 and usage["total_tokens"] == 22
    assert usage["input_tokens_details"]["cached_tokens"] == 0
    assert usage["output_tokens_details"]["reasoning_tokens"] == 0

    text = (await sim.post("/v1/responses", json={**body, "stream": True}, headers=OPENAI)).text
    events = sse(text)
    names = [name for name, _ in events]
    datas = [orjson.loads(data) for _, data in events]
    assert all(d["type"] == name for name, d in zip(names, datas))
    assert [d["sequence_number"] for d in datas] == list(range(len(datas)))
    assert names[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    assert names[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]
    deltas = [d["delta"] for d in datas if d["type"] == "response.output_text.delta"]
    assert "".join(deltas) == item["content"][0]["text"] and len(deltas) == 10
    final = datas[-1]["response"]
    assert final["usage"] == usage and final["output"][0]["content"] == item["content"]


async def test_responses_tools_items_reasoning_and_incomplete(sim):
    body = {"model": "gpt-sim", "input": [{"role": "user", "content": [{"type": "input_text", "text": "weather?"}]}], "tools": [RESP_TOOL]}
    plain = (await sim.post("/v1/responses", json=body, headers=OPENAI)).json()
    (call,) = plain["output"]
    assert call["type"] == "function_call" and call["call_id"] == "call_sim_1_0" and call["name"] == "get_weather"
    assert orjson.loads(call["arguments"]) == WEATHER_ARGS

    events = [orjson.loads(d) for _, d in sse((await sim.post("/v1/responses", json={**body, "stream": True}, headers=OPENAI)).text)]
    frags = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert len(frags) == 3 and "".join(frags) == done["arguments"] == call["arguments"]

    body["input"] += [call, {"type": "function_call_output", "call_id": call["call_id"], "output": "It is raining."}]
    after = (await sim.post("/v1/responses", json=body, headers=OPENAI)).json()
    assert after["output"][0]["content"][0]["text"] == "Tool result received: It is raining."

    reasoned = {"model": "gpt-sim", "input": "hi", "reasoning": {"effort": "low"}, "include": ["reasoning.encrypted_content"]}
    out = (await sim.post("/v1/responses", json=reasoned, headers=OPENAI)).json()
    assert [i["type"] for i in out["output"]] == ["reasoning", "message"]
    assert out["output"][0]["encrypted_content"].startswith("sig-")
    assert out["usage"]["output_tokens_details"]["reasoning_tokens"] == 8

    short = {"model": "gpt-sim", "input": "[[sim:words=30]]", "max_output_tokens": 4}
    cut = (await sim.post("/v1/responses", json=short, headers=OPENAI)).json()
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}
    assert cut["output"][0]["content"][0]["text"] == "w1 w2 w3 w4"
    names = [n for n, _ in sse((await sim.post("/v1/responses", json={**short, "stream": True}, headers=OPENAI)).text)]
    assert names[-1] == "response.incomplete"


# -- embeddings ----------------------------------------------------------------------------


async def test_embeddings_float_base64_and_tokens(sim):
    body = {"model": "emb-sim", "input": ["first text here", "second"]}
    plain = (await sim.post("/v1/embeddings", json=body, headers=OPENAI)).json()
    assert plain["object"] == "list" and plain["model"] == "emb-sim"
    assert [d["index"] for d in plain["data"]] == [0, 1]
    assert plain["data"][0]["embedding"] == sim_embedding("first text here")
    assert plain["data"][1]["embedding"] == sim_embedding("second")
    assert len(plain["data"][0]["embedding"]) == 8
    assert plain["usage"] == {"prompt_tokens": 4, "total_tokens": 4}

    encoded = (await sim.post("/v1/embeddings", json={**body, "encoding_format": "base64", "dimensions": 40}, headers=OPENAI)).json()
    raw = base64.b64decode(encoded["data"][1]["embedding"])
    assert list(struct.unpack("<40f", raw)) == sim_embedding("second", 40)

    tokens = (await sim.post("/v1/embeddings", json={"model": "e", "input": [[1, 2, 3], [4]]}, headers=OPENAI)).json()
    assert tokens["usage"]["prompt_tokens"] == 4
    assert tokens["data"][0]["embedding"] == sim_embedding("1 2 3")

    vector = sim_embedding("anything", 64)
    assert all(-1 <= v <= 1 and (v * 1024).is_integer() for v in vector)
    assert abs(sum(v * v for v in vector) - 1) < 0.02
    bad = await sim.post("/v1/embeddings", json={"model": "e", "input": []}, headers=OPENAI)
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"


# -- messages ------------------------------------------------------------------------------


def rebuild_message(text: str) -> dict:
    """Assemble a message from its stream, checking the event framing on the way."""
    events = sse(text)
    assert all(name is not None for name, _ in events), "every event needs an event: line"
    datas = [orjson.loads(data) for _, data in events]
    assert all(d["type"] == name for (name, _), d in zip(events, datas))
    assert [d["type"] for d in datas[:2]] == ["message_start", "ping"]
    assert [d["type"] for d in datas[-2:]] == ["message_delta", "message_stop"]
    message = datas[0]["message"]
    assert message["content"] == [] and message["usage"]["output_tokens"] == 1
    blocks: list[dict] = []
    partial: dict[int, str] = {}
    for d in datas[2:-2]:
        if d["type"] == "content_block_start":
            assert d["index"] == len(blocks)
            blocks.append(dict(d["content_block"]))
        elif d["type"] == "content_block_delta":
            block, delta = blocks[d["index"]], d["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            else:
                assert delta["type"] == "input_json_delta"
                partial[d["index"]] = partial.get(d["index"], "") + delta["partial_json"]
        else:
            assert d["type"] == "content_block_stop"
            if d["index"] in partial:
                blocks[d["index"]]["input"] = orjson.loads(partial[d["index"]])
    message["content"] = blocks
    message.update(datas[-2]["delta"])
    message["usage"]["output_tokens"] = datas[-2]["usage"]["output_tokens"]
    message["fragments"] = partial
    return message


async def test_messages_thinking_text_tool_and_cache(sim):
    body = msgs("[[sim:text_then_tool]] [[sim:cache_read=30]] [[sim:cache_write=7]] weather?",
                max_tokens=2000, tools=[MSG_TOOL], thinking={"type": "enabled", "budget_tokens": 1024}, system="You help.")
    plain = (await sim.post("/v1/messages", json=body, headers=ANTHROPIC)).json()
    assert plain["id"] == "msg_sim_1" and plain["type"] == "message" and plain["role"] == "assistant"
    thinking, text, tool = plain["content"]
    assert thinking == {"type": "thinking", "thinking": "Let me think about this step by step.", "signature": thinking["signature"]}
    assert thinking["signature"].startswith("sig-")
    assert text == {"type": "text", "text": "Let me check."}
    assert tool == {"type": "tool_use", "id": "toolu_sim_1_0", "name": "get_weather", "input": WEATHER_ARGS}
    assert plain["stop_reason"] == "tool_use" and plain["stop_sequence"] is None
    assert plain["usage"] == {
        "input_tokens": count_input_tokens(body, "messages"),
        "cache_creation_input_tokens": 7,
        "cache_read_input_tokens": 30,
        "cache_creation": {"ephemeral_5m_input_tokens": 7, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 8 + 3 + 1 + 10,
        "service_tier": "standard",
    }

    streamed = rebuild_message((await sim.post("/v1/messages", json={**body, "stream": True}, headers=ANTHROPIC)).text)
    assert len(streamed.pop("fragments")[2]) > 0
    assert streamed["content"][2]["id"] == "toolu_sim_2_0"
    streamed["content"][2]["id"] = "toolu_sim_1_0"
    assert streamed["content"] == plain["content"]
    assert streamed["usage"] == plain["usage"] and streamed["stop_reason"] == "tool_use"


async def test_messages_stream_fragments_and_stop_reasons(sim):
    text = (await sim.post("/v1/messages", json=msgs("x", tools=[MSG_TOOL], stream=True), headers=ANTHROPIC)).text
    partial = [orjson.loads(d)["delta"]["partial_json"] for n, d in sse(text) if '"input_json_delta"' in d]
    assert len(partial) == 3 and orjson.loads("".join(partial)) == WEATHER_ARGS

    stopped = (await sim.post("/v1/messages", json=msgs("[[sim:text=one two three]]", stop_sequences=["three"]), headers=ANTHROPIC)).json()
    assert stopped["content"] == [{"type": "text", "text": "one two "}]
    assert stopped["stop_reason"] == "stop_sequence" and stopped["stop_sequence"] == "three"

    short = msgs("[[sim:words=20]]", max_tokens=3)
    cut = (await sim.post("/v1/messages", json=short, headers=ANTHROPIC)).json()
    assert cut["content"][0]["text"] == "w1 w2 w3" and cut["stop_reason"] == "max_tokens"
    streamed = rebuild_message((await sim.post("/v1/messages", json={**short, "stream": True}, headers=ANTHROPIC)).text)
    assert streamed["stop_reason"] == "max_tokens" and streamed["usage"]["output_tokens"] == 3

    body = msgs("weather?", tools=[MSG_TOOL])
    body["messages"] += [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "Cloudy"}]}]},
    ]
    after = (await sim.post("/v1/messages", json=body, headers=ANTHROPIC)).json()
    assert after["content"] == [{"type": "text", "text": "Tool result received: Cloudy"}]
    assert after["stop_reason"] == "end_turn"


async def test_headers_auth_and_bad_bodies(sim):
    for headers in ({}, {"authorization": "Basic abc"}):
        r = await sim.post("/v1/chat/completions", json=chat("hi"), headers=headers)
        assert r.status_code == 401 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = await sim.post("/v1/messages", json=msgs("hi"), headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = await sim.post("/v1/messages", json=msgs("hi"), headers={"x-api-key": "k"})
    assert r.status_code == 400 and r.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": "anthropic-version: header is required"}}
    bearer = {"authorization": "Bearer k", "anthropic-version": "2026-10-21"}
    assert (await sim.post("/v1/messages?beta=true", json=msgs("hi"), headers=bearer)).status_code == 200

    r = await sim.post("/v1/chat/completions", content=b"{nope", headers=OPENAI)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = await sim.post("/v1/chat/completions", json={"messages": []}, headers=OPENAI)
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
    r = await sim.post("/v1/chat/completions", json={"model": "m"}, headers=OPENAI)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    r = await sim.post("/v1/messages", content=b"[1,", headers=ANTHROPIC)
    assert r.status_code == 400 and r.json()["type"] == "error"
    r = await sim.post("/v1/messages", json={"model": "m", "messages": []}, headers=ANTHROPIC)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = await sim.post("/v1/responses", json={"input": "x"}, headers=OPENAI)
    assert r.status_code == 400
    r = await sim.get("/v1/unknown", headers=OPENAI)
    assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"


# -- faults --------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 429, 500, 503, 529])
async def test_fault_status_in_each_vendor_shape(sim, status):
    marker = f"[[sim:fault=status:{status}]] hi"
    r = await sim.post("/v1/chat/completions", json=chat(marker), headers=OPENAI)
    assert r.status_code == status
    assert r.json()["error"]["message"] == f"simulated error {status}"
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = await sim.post("/v1/messages", json=msgs(marker, stream=True), headers=ANTHROPIC)
    assert r.status_code == status
    expected = {400: "invalid_request_error", 429: "rate_limit_error", 500: "api_error", 503: "api_error", 529: "overloaded_error"}
    assert r.json() == {"type": "error", "error": {"type": expected[status], "message": f"simulated error {status}"}}
    assert (r.headers.get("retry-after") == "7") == (status == 429)
    r = await sim.post("/v1/embeddings", json={"model": "e", "input": marker}, headers=OPENAI)
    assert r.status_code == status


async def test_fault_delays(sim):
    start = trio.current_time()
    r = await sim.post("/v1/chat/completions", json=chat("[[sim:fault=delay_ms:200]]"), headers=OPENAI)
    assert r.status_code == 200 and trio.current_time() - start >= 0.2

    start = trio.current_time()
    body = msgs("[[sim:words=3]] [[sim:fault=chunk_delay_ms:30]]", stream=True)
    text = (await sim.post("/v1/messages", json=body, headers=ANTHROPIC)).text
    events = len(sse(text))
    assert events == 2 + 1 + 3 + 1 + 2 and trio.current_time() - start >= 0.03 * (events - 1)


async def read_until_stall(sim, path, body, headers) -> list[str]:
    """A stream's data lines, read until nothing more came for 0.5 s."""
    lines: list[str] = []
    async with sim.stream("POST", path, json=body, headers=headers) as response:
        with trio.move_on_after(0.5):
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    lines.append(line[6:])
    return lines


async def wait_for_log(sim, predicate, timeout: float = 3.0) -> dict:
    with trio.fail_after(timeout):
        while True:
            entries = (await sim.get("/_sim/requests")).json()
            if entries and predicate(entries[-1]):
                return entries[-1]
            await trio.sleep(0.02)


async def test_fault_stall_then_client_goes_away_is_recorded(sim):
    body = chat("[[sim:words=10]] [[sim:fault=stall_after:3]]", stream=True)
    lines = await read_until_stall(sim, "/v1/chat/completions", body, OPENAI)
    contents = [orjson.loads(line)["choices"][0]["delta"].get("content") for line in lines]
    assert contents == ["", "w1 ", "w2 ", "w3 "]
    entry = await wait_for_log(sim, lambda e: e["cancelled"])
    assert entry["cancelled"] is True and entry["dropped"] is False and entry["stream"] is True

    body = msgs("[[sim:words=10]] [[sim:fault=stall_after:2]]", stream=True)
    lines = await read_until_stall(sim, "/v1/messages", body, ANTHROPIC)
    assert [orjson.loads(line)["type"] for line in lines] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta"]
    await wait_for_log(sim, lambda e: e["cancelled"] and e["path"] == "/v1/messages")


async def test_cancel_during_slow_stream_and_delay_is_recorded(sim):
    body = chat("[[sim:words=100]] [[sim:fault=chunk_delay_ms:50]]", stream=True)
    async with sim.stream("POST", "/v1/chat/completions", json=body, headers=OPENAI) as response:
        async for line in response.aiter_lines():
            if "w2" in line:
                break
    entry = await wait_for_log(sim, lambda e: e["cancelled"])
    assert entry["status"] == 200
    assert 3 <= entry["events_sent"] < 50 and entry["completed"] is False  # most of the answer unsent


@pytest.mark.parametrize("path,body,headers", [
    ("/v1/chat/completions", chat("[[sim:fault=delay_ms:600]]"), OPENAI),
    ("/v1/messages", msgs("[[sim:fault=delay_ms:600]]"), ANTHROPIC),
], ids=["openai", "anthropic"])
async def test_a_non_streamed_answer_whose_client_left_is_finished_and_billed(sim, path, body, headers):
    """The vendors finish a non-streamed answer whose client left, and bill it all
    (FINISHES_ABANDONED_ANSWERS; docs/billing.md): the log says so, with the whole answer."""
    with trio.move_on_after(0.2):
        await sim.post(path, json=body, headers=headers)
    entry = await wait_for_log(sim, lambda e: e["completed"])
    assert entry["finished_after_client_left"] is True and entry["cancelled"] is False
    assert entry["status"] == 200 and entry["answer"]["usage"]


async def test_fault_error_after(sim):
    text = (await sim.post("/v1/chat/completions", json=chat("[[sim:words=9]] [[sim:fault=error_after:2]]", stream=True), headers=OPENAI)).text
    parts = chunks(text)
    assert "[DONE]" not in text and len(parts) == 4
    assert parts[-1] == {"error": {"message": "simulated mid-stream error", "type": "server_error", "param": None, "code": None}}

    text = (await sim.post("/v1/messages", json=msgs("[[sim:words=9]] [[sim:fault=error_after:1]]", stream=True), headers=ANTHROPIC)).text
    events = sse(text)
    assert events[-1][0] == "error" and "message_stop" not in text
    assert orjson.loads(events[-1][1]) == {"type": "error", "error": {"type": "overloaded_error", "message": "simulated mid-stream error"}}

    body = {"model": "m", "input": "[[sim:words=9]] [[sim:fault=error_after:0]]", "stream": True}
    events = sse((await sim.post("/v1/responses", json=body, headers=OPENAI)).text)
    assert events[-1][0] == "error" and orjson.loads(events[-1][1])["sequence_number"] == len(events) - 1

    short = (await sim.post("/v1/chat/completions", json=chat("[[sim:text=a b]] [[sim:fault=error_after:50]]", stream=True), headers=OPENAI)).text
    assert "simulated mid-stream error" in short and "finish_reason\":\"stop" not in short


async def test_fault_drop_after_breaks_the_chunked_body(sim):
    lines: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError):
        body = chat("[[sim:words=9]] [[sim:fault=drop_after:2]]", stream=True)
        async with sim.stream("POST", "/v1/chat/completions", json=body, headers=OPENAI) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    lines.append(line[6:])
    assert [orjson.loads(line)["choices"][0]["delta"]["content"] for line in lines] == ["", "w1 ", "w2 "]
    entry = await wait_for_log(sim, lambda e: e["dropped"])
    assert entry["cancelled"] is False


async def test_fault_disconnect_invalid_json_no_usage(sim):
    with pytest.raises(httpx.RemoteProtocolError):
        await sim.post("/v1/messages", json=msgs("[[sim:fault=disconnect]]"), headers=ANTHROPIC)
    with pytest.raises(httpx.RemoteProtocolError):
        await sim.post("/v1/chat/completions", json=chat("[[sim:fault=disconnect]]", stream=True), headers=OPENAI)
    assert (await sim.get("/_sim/requests")).json()[-1]["dropped"] is True

    for path, body, headers in [
        ("/v1/chat/completions", chat("[[sim:fault=invalid_json]]"), OPENAI),
        ("/v1/responses", {"model": "m", "input": "[[sim:fault=invalid_json]]"}, OPENAI),
        ("/v1/messages", msgs("[[sim:fault=invalid_json]]"), ANTHROPIC),
        ("/v1/embeddings", {"model": "m", "input": "[[sim:fault=invalid_json]]"}, OPENAI),
    ]:
        r = await sim.post(path, json=body, headers=headers)
        assert r.status_code == 200
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(r.content)
        if path != "/v1/embeddings":
            streamed = await sim.post(path, json={**body, "stream": True}, headers=headers)
            with pytest.raises(orjson.JSONDecodeError):
                chunks(streamed.text)

    body = chat("[[sim:fault=no_usage]]", stream_options={"include_usage": True})
    assert "usage" not in (await sim.post("/v1/chat/completions", json=body, headers=OPENAI)).json()
    text = (await sim.post("/v1/chat/completions", json={**body, "stream": True}, headers=OPENAI)).text
    assert '"usage"' not in text and text.endswith("data: [DONE]\n\n")
    text = (await sim.post("/v1/messages", json=msgs("[[sim:fault=no_usage]]", stream=True), headers=ANTHROPIC)).text
    assert '"usage"' not in text and "message_stop" in text
    assert "usage" not in (await sim.post("/v1/responses", json={"model": "m", "input": "[[sim:fault=no_usage]]"}, headers=OPENAI)).json()


# -- the request log -----------------------------------------------------------------------


async def test_request_log_filter_and_clear(sim):
    await sim.post("/v1/chat/completions?trace=1", json=chat("first needle"), headers={**OPENAI, "X-Custom": "Yes"})
    await sim.post("/v1/messages", json=msgs("second"), headers=ANTHROPIC)
    await sim.post("/v1/chat/completions", content=b"not json", headers=OPENAI)
    entries = (await sim.get("/_sim/requests")).json()
    assert [e["seq"] for e in entries] == [1, 2, 3]
    first = entries[0]
    assert first["method"] == "POST" and first["path"] == "/v1/chat/completions" and first["query"] == "trace=1"
    assert first["headers"]["x-custom"] == "Yes" and first["headers"]["authorization"] == "Bearer sk-test"
    assert first["json"] == chat("first needle") and orjson.loads(first["body"]) == chat("first needle")
    assert first["status"] == 200 and first["cancelled"] is False
    assert entries[2]["json"] is None and entries[2]["body"] == "not json" and entries[2]["status"] == 400

    found = (await sim.get("/_sim/requests", params={"contains": "needle"})).json()
    assert [e["seq"] for e in found] == [1]
    found = (await sim.get("/_sim/requests", params={"path": "/v1/messages"})).json()
    assert [e["seq"] for e in found] == [2]
    assert (await sim.delete("/_sim/requests")).json() == {"cleared": 3}
    assert (await sim.get("/_sim/requests")).json() == []


async def test_request_log_keeps_the_last_1000(nursery):
    from gatewayd.sim import create_sim_app, sim_state

    app = create_sim_app()
    port = await nursery.start(lambda task_status: serve_simulator(app=app, task_status=task_status))
    state = sim_state(app)
    assert state.log.maxlen == 1000
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        for _ in range(3):
            await client.post("/v1/embeddings", json={"model": "e", "input": "x"}, headers=OPENAI)
    assert len(state.log) == 3
