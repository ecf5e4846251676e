"""Bodies the translations refuse, through the whole in-process gateway (tests/inproc.py).

Each must be answered with a 400 in the client's envelope naming the field, quickly, before
any provider is called, and charge nothing (no hold left, no usage row, balance unchanged).
The property tests (tests/formats/test_translation_properties.py on the translators,
tests/test_fuzz_bodies.py on the live gateway) look for more such bodies at random; the
cases here are the ones found, kept so they stay fixed.
"""

from __future__ import annotations


import httpx
import pytest
import trio

from tests.inproc import Gateway

GEMINI_ANSWER = {"candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
                 "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4}}


@pytest.fixture
async def gw(tmp_path):
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, json=GEMINI_ANSWER)

    gw = Gateway(tmp_path, handler)
    gw.calls = calls
    try:
        yield gw
    finally:
        await gw.aclose()


async def refused(gw: Gateway, path: str, body: dict, *, within_s: float = 2) -> dict:
    """POST ``body``; check it is a 400 answered in time that cost nothing; the error object."""
    account_id, secret = await gw.funded_key()
    with trio.move_on_after(within_s) as waiting:
        response = await gw.http.post(path, json=body, headers={"authorization": f"Bearer {secret}"})
    assert not waiting.cancelled_caught, f"no answer within {within_s} s"
    assert response.status_code == 400, response.text[:500]
    assert gw.calls == [], "a refused body reached the provider"
    assert await gw.usage(account_id) == [], "a refused body left a usage row"
    account = gw.directory.accounts[account_id]
    assert account.held_nano == 0 and account.credit_nano == 10 * 10**9
    return response.json()["error"]


def doubling_chain(n: int) -> dict:
    defs = {f"d{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/d{i + 1}"},
                                                        "y": {"$ref": f"#/$defs/d{i + 1}"}}} for i in range(n - 1)}
    defs[f"d{n - 1}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


async def test_a_2kb_schema_that_doubles_at_each_ref_is_a_quick_400_on_gemini(gw):
    """The audit's body: 2**20 nodes once inlined took 43 s and froze the worker."""
    tool = {"type": "function", "function": {"name": "explode", "parameters": doubling_chain(20)}}
    error = await refused(gw, "/v1/chat/completions", {
        "model": "gemini-2.5-flash", "messages": [{"role": "user", "content": "hi"}], "tools": [tool]}, within_s=1)
    assert error["param"] == "tools[0].function.parameters" and "'explode'" in error["message"]
    assert error["type"] == "invalid_request_error"


async def test_the_same_schema_as_a_responses_output_format_is_a_quick_400_on_gemini(gw):
    error = await refused(gw, "/v1/responses", {
        "model": "gemini-2.5-flash", "input": "hi",
        "text": {"format": {"type": "json_schema", "name": "x", "schema": doubling_chain(20)}}}, within_s=1)
    assert error["param"] == "response_format.json_schema.schema"


def chat(model: str, **fields) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **fields}


def audio(fmt) -> dict:
    return {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": fmt}}]}


# Values the translations used as dict keys or set members, or spread with **, without checking
# their type first: each was a TypeError, answered as the gateway's 500.
UNHASHABLE = [
    pytest.param("/v1/chat/completions", chat("gemini-2.5-flash", reasoning_effort=["high"]), "reasoning_effort",
                 id="gemini-reasoning_effort"),
    pytest.param("/v1/chat/completions", chat("claude-sonnet-4-5", reasoning_effort=["high"]), "reasoning_effort",
                 id="claude-reasoning_effort"),
    pytest.param("/v1/chat/completions", chat("gemini-2.5-flash", reasoning_effort={"level": "high"}),
                 "reasoning_effort", id="gemini-reasoning_effort-object"),
    pytest.param("/v1/responses", {"model": "gemini-2.5-flash", "input": "hi", "reasoning": {"effort": ["high"]}},
                 "reasoning.effort", id="gemini-reasoning.effort"),
    pytest.param("/v1/responses", {"model": "claude-sonnet-4-5", "input": "hi", "reasoning": {"effort": ["high"]}},
                 "reasoning.effort", id="claude-reasoning.effort"),
    pytest.param("/v1/responses", {"model": "deepseek-chat", "input": "hi", "reasoning": {"effort": {"x": 1}}},
                 "reasoning.effort", id="chat-upstream-reasoning.effort"),
    pytest.param("/v1/chat/completions", {"model": "gemini-2.5-flash", "messages": [audio(["wav"])]},
                 "messages[0].content[0].input_audio.format", id="gemini-input_audio.format"),
    pytest.param("/v1/chat/completions", chat("gemini-2.5-flash", tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"$ref": "#/$defs/x", "$defs": {"x": 5}}}}]),
                 "tools[0].function.parameters.$ref", id="gemini-defs-entry-not-object"),
    pytest.param("/v1/responses", {"model": "gemini-2.5-flash", "input": [{"role": ["user"], "content": "hi"}]},
                 "input[0].role", id="responses-role"),
    pytest.param("/v1/responses", {"model": "claude-haiku-4-5", "input": [
        {"role": "user", "content": [{"type": ["input_text"], "text": "hi"}]}]}, "input[0].content[0]",
                 id="responses-content-type"),
]


@pytest.mark.parametrize("path,body,param", UNHASHABLE)
async def test_a_non_string_where_a_name_is_expected_is_a_400_naming_the_field(gw, path, body, param):
    error = await refused(gw, path, body)
    assert error["param"] == param, error
    assert error["type"] == "invalid_request_error"
