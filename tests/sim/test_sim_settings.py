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
    await sim.put("/_sim/settings", json={"prompt_cache": False})
    again = (await sim.post("/v1/chat/completions", json=second, headers=OPENAI)).json()["usage"]
    assert again["prompt_tokens_details"]["cached_tokens"] == 0


LONG_SYSTEM = "You are a careful coding agent. " * 300  # 1,800 words: above Anthropic's 1,024 minimum
MARK = {"type": "ephemeral"}


def marked(n: int, system: str = LONG_SYSTEM) -> dict:
    """An Anthropic body with breakpoints on the system prompt and on the last message's block."""
    messages = turns(n)
    messages[-1] = {"role": "user", "content": [{"type": "text", "text": messages[-1]["content"],
                                                 "cache_control": MARK}]}
    return {"model": "c", "max_tokens": 50, "system": [{"type": "text", "text": system, "cache_control": MARK}],
            "messages": messages}


async def test_anthropic_caches_only_what_breakpoints_mark(sim):
    """Anthropic's cache: nothing without cache_control; a marked prefix is written (billed as
    a write) and read by a later request that repeats it, found by looking back from a breakpoint."""
    await sim.put("/_sim/settings", json={"prompt_cache": True})
    plain = {"model": "c", "max_tokens": 50, "system": LONG_SYSTEM, "messages": turns(2)}
    for _ in range(2):  # repeated, but unmarked: never cached
        u = (await sim.post("/v1/messages", json=plain, headers=ANTHROPIC)).json()["usage"]
        assert (u["cache_read_input_tokens"], u["cache_creation_input_tokens"]) == (0, 0)
    first = (await sim.post("/v1/messages", json=marked(1), headers=ANTHROPIC)).json()["usage"]
    assert first["cache_read_input_tokens"] == 0
    assert first["cache_creation_input_tokens"] == count_input_tokens(marked(1), "messages")
    assert first["input_tokens"] == 0  # the breakpoint is on the last block: all of it was written
    second_body = marked(2)
    second = (await sim.post("/v1/messages", json=second_body, headers=ANTHROPIC)).json()["usage"]
    read_prefix = {**second_body, "messages": [{**second_body["messages"][0], "content": "question number 0 here"}]}
    read_prefix["messages"][0] = turns(1)[0]
    assert second["cache_read_input_tokens"] == count_input_tokens(read_prefix, "messages")
    total = second["input_tokens"] + second["cache_read_input_tokens"] + second["cache_creation_input_tokens"]
    assert total == count_input_tokens(second_body, "messages")
    assert second["cache_creation_input_tokens"] > 0 and second["input_tokens"] == 0
    # a prefix under 1,024 tokens is not cached, marked or not
    short = marked(1, system="Be brief.")
    for _ in range(2):
        u = (await sim.post("/v1/messages", json=short, headers=ANTHROPIC)).json()["usage"]
        assert (u["cache_read_input_tokens"], u["cache_creation_input_tokens"]) == (0, 0)
    # a 1-hour breakpoint's write is a 1-hour write
    hour = marked(1, system="Another long prompt here. " * 300)
    hour["messages"][-1]["content"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    u = (await sim.post("/v1/messages", json=hour, headers=ANTHROPIC)).json()["usage"]
    assert u["cache_creation"]["ephemeral_1h_input_tokens"] == u["cache_creation_input_tokens"] > 0
    await sim.put("/_sim/settings", json={"prompt_cache": False})


async def test_a_fifth_breakpoint_is_refused_like_anthropic_does(sim):
    body = marked(1)
    body["tools"] = [{"name": f"t{k}", "input_schema": {"type": "object"}, "cache_control": MARK} for k in range(3)]
    r = await sim.post("/v1/messages", json=body, headers=ANTHROPIC)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "A maximum of 4 blocks with cache_control may be provided. Found 5."


async def test_invalid_base64_is_refused_like_anthropic_does(sim):
    url_safe = "JVBERi0xLjQK_-8="  # the URL-safe alphabet google-genai sends
    body = {"model": "c", "max_tokens": 50, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "read"},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": url_safe}}]}]}
    r = await sim.post("/v1/messages", json=body, headers=ANTHROPIC)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "messages.0.content.1.source.base64: invalid base64 data"
    body["messages"][0]["content"][1]["source"]["data"] = "JVBERi0xLjQK/+8="
    assert (await sim.post("/v1/messages", json=body, headers=ANTHROPIC)).status_code == 200


async def test_prompt_cache_applies_to_bedrock_invoke_and_converse(sim):
    from gatewayd.sim.bedrock import API_KEY, converse_input_tokens

    bedrock = {"authorization": f"Bearer {API_KEY}"}
    await sim.put("/_sim/settings", json={"prompt_cache": True})
    m1 = {"anthropic_version": "bedrock-2023-05-31", **marked(1)}
    del m1["model"]
    path = "/bedrock/model/anthropic.claude-x-v1%3A0/invoke"
    first = (await sim.post(path, json=m1, headers=bedrock)).json()["usage"]
    assert first["cache_read_input_tokens"] == 0
    assert first["cache_creation_input_tokens"] == count_input_tokens(m1, "messages")
    u = (await sim.post(path, json=m1, headers=bedrock)).json()["usage"]  # InvokeModel caches as Anthropic does
    assert u["cache_read_input_tokens"] == count_input_tokens(m1, "messages")
    assert u["cache_creation_input_tokens"] == u["input_tokens"] == 0

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
