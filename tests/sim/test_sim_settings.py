"""The simulator's settings (markers on every request, the prompt cache) and its Azure OpenAI paths."""

from __future__ import annotations

import httpx
import pytest

from gatewayd.sim import count_input_tokens, serve_simulator

OPENAI = {"authorization": "Bearer sk-test"}
ANTHROPIC = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
AZURE = {"api-key": "az-key"}


@pytest.fixture
async def sim(nursery):
    port = await nursery.start(serve_simulator)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        yield client


def turns(n: int) -> list[dict]:
    out = []
    for i in range(n):
        out.append({"role": "user", "content": f"question number {i} here"})
        if i < n - 1:
            out.append({"role": "assistant", "content": f"answer {i}"})
    return out


async def test_markers_setting_applies_to_every_request_until_cleared(sim):
    assert (await sim.get("/_sim/settings")).json() == {"markers": "", "prompt_cache": False}
    assert (await sim.put("/_sim/settings", json={"markers": "[[sim:fault=status:503]]"})).status_code == 200
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    r = await sim.post("/v1/chat/completions", json=body, headers=OPENAI)
    assert r.status_code == 503 and r.json()["error"]["message"] == "simulated error 503"
    r = await sim.post("/v1/embeddings", json={"model": "e", "input": "x"}, headers=OPENAI)
    assert r.status_code == 503
    await sim.put("/_sim/settings", json={"markers": ""})
    assert (await sim.post("/v1/chat/completions", json=body, headers=OPENAI)).status_code == 200


@pytest.mark.parametrize("bad", [{"markers": 3}, {"prompt_cache": "yes"}, {"other": 1}, []])
async def test_bad_settings_are_refused(sim, bad):
    r = await sim.put("/_sim/settings", json=bad)
    assert r.status_code == 400


async def test_prompt_cache_serves_repeated_leading_turns(sim):
    await sim.put("/_sim/settings", json={"prompt_cache": True})
    first = {"model": "m", "messages": turns(1)}
    r1 = (await sim.post("/v1/chat/completions", json=first, headers=OPENAI)).json()["usage"]
    assert r1["prompt_tokens_details"]["cached_tokens"] == 0
    second = {"model": "m", "messages": turns(2)}
    r2 = (await sim.post("/v1/chat/completions", json=second, headers=OPENAI)).json()["usage"]
    assert r2["prompt_tokens"] == count_input_tokens(second, "chat")  # cached tokens are within the total
    assert r2["prompt_tokens_details"]["cached_tokens"] == count_input_tokens(first, "chat")
    # Anthropic: input_tokens is the rest, the cached part is cache_read_input_tokens
    m1 = {"model": "c", "max_tokens": 50, "system": "s", "messages": turns(1)}
    m2 = {**m1, "messages": turns(2)}
    await sim.post("/v1/messages", json=m1, headers=ANTHROPIC)
    u = (await sim.post("/v1/messages", json=m2, headers=ANTHROPIC)).json()["usage"]
    assert u["cache_read_input_tokens"] == count_input_tokens(m1, "messages")
    assert u["input_tokens"] + u["cache_read_input_tokens"] == count_input_tokens(m2, "messages")
    # a different system prompt is a different prefix
    other = (await sim.post("/v1/messages", json={**m2, "system": "t"}, headers=ANTHROPIC)).json()["usage"]
    assert other["cache_read_input_tokens"] == 0
    await sim.put("/_sim/settings", json={"prompt_cache": False})
    again = (await sim.post("/v1/chat/completions", json=second, headers=OPENAI)).json()["usage"]
    assert again["prompt_tokens_details"]["cached_tokens"] == 0


async def test_prompt_cache_applies_to_bedrock_invoke_and_converse(sim):
    from gatewayd.sim.bedrock import API_KEY, converse_input_tokens

    bedrock = {"authorization": f"Bearer {API_KEY}"}
    await sim.put("/_sim/settings", json={"prompt_cache": True})
    m1 = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 50, "system": "s", "messages": turns(1)}
    m2 = {**m1, "messages": turns(2)}
    path = "/bedrock/model/anthropic.claude-x-v1%3A0/invoke"
    first = (await sim.post(path, json=m1, headers=bedrock)).json()["usage"]
    assert first["cache_read_input_tokens"] == 0
    u = (await sim.post(path, json=m2, headers=bedrock)).json()["usage"]
    assert u["cache_read_input_tokens"] == count_input_tokens(m1, "messages")
    assert u["input_tokens"] + u["cache_read_input_tokens"] == count_input_tokens(m2, "messages")

    def converse(n: int) -> dict:
        return {"messages": [{"role": t["role"], "content": [{"text": t["content"]}]} for t in turns(n)],
                "system": [{"text": "s"}]}

    path = "/bedrock/model/amazon.nova-pro-v1%3A0/converse"
    assert (await sim.post(path, json=converse(1), headers=bedrock)).json()["usage"]["cacheReadInputTokens"] == 0
    u = (await sim.post(path, json=converse(2), headers=bedrock)).json()["usage"]
    assert u["cacheReadInputTokens"] == converse_input_tokens(converse(1))
    assert u["inputTokens"] + u["cacheReadInputTokens"] == converse_input_tokens(converse(2))
    await sim.put("/_sim/settings", json={"prompt_cache": False})


async def test_azure_paths(sim):
    body = {"model": "ignored", "messages": [{"role": "user", "content": "hi"}]}
    path = "/openai/deployments/my-dep/chat/completions"
    ok = await sim.post(path, params={"api-version": "2024-10-21"}, json=body, headers=AZURE)
    assert ok.status_code == 200 and ok.json()["object"] == "chat.completion"
    no_key = await sim.post(path, params={"api-version": "2024-10-21"}, json=body)
    assert no_key.status_code == 401 and no_key.json()["error"]["code"] == "401"
    no_version = await sim.post(path, json=body, headers=AZURE)
    assert no_version.status_code == 404 and no_version.json()["error"]["message"] == "Resource not found"
    emb = await sim.post("/openai/deployments/e/embeddings", params={"api-version": "v"},
                         json={"model": "e", "input": ["a"]}, headers=AZURE)
    assert emb.status_code == 200 and len(emb.json()["data"]) == 1
    resp = await sim.post("/openai/responses", params={"api-version": "v"}, json={"model": "d", "input": "hi"},
                          headers=AZURE)
    assert resp.status_code == 200 and resp.json()["object"] == "response"
