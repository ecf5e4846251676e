"""The simulator bills like the providers: caps, ``n``, hidden reasoning, 1-hour cache writes,
server tools, service tiers, long context, ``previous_response_id``; usage documents that the
official SDK types accept; and the independent ``provider_bill`` reference."""

from __future__ import annotations

import anthropic.types
import httpx
import openai.types.chat
import openai.types.responses
import orjson
import pytest

from gatewayd.sim import serve_simulator

from tests.sim.provider_bill import provider_bill

OPENAI = {"authorization": "Bearer sk-test"}
ANTHROPIC = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
GOOGLE = {"x-goog-api-key": "k"}
HANG_UP = "[[sim:reasoning=20000]] [[sim:words=5]] [[sim:end=END]] [[sim:tail=50]]"


@pytest.fixture
async def sim(nursery):
    port = await nursery.start(serve_simulator)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        yield client


def chat(text: str, model: str = "gpt-4.1", **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def msgs(text, max_tokens: int = 4000, **extra) -> dict:
    return {"model": "claude-sim", "max_tokens": max_tokens, "messages": [{"role": "user", "content": text}], **extra}


def gem(text: str, **extra) -> dict:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], **extra}


def datas(text: str) -> list[dict]:
    """Every SSE data payload (``[DONE]`` left out), whatever the separator."""
    found = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: ") and line[6:] != "[DONE]":
                found.append(orjson.loads(line[6:]))
    return found


async def last_logged(sim) -> dict:
    return (await sim.get("/_sim/requests")).json()[-1]


# -- chat ------------------------------------------------------------------------------------


async def test_chat_n_choices_all_generated_and_billed(sim):
    one = (await sim.post("/v1/chat/completions", json=chat("[[sim:words=7]]"), headers=OPENAI)).json()
    three = (await sim.post("/v1/chat/completions", json=chat("[[sim:words=7]]", n=3), headers=OPENAI)).json()
    openai.types.chat.ChatCompletion.model_validate(three)
    assert [c["index"] for c in three["choices"]] == [0, 1, 2]
    assert all(c["message"]["content"] == one["choices"][0]["message"]["content"] for c in three["choices"])
    assert three["usage"]["completion_tokens"] == 3 * one["usage"]["completion_tokens"] == 21
    assert three["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]

    body = chat("[[sim:words=7]]", n=3, stream=True, stream_options={"include_usage": True})
    events = datas((await sim.post("/v1/chat/completions", json=body, headers=OPENAI)).text)
    text = {i: "" for i in range(3)}
    for event in events:
        for choice in event["choices"]:
            text[choice["index"]] += choice["delta"].get("content") or ""
    assert set(text.values()) == {one["choices"][0]["message"]["content"]}
    assert sum(1 for e in events for c in e["choices"] if c["finish_reason"] == "stop") == 3
    assert events[-1]["usage"] == three["usage"]


@pytest.mark.parametrize("n", [0, 129, "2", True])
async def test_chat_bad_n_is_refused(sim, n):
    r = await sim.post("/v1/chat/completions", json=chat("x", n=n), headers=OPENAI)
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"


@pytest.mark.parametrize("model,extra,param,code", [
    ("gpt-4.1", {"max_tokens": 100, "max_completion_tokens": 1}, "max_tokens", "invalid_parameter_combination"),
    ("o3", {"max_tokens": 100}, "max_tokens", "unsupported_parameter"),
    ("gpt-5-mini", {"max_tokens": 100}, "max_tokens", "unsupported_parameter"),
    ("gpt-4.1", {"max_output_tokens": 100}, None, None),
    ("gpt-4.1", {"max_completion_tokens": 0}, "max_completion_tokens", "integer_below_min_value"),
])
async def test_chat_conflicting_or_foreign_caps_are_refused(sim, model, extra, param, code):
    r = await sim.post("/v1/chat/completions", json=chat("x", model, **extra), headers=OPENAI)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and (error["param"], error["code"]) == (param, code)


async def test_chat_reads_max_tokens_on_older_models(sim):
    reply = (await sim.post("/v1/chat/completions", json=chat("[[sim:words=9]]", max_tokens=4), headers=OPENAI)).json()
    assert reply["choices"][0]["finish_reason"] == "length" and reply["usage"]["completion_tokens"] == 4


async def test_reasoning_model_hidden_reasoning_only_in_final_usage(sim):
    body = chat(HANG_UP, "o3", stream=True, stream_options={"include_usage": True})
    events = datas((await sim.post("/v1/chat/completions", json=body, headers=OPENAI)).text)
    visible = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
    assert visible.startswith("w1 w2 w3 w4 w5 END t1") and visible.endswith("t50")
    assert all(e["usage"] is None for e in events[:-1])
    usage = events[-1]["usage"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 20000
    assert usage["completion_tokens"] == 20000 + 6 + 50
    logged = await last_logged(sim)
    assert logged["completed"] and logged["answer"]["usage"] == usage
    assert "reasoning" not in orjson.dumps(events).decode().replace("reasoning_tokens", "")


async def test_reasoning_model_thinks_by_default_and_cap_counts_reasoning(sim):
    plain = (await sim.post("/v1/chat/completions", json=chat("hi", "o4-mini"), headers=OPENAI)).json()
    assert plain["usage"]["completion_tokens_details"]["reasoning_tokens"] == 8
    capped = (await sim.post("/v1/chat/completions", json=chat(HANG_UP, "gpt-5", max_completion_tokens=1000),
                             headers=OPENAI)).json()
    assert capped["choices"][0]["finish_reason"] == "length" and capped["choices"][0]["message"]["content"] == ""
    assert capped["usage"]["completion_tokens"] == 1000 == capped["usage"]["completion_tokens_details"]["reasoning_tokens"]
    off = (await sim.post("/v1/chat/completions", json=chat("hi", "gpt-5.1", reasoning_effort="none"),
                          headers=OPENAI)).json()
    assert off["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0


@pytest.mark.parametrize("asked,reported", [(None, "default"), ("auto", "default"), ("default", "default"),
                                            ("flex", "flex"), ("priority", "priority"), ("fast", "priority")])
async def test_chat_service_tier_echoed_as_openai_does(sim, asked, reported):
    extra = {} if asked is None else {"service_tier": asked}
    reply = (await sim.post("/v1/chat/completions", json=chat("x", **extra), headers=OPENAI)).json()
    assert reply["service_tier"] == reported
    events = datas((await sim.post("/v1/chat/completions", json=chat("x", stream=True, **extra), headers=OPENAI)).text)
    assert {e["service_tier"] for e in events} == {reported}


async def test_service_tier_refused_when_unknown_and_overridden_by_marker(sim):
    r = await sim.post("/v1/chat/completions", json=chat("x", service_tier="turbo"), headers=OPENAI)
    assert r.status_code == 400 and r.json()["error"]["param"] == "service_tier"
    reply = (await sim.post("/v1/chat/completions", json=chat("[[sim:service_tier=flex]]", service_tier="priority"),
                            headers=OPENAI)).json()
    assert reply["service_tier"] == "flex"


async def test_input_tokens_marker_stands_for_a_long_prompt(sim):
    reply = (await sim.post("/v1/chat/completions", json=chat("[[sim:input_tokens=250000]] [[sim:cache_read=1000]]"),
                            headers=OPENAI)).json()
    assert reply["usage"]["prompt_tokens"] == 251000
    message = (await sim.post("/v1/messages", json=msgs("[[sim:input_tokens=250000]]"), headers=ANTHROPIC)).json()
    assert message["usage"]["input_tokens"] == 250000


async def test_non_stream_chat_without_usage(sim):
    reply = (await sim.post("/v1/chat/completions", json=chat("[[sim:fault=no_usage]] [[sim:words=3]]"),
                            headers=OPENAI)).json()
    assert "usage" not in reply and reply["choices"][0]["message"]["content"] == "w1 w2 w3"


# -- responses --------------------------------------------------------------------------------


async def test_responses_caps(sim):
    for field in ("max_tokens", "max_completion_tokens"):
        r = await sim.post("/v1/responses", json={"model": "gpt-5", "input": "x", field: 5}, headers=OPENAI)
        assert r.status_code == 400
        assert (r.json()["error"]["param"], r.json()["error"]["code"]) == (field, "unsupported_parameter")
    body = {"model": "gpt-5", "input": HANG_UP, "max_output_tokens": 300}
    reply = (await sim.post("/v1/responses", json=body, headers=OPENAI)).json()
    openai.types.responses.Response.model_validate(reply)
    assert reply["status"] == "incomplete" and reply["incomplete_details"] == {"reason": "max_output_tokens"}
    assert reply["usage"]["output_tokens"] == 300 == reply["usage"]["output_tokens_details"]["reasoning_tokens"]


async def test_responses_built_in_tools_and_max_tool_calls(sim):
    tools = [{"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["vs_1"]},
             {"type": "code_interpreter", "container": {"type": "auto"}}]
    text = "[[sim:web_search=2]] [[sim:file_search=1]] [[sim:code_interpreter=2]] [[sim:text=done]]"
    body = {"model": "gpt-4.1", "input": text, "tools": tools, "service_tier": "auto"}
    reply = (await sim.post("/v1/responses", json=body, headers=OPENAI)).json()
    openai.types.responses.Response.model_validate(reply)
    kinds = [item["type"] for item in reply["output"]]
    assert kinds == ["web_search_call"] * 2 + ["file_search_call"] + ["code_interpreter_call"] * 2 + ["message"]
    assert {item["container_id"] for item in reply["output"][3:5]} == {"cntr_sim_1"}
    assert reply["output"][0]["action"]["type"] == "search" and reply["service_tier"] == "default"

    limited = (await sim.post("/v1/responses", json={**body, "max_tool_calls": 2}, headers=OPENAI)).json()
    assert [i["type"] for i in limited["output"]] == ["web_search_call", "web_search_call", "message"]
    assert limited["max_tool_calls"] == 2

    stream = (await sim.post("/v1/responses", json={**body, "stream": True}, headers=OPENAI)).text
    names = [d["type"] for d in datas(stream)]
    for expected in ("response.web_search_call.in_progress", "response.web_search_call.searching",
                     "response.web_search_call.completed", "response.file_search_call.searching",
                     "response.code_interpreter_call.interpreting", "response.code_interpreter_call_code.delta",
                     "response.code_interpreter_call_code.done", "response.code_interpreter_call.completed"):
        assert expected in names
    final = datas(stream)[-1]["response"]
    assert [i["type"] for i in final["output"]] == kinds
    assert [d["sequence_number"] for d in datas(stream)] == list(range(len(names)))


async def test_responses_ids_usable_as_previous_response_id(sim):
    first = (await sim.post("/v1/responses", json={"model": "gpt-4.1", "input": "a"}, headers=OPENAI)).json()
    again = await sim.post("/v1/responses", json={"model": "gpt-4.1", "input": "b", "previous_response_id": first["id"]},
                           headers=OPENAI)
    assert again.status_code == 200 and again.json()["previous_response_id"] == first["id"]
    unknown = await sim.post("/v1/responses", json={"model": "gpt-4.1", "input": "c", "previous_response_id": "resp_x"},
                             headers=OPENAI)
    assert unknown.status_code == 400
    assert unknown.json()["error"] == {"message": "Previous response with id 'resp_x' not found.",
                                       "type": "invalid_request_error", "param": "previous_response_id",
                                       "code": "previous_response_not_found"}
    unstored = (await sim.post("/v1/responses", json={"model": "gpt-4.1", "input": "d", "store": False},
                               headers=OPENAI)).json()
    r = await sim.post("/v1/responses", json={"model": "gpt-4.1", "input": "e", "previous_response_id": unstored["id"]},
                       headers=OPENAI)
    assert r.status_code == 400
    streamed = datas((await sim.post("/v1/responses", json={"model": "gpt-4.1", "input": "f", "stream": True},
                                     headers=OPENAI)).text)[-1]["response"]["id"]
    r = await sim.post("/v1/responses", json={"model": "gpt-4.1", "input": "g", "previous_response_id": streamed},
                       headers=OPENAI)
    assert r.status_code == 200


# -- messages ---------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["max_completion_tokens", "max_output_tokens", "n"])
async def test_messages_refuses_caps_of_other_protocols(sim, field):
    r = await sim.post("/v1/messages", json=msgs("x", 60000, **{field: 1}), headers=ANTHROPIC)
    assert r.status_code == 400
    assert r.json()["error"] == {"type": "invalid_request_error", "message": f"{field}: Extra inputs are not permitted"}


async def test_messages_thinking_budget_must_fit_max_tokens(sim):
    r = await sim.post("/v1/messages", json=msgs("x", 1024, thinking={"type": "enabled", "budget_tokens": 1024}),
                       headers=ANTHROPIC)
    assert r.status_code == 400 and "budget_tokens" in r.json()["error"]["message"]


async def test_messages_hidden_thinking_counted_in_output_and_capped(sim):
    body = msgs(HANG_UP, 30000, thinking={"type": "enabled", "budget_tokens": 25000})
    message = (await sim.post("/v1/messages", json=body, headers=ANTHROPIC)).json()
    anthropic.types.Message.model_validate(message)
    assert [b["type"] for b in message["content"]] == ["thinking", "text"]
    assert message["content"][0]["thinking"] == "Let me think about this step by step."  # the summary shown
    assert message["usage"]["output_tokens"] == 20000 + 6 + 50 and message["stop_reason"] == "end_turn"
    capped = (await sim.post("/v1/messages", json=msgs(HANG_UP, 20003), headers=ANTHROPIC)).json()
    assert capped["stop_reason"] == "max_tokens" and capped["usage"]["output_tokens"] == 20003
    assert capped["content"][-1] == {"type": "text", "text": "w1 w2 w3"}


@pytest.mark.parametrize("stream", [False, True])
async def test_messages_one_hour_cache_writes(sim, stream):
    system = [{"type": "text", "text": "long rules", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    body = msgs("[[sim:cache_write=100]] [[sim:cache_read=40]]", system=system, stream=stream)
    five = msgs("[[sim:cache_write=30]] [[sim:cache_write_1h=70]]", stream=stream)
    usages = []
    for b in (body, five):
        r = await sim.post("/v1/messages", json=b, headers=ANTHROPIC)
        usages.append(datas(r.text)[0]["message"]["usage"] if stream else r.json()["usage"])
    assert usages[0]["cache_creation_input_tokens"] == 100 and usages[0]["cache_read_input_tokens"] == 40
    assert usages[0]["cache_creation"] == {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 100}
    assert usages[1]["cache_creation_input_tokens"] == 100
    assert usages[1]["cache_creation"] == {"ephemeral_5m_input_tokens": 30, "ephemeral_1h_input_tokens": 70}
    for usage in usages:
        anthropic.types.Usage.model_validate(usage)


async def test_messages_server_tools_respect_max_uses(sim):
    tools = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
             {"type": "web_fetch_20250910", "name": "web_fetch"}]
    body = msgs("[[sim:web_search=3]] [[sim:web_fetch=1]] [[sim:text=found]]", tools=tools)
    message = (await sim.post("/v1/messages", json=body, headers=ANTHROPIC)).json()
    anthropic.types.Message.model_validate(message)
    kinds = [b["type"] for b in message["content"]]
    assert kinds == (["server_tool_use", "web_search_tool_result"] * 2 + ["server_tool_use", "web_fetch_tool_result"]
                     + ["server_tool_use", "web_search_tool_result", "text"])
    errors = [b for b in message["content"] if b["type"] == "web_search_tool_result" and isinstance(b["content"], dict)]
    assert [e["content"]["error_code"] for e in errors] == ["max_uses_exceeded"]
    assert message["usage"]["server_tool_use"] == {"web_search_requests": 2, "web_fetch_requests": 1}

    events = datas((await sim.post("/v1/messages", json={**body, "stream": True}, headers=ANTHROPIC)).text)
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == kinds
    assert events[-2]["usage"]["server_tool_use"] == {"web_search_requests": 2, "web_fetch_requests": 1}
    # no server tool offered: the marker does nothing
    plain = (await sim.post("/v1/messages", json=msgs("[[sim:web_search=3]]"), headers=ANTHROPIC)).json()
    assert "server_tool_use" not in plain["usage"]


async def test_messages_service_tier(sim):
    plain = (await sim.post("/v1/messages", json=msgs("x", service_tier="auto"), headers=ANTHROPIC)).json()
    assert plain["usage"]["service_tier"] == "standard"
    priority = (await sim.post("/v1/messages", json=msgs("[[sim:service_tier=priority]]"), headers=ANTHROPIC)).json()
    assert priority["usage"]["service_tier"] == "priority"
    bad = await sim.post("/v1/messages", json=msgs("x", service_tier="priority"), headers=ANTHROPIC)
    assert bad.status_code == 400


# -- gemini -----------------------------------------------------------------------------------


async def test_gemini_candidates_search_reasoning_and_foreign_caps(sim):
    url = "/v1beta/models/gemini-sim:generateContent"
    body = gem("[[sim:words=4]] [[sim:web_search=2]] [[sim:reasoning=500]]", tools=[{"googleSearch": {}}],
               generationConfig={"candidateCount": 2})
    doc = (await sim.post(url, json=body, headers=GOOGLE)).json()
    assert len(doc["candidates"]) == 2
    assert doc["candidates"][0]["groundingMetadata"]["webSearchQueries"] == ["sim web search 1", "sim web search 2"]
    assert doc["usageMetadata"]["candidatesTokenCount"] == 8 and doc["usageMetadata"]["thoughtsTokenCount"] == 1000
    stream = datas((await sim.post("/v1beta/models/gemini-sim:streamGenerateContent?alt=sse", json=body,
                                   headers=GOOGLE)).text)
    assert stream[-1]["usageMetadata"] == doc["usageMetadata"]
    assert stream[-1]["candidates"][1]["groundingMetadata"] == doc["candidates"][1]["groundingMetadata"]
    capped = (await sim.post(url, json=gem("[[sim:reasoning=500]]", generationConfig={"maxOutputTokens": 100}),
                             headers=GOOGLE)).json()
    assert capped["candidates"][0]["finishReason"] == "MAX_TOKENS" and capped["usageMetadata"]["thoughtsTokenCount"] == 100
    for bad in ({"generationConfig": {"max_tokens": 5}}, {"max_completion_tokens": 5},
                {"generationConfig": {"candidateCount": 9}}):
        r = await sim.post(url, json=gem("x", **bad), headers=GOOGLE)
        assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"


# -- the reference bill -----------------------------------------------------------------------

PRICES = {"input": 3000, "output": 15000, "cached_input": 300,
          "long_context": {"above_input_tokens": 200000, "input": 6000, "output": 22500, "cached_input": 600},
          "service_tiers": {"priority": {"input": 5000, "output": 25000, "cached_input": 500}},
          "tools": {"web_search": 10_000_000, "web_fetch": 0, "file_search": 2_500_000,
                    "code_interpreter": 30_000_000}}


async def test_provider_bill_from_the_simulators_answers(sim):
    c = (await sim.post("/v1/chat/completions", json=chat(HANG_UP + " [[sim:cache_read=10]]", "o3", n=2),
                        headers=OPENAI)).json()
    prompt = c["usage"]["prompt_tokens"]
    assert provider_bill("chat", c, PRICES) == (prompt - 10) * 3000 + 10 * 300 + 2 * 20056 * 15000

    p = (await sim.post("/v1/chat/completions", json=chat("[[sim:words=3]]", service_tier="priority"),
                        headers=OPENAI)).json()
    assert provider_bill("chat", p, PRICES) == p["usage"]["prompt_tokens"] * 5000 + 3 * 25000

    m = (await sim.post("/v1/messages", json=msgs(
        "[[sim:input_tokens=250000]] [[sim:cache_write=100]] [[sim:cache_write_1h=50]] [[sim:cache_read=8]] "
        "[[sim:words=2]] [[sim:web_search=2]]", tools=[{"type": "web_search_20250305", "name": "web_search"}]),
        headers=ANTHROPIC)).json()
    # long context: every token at the long rates; writes at 1.25x / 2x the (long) input rate
    assert provider_bill("messages", m, PRICES) == (250000 * 6000 + 8 * 600 + 100 * 7500 + 50 * 12000
                                                    + 2 * 22500 + 2 * 10_000_000)

    tools = [{"type": "web_search"}, {"type": "code_interpreter", "container": {"type": "auto"}}]
    r = (await sim.post("/v1/responses", json={"model": "gpt-4.1", "input": "[[sim:web_search=3]] "
                                               "[[sim:code_interpreter=2]] [[sim:text=ok]]", "tools": tools},
                        headers=OPENAI)).json()
    u = r["usage"]
    assert provider_bill("responses", r, PRICES) == (u["input_tokens"] * 3000 + u["output_tokens"] * 15000
                                                     + 3 * 10_000_000 + 30_000_000)

    g = (await sim.post("/v1beta/models/g:generateContent", json=gem("[[sim:words=2]] [[sim:web_search=1]]",
                                                                     tools=[{"googleSearch": {}}]),
                        headers=GOOGLE)).json()
    meta = g["usageMetadata"]
    assert provider_bill("gemini", g, PRICES) == meta["promptTokenCount"] * 3000 + 2 * 15000 + 10_000_000

    with pytest.raises(KeyError):
        provider_bill("chat", {**p, "service_tier": "flex"}, PRICES)  # a tier without prices
