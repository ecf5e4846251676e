"""Bodies the translations refuse, through the whole in-process gateway (tests/inproc.py).

Each must be answered with a 400 in the client's envelope naming the field, quickly, before
any provider is called, and charge nothing (no hold left, no usage row, balance unchanged).
The property tests in tests/test_fuzz_bodies.py look for more such bodies at random; the
cases here are the ones found, kept so they stay fixed.
"""

from __future__ import annotations

import time

import httpx
import pytest
import trio

from tests.inproc import Gateway

GEMINI_ANSWER = {"candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
                 "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4}}


@pytest.fixture
async def gateway(tmp_path):
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
    started = time.monotonic()
    with trio.fail_after(within_s):
        response = await gw.http.post(path, json=body, headers={"authorization": f"Bearer {secret}"})
    elapsed = time.monotonic() - started
    assert response.status_code == 400, response.text[:500]
    assert elapsed < within_s
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


async def test_a_2kb_schema_that_doubles_at_each_ref_is_a_quick_400_on_gemini(gateway):
    """The audit's body: 2**20 nodes once inlined took 43 s and froze the worker."""
    tool = {"type": "function", "function": {"name": "explode", "parameters": doubling_chain(20)}}
    error = await refused(gateway, "/v1/chat/completions", {
        "model": "gemini-2.5-flash", "messages": [{"role": "user", "content": "hi"}], "tools": [tool]}, within_s=1)
    assert error["param"] == "tools[0].function.parameters" and "'explode'" in error["message"]
    assert error["type"] == "invalid_request_error"


async def test_the_same_schema_as_a_responses_output_format_is_a_quick_400_on_gemini(gateway):
    error = await refused(gateway, "/v1/responses", {
        "model": "gemini-2.5-flash", "input": "hi",
        "text": {"format": {"type": "json_schema", "name": "x", "schema": doubling_chain(20)}}}, within_s=1)
    assert error["param"] == "response_format.json_schema.schema"
