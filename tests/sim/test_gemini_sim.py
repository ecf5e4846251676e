"""The simulator's Gemini wire (Generative Language API) over real HTTP: paths, auth, the
answer and the stream, tools, thinking, cache, blocked prompts and the fault markers."""

from __future__ import annotations

import orjson
import pytest
import httpx

from gatewayd.sim import count_input_tokens, serve_simulator

KEY = {"x-goog-api-key": "sim-key"}
MODEL = "gemini-2.5-flash"
GEN = f"/v1beta/models/{MODEL}:generateContent"
STREAM = f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
WEATHER = {"functionDeclarations": [{"name": "get_weather", "parameters": {
    "type": "OBJECT", "properties": {"city": {"type": "STRING"}, "days": {"type": "INTEGER"},
                                     "unit": {"type": "STRING", "enum": ["c", "f"]}}}}]}


@pytest.fixture
async def sim(nursery):
    port = await nursery.start(serve_simulator)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        yield client


def ask(text: str, **extra) -> dict:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], **extra}


def events(raw: bytes) -> list[dict]:
    """Gemini separates events with CRLF CRLF; a tiny parser independent of the gateway's."""
    assert raw.endswith(b"\r\n\r\n")
    return [orjson.loads(block[6:]) for block in raw.split(b"\r\n\r\n") if block]


def joined(evs: list[dict], thought: bool = False) -> str:
    return "".join(p.get("text", "") for e in evs for c in e.get("candidates", ())
                   for p in c["content"].get("parts", ()) if p.get("thought", False) is thought)


async def test_text_answer_and_usage(sim):
    body = ask("hello there", systemInstruction={"parts": [{"text": "Be brief."}]})
    r = await sim.post(GEN, json=body, headers=KEY)
    assert r.status_code == 200
    doc = r.json()
    [candidate] = doc["candidates"]
    assert candidate["content"] == {"role": "model", "parts": [{"text": "This is a simulated reply to: hello there."}]}
    assert candidate["finishReason"] == "STOP" and doc["modelVersion"] == MODEL
    prompt = count_input_tokens({**body, "model": MODEL}, "gemini")
    assert prompt == 2 + 1 + 3 + 2 + 3  # words, role, per content, system words, system
    assert doc["usageMetadata"]["promptTokenCount"] == prompt
    assert doc["usageMetadata"]["candidatesTokenCount"] == 8
    assert doc["usageMetadata"]["totalTokenCount"] == prompt + 8
    assert "thoughtsTokenCount" not in doc["usageMetadata"]


async def test_stream_matches_the_whole_answer(sim):
    body = ask("[[sim:words=6]] [[sim:cache_read=20]]")
    whole = (await sim.post(GEN, json=body, headers=KEY)).json()
    r = await sim.post(STREAM, json=body, headers=KEY)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    evs = events(r.content)
    assert len(evs) == 7 and joined(evs) == "w1 w2 w3 w4 w5 w6"
    assert all("finishReason" not in e["candidates"][0] for e in evs[:-1])
    assert evs[-1]["candidates"][0]["finishReason"] == "STOP"
    assert evs[-1]["usageMetadata"] == whole["usageMetadata"]
    assert whole["usageMetadata"]["cachedContentTokenCount"] == 20
    assert evs[0]["usageMetadata"] == {"promptTokenCount": whole["usageMetadata"]["promptTokenCount"],
                                       "totalTokenCount": whole["usageMetadata"]["promptTokenCount"],
                                       "cachedContentTokenCount": 20}


async def test_stream_without_alt_sse_is_a_json_array(sim):
    r = await sim.post(f"/v1beta/models/{MODEL}:streamGenerateContent", json=ask("hi"), headers=KEY)
    doc = r.json()
    assert isinstance(doc, list) and doc[0]["candidates"][0]["finishReason"] == "STOP"


async def test_parallel_function_calls_whole_and_streamed(sim):
    body = ask("[[sim:tools=2]] weather", tools=[WEATHER])
    doc = (await sim.post(GEN, json=body, headers=KEY)).json()
    parts = doc["candidates"][0]["content"]["parts"]
    args = {"city": "sim-city", "days": 42, "unit": "c"}
    assert parts == [{"functionCall": {"name": "get_weather", "args": args}}] * 2
    evs = events((await sim.post(STREAM, json=body, headers=KEY)).content)
    calls = [p["functionCall"] for e in evs for p in e["candidates"][0]["content"]["parts"] if "functionCall" in p]
    assert calls == [{"name": "get_weather", "args": args}] * 2
    assert len(evs) == 3  # one event per call, then the closing one


async def test_a_thinking_turn_signs_its_first_call(sim):
    body = ask("[[sim:tools=2]] [[sim:thinking]]", tools=[WEATHER])
    parts = (await sim.post(GEN, json=body, headers=KEY)).json()["candidates"][0]["content"]["parts"]
    assert parts[0]["thoughtSignature"].startswith("sig-") and "thoughtSignature" not in parts[1]
    evs = events((await sim.post(STREAM, json=body, headers=KEY)).content)
    signed = [p for e in evs for p in e["candidates"][0]["content"]["parts"] if "thoughtSignature" in p]
    assert signed == [parts[0]]


async def test_tool_config_and_function_responses(sim):
    forced = ask("hi", tools=[WEATHER],
                 toolConfig={"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}})
    assert "functionCall" in (await sim.post(GEN, json=forced, headers=KEY)).json()["candidates"][0]["content"]["parts"][0]
    none = ask("[[sim:tools=2]]", tools=[WEATHER], toolConfig={"functionCallingConfig": {"mode": "NONE"}})
    parts = (await sim.post(GEN, json=none, headers=KEY)).json()["candidates"][0]["content"]["parts"]
    assert all("functionCall" not in p for p in parts)
    answered = {"contents": [
        {"role": "user", "parts": [{"text": "weather?"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}}]},
    ], "tools": [WEATHER]}
    doc = (await sim.post(GEN, json=answered, headers=KEY)).json()
    assert doc["candidates"][0]["content"]["parts"] == [{"text": "Tool result received: sunny"}]


async def test_thinking_budget_thoughts_and_limits(sim):
    shown = ask("[[sim:words=3]]", generationConfig={"thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True}})
    doc = (await sim.post(GEN, json=shown, headers=KEY)).json()
    assert doc["candidates"][0]["content"]["parts"][0] == {"text": "Let me think about this step by step.", "thought": True}
    assert doc["usageMetadata"]["thoughtsTokenCount"] == 8 and doc["usageMetadata"]["candidatesTokenCount"] == 3
    evs = events((await sim.post(STREAM, json=shown, headers=KEY)).content)
    assert joined(evs, thought=True) == "Let me think about this step by step." and joined(evs) == "w1 w2 w3"
    hidden = ask("[[sim:words=3]]", generationConfig={"thinkingConfig": {"thinkingBudget": -1}})
    doc = (await sim.post(GEN, json=hidden, headers=KEY)).json()
    assert len(doc["candidates"][0]["content"]["parts"]) == 1 and doc["usageMetadata"]["thoughtsTokenCount"] == 8
    off = ask("[[sim:words=3]]", generationConfig={"thinkingConfig": {"thinkingBudget": 0}})
    assert "thoughtsTokenCount" not in (await sim.post(GEN, json=off, headers=KEY)).json()["usageMetadata"]
    capped = ask("[[sim:words=10]]", generationConfig={"maxOutputTokens": 4, "stopSequences": ["zzz"]})
    doc = (await sim.post(GEN, json=capped, headers=KEY)).json()
    assert doc["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert doc["candidates"][0]["content"]["parts"] == [{"text": "w1 w2 w3 w4"}]
    stopped = ask("[[sim:words=10]]", generationConfig={"stopSequences": [" w3"]})
    doc = (await sim.post(GEN, json=stopped, headers=KEY)).json()
    assert doc["candidates"][0]["content"]["parts"] == [{"text": "w1 w2"}]
    assert doc["candidates"][0]["finishReason"] == "STOP"


@pytest.mark.parametrize("marker,reason", [("[[sim:blocked]]", "SAFETY"), ("[[sim:blocked=OTHER]]", "OTHER")])
async def test_blocked_prompt(sim, marker, reason):
    doc = (await sim.post(GEN, json=ask(f"bad {marker}"), headers=KEY)).json()
    assert "candidates" not in doc and doc["promptFeedback"]["blockReason"] == reason
    assert doc["usageMetadata"]["promptTokenCount"] > 0
    evs = events((await sim.post(STREAM, json=ask(f"bad {marker}"), headers=KEY)).content)
    assert len(evs) == 1 and evs[0]["promptFeedback"]["blockReason"] == reason


async def test_auth_paths_and_bad_bodies(sim):
    r = await sim.post(GEN, json=ask("hi"))
    assert r.status_code == 403 and r.json()["error"]["status"] == "PERMISSION_DENIED"
    assert (await sim.post(GEN + "?key=abc", json=ask("hi"))).status_code == 200
    r = await sim.post(f"/v1beta/models/{MODEL}:countTokens", json=ask("hi"), headers=KEY)
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"
    r = await sim.post("/v1beta/files", json={}, headers=KEY)
    assert r.status_code == 404 and r.json()["error"]["code"] == 404
    for bad in ({}, {"contents": []}, {"contents": [{"role": "user", "parts": []}]},
                {"contents": [{"role": "system", "parts": [{"text": "x"}]}]},
                {"contents": [{"role": "user", "parts": [{"text": ""}]}]}):
        r = await sim.post(GEN, json=bad, headers=KEY)
        assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT", bad
    r = await sim.post(GEN, content=b"{nope", headers=KEY)
    assert r.status_code == 400


@pytest.mark.parametrize("status,grpc", [(400, "INVALID_ARGUMENT"), (429, "RESOURCE_EXHAUSTED"), (500, "INTERNAL"),
                                         (503, "UNAVAILABLE")])
async def test_fault_status_in_googles_shape(sim, status, grpc):
    """Google's retry hint is in the body (google.rpc.RetryInfo), never a Retry-After header."""
    r = await sim.post(GEN, json=ask(f"[[sim:fault=status:{status}]]"), headers=KEY)
    assert r.status_code == status and "retry-after" not in r.headers
    error = r.json()["error"]
    assert {k: error[k] for k in ("code", "message", "status")} == {
        "code": status, "message": f"simulated error {status}", "status": grpc}
    if status != 429:
        assert "details" not in error
        return
    quota, retry = error["details"]
    assert quota["@type"] == "type.googleapis.com/google.rpc.QuotaFailure" and quota["violations"]
    assert retry == {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}


async def test_fault_error_after_no_usage_and_invalid_json(sim):
    raw = (await sim.post(STREAM, json=ask("[[sim:fault=error_after:2]] [[sim:words=5]]"), headers=KEY)).content
    evs = events(raw)
    assert joined(evs[:-1]) == "w1 w2 " and evs[-1] == {
        "error": {"code": 500, "message": "simulated mid-stream error", "status": "INTERNAL"}}
    doc = (await sim.post(GEN, json=ask("[[sim:fault=no_usage]]"), headers=KEY)).json()
    assert "usageMetadata" not in doc
    evs = events((await sim.post(STREAM, json=ask("[[sim:fault=no_usage]] [[sim:words=2]]"), headers=KEY)).content)
    assert all("usageMetadata" not in e for e in evs)
    r = await sim.post(GEN, json=ask("[[sim:fault=invalid_json]]"), headers=KEY)
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(r.content)


async def test_request_log_records_the_path_and_the_key(sim):
    await sim.post(STREAM, json=ask("logged-gemini"), headers=KEY)
    [entry] = (await sim.get("/_sim/requests", params={"contains": "logged-gemini"})).json()
    assert entry["path"] == f"/v1beta/models/{MODEL}:streamGenerateContent" and entry["query"] == "alt=sse"
    assert entry["headers"]["x-goog-api-key"] == "sim-key" and entry["stream"] is True and entry["status"] == 200
