"""Property test: whatever body a client posts to a public endpoint, the gateway answers
in time, never with a 5xx of its own, and charges nothing for a request it rejects.

Bodies are drawn from broken bytes, arbitrary JSON, and objects built from the fields
the endpoints read (model, messages, stream, max_tokens, input, ...) with values of every
type. A second test builds bodies each endpoint accepts and puts arbitrary JSON in every
position a format carries content: tool schemas with properties named ``type``, ``text``,
``content``, ``image_url``, content blocks whose ``type`` is an object, deep nesting
(past what orjson re-encodes) and huge arrays. No prompt carries a ``[[sim:...]]``
marker, so the simulator itself never fails: any 5xx is the gateway's.
"""

from __future__ import annotations

import json

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.faults import headers, new_account

ENDPOINTS = ["/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/embeddings"]
MODELS = ["gpt-4.1-mini", "claude-haiku-4-5", "text-embedding-3-small", "deepseek-chat", "no-such-model", ""]

text = st.text(max_size=40).filter(lambda s: "[[" not in s)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**12), st.floats(allow_nan=False), text)
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(text, inner, max_size=4)), max_leaves=12)
roles = st.one_of(st.sampled_from(["user", "assistant", "system", "developer", "tool", "wizard"]), json_values)
content = st.one_of(text, st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image", "x"]),
                                                          "text": st.one_of(text, json_values)}), max_size=2),
                    json_values)
message = st.one_of(st.fixed_dictionaries({"role": roles, "content": content}), json_values)
fields = {
    "model": st.one_of(st.sampled_from(MODELS), json_values),
    "messages": st.one_of(st.lists(message, min_size=0, max_size=3), json_values),
    "input": st.one_of(text, st.lists(text, max_size=3), st.lists(st.integers(-1, 100_000), max_size=5),
                       st.lists(message, max_size=2), json_values),
    "stream": st.one_of(st.booleans(), json_values),
    "max_tokens": st.one_of(st.integers(-5, 200_000), st.floats(allow_nan=False), json_values),
    "max_output_tokens": st.one_of(st.integers(-5, 1000), json_values),
    "max_completion_tokens": st.one_of(st.integers(-5, 1000), json_values),
    "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": json_values}), json_values),
    "system": st.one_of(text, json_values),
    "tools": json_values,
    "encoding_format": st.one_of(st.sampled_from(["float", "base64", "int8"]), json_values),
    "dimensions": st.one_of(st.integers(-2, 4000), json_values),
    "temperature": json_values,
}
objects = st.fixed_dictionaries({}, optional=fields)
bodies = st.one_of(
    objects.map(orjson.dumps),
    objects.map(orjson.dumps),
    json_values.map(lambda v: orjson.dumps(v)),
    st.binary(max_size=64),
    objects.map(lambda o: orjson.dumps(o)[:-1]),  # truncated JSON
)


@pytest.fixture(scope="module")
def fuzz_account(gateway):
    account, _, secret = new_account(gateway)
    gateway.admin.call("PUT", f"/accounts/{account['id']}/embeddings/text-embedding-3-small", {"enabled": True})
    return account, secret


@pytest.fixture(scope="module")
def http():
    with httpx.Client(timeout=httpx.Timeout(10)) as client:
        yield client


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(path=st.sampled_from(ENDPOINTS), body=bodies)
def test_no_5xx_no_hang_no_charge_for_rejects(gateway, fuzz_account, http, path, body):
    _post_and_check(gateway, fuzz_account, http, path, body)


def _post_and_check(gateway, fuzz_account, http, path: str, body: bytes) -> int:
    account, secret = fuzz_account
    before = gateway.admin.balance(account["id"])
    rows_before = gateway.admin.usage(account["id"], limit=1000)
    with http.stream("POST", gateway.url + path, content=body,
                     headers={**headers(secret), "content-type": "application/json"}) as response:
        raw = response.read()  # a hang shows as httpx.ReadTimeout
    assert response.status_code != 500, (path, body[:500], raw[:500])
    if response.status_code >= 500:  # the one 5xx the gateway answers itself: the spec's 503 for no route
        assert response.status_code == 503 and orjson.loads(raw)["error"]["code"] == "model_not_found", raw[:500]
    assert "x-request-id" in response.headers
    after = gateway.admin.balance(account["id"])
    assert after["held_nano"] == 0, "a hold leaked"
    if response.status_code >= 400:
        assert after["balance_nano"] == before["balance_nano"], (path, body[:300], raw[:300])
        rows = gateway.admin.usage(account["id"], limit=1000)
        # the gateway's own refusals write nothing; a provider's refusal is a row that costs nothing
        assert all(r["cost_nano"] == 0 and r["status"] != "ok" for r in rows[: len(rows) - len(rows_before)])
        doc = orjson.loads(raw)
        assert isinstance(doc.get("error"), dict) and doc["error"]["message"], raw[:300]
    return response.status_code


# -- bodies each endpoint accepts, with arbitrary JSON where each format carries content ------

TRAP_KEYS = ["type", "text", "content", "image_url", "input", "source", "data", "properties", "items", "x"]
keyed_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(TRAP_KEYS), inner, max_size=4)), max_leaves=10)


def _nest(levels: int) -> dict:
    """A schema ``2 * levels`` deep."""
    value: object = {"type": "string"}
    for _ in range(levels):
        value = {"type": "object", "properties": {"type": value}}
    return value


anything = st.one_of(
    keyed_values,
    st.integers(0, 120_000).map(lambda n: [{"type": "text", "text": "a"}] * n),  # a huge array
    st.sampled_from([20, 100, 140]).map(_nest),  # 280 deep: past what orjson re-encodes
)
schemas = st.one_of(
    st.fixed_dictionaries({"type": st.just("object"),
                           "properties": st.dictionaries(st.sampled_from(TRAP_KEYS), anything, max_size=4)}),
    anything,
)
block_type = st.one_of(st.sampled_from(["text", "image", "image_url", "tool_use", "tool_result", "document",
                                        "thinking", "input_text", "input_image", "function_call",
                                        "function_call_output", "custom_tool_call", "reasoning", "message"]),
                       keyed_values)
blocks = st.lists(st.one_of(
    st.fixed_dictionaries({"type": block_type}, optional={k: anything for k in (
        "text", "content", "source", "input", "image_url", "output", "arguments", "name", "id", "tool_use_id")}),
    anything), max_size=3)
contents = st.one_of(text, blocks, anything)


def _chat(model, contents_, schema_, extra):
    return {"model": model, "messages": [{"role": role, "content": c} for role, c in contents_],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": schema_}}], **extra}


chat_bodies = st.builds(
    _chat, st.sampled_from(["gpt-4.1-mini", "claude-haiku-4-5"]),
    st.lists(st.tuples(st.sampled_from(["user", "assistant", "system", "tool"]), contents), min_size=1, max_size=3),
    schemas, st.fixed_dictionaries({}, optional={"stream": st.booleans(), "max_tokens": st.integers(1, 64)}))
messages_bodies = st.builds(
    lambda contents_, system, schema_, stream: {
        "model": "claude-haiku-4-5", "max_tokens": 32, "stream": stream, "system": system,
        "messages": [{"role": role, "content": c} for role, c in contents_],
        "tools": [{"name": "f", "description": "d", "input_schema": schema_}]},
    st.lists(st.tuples(st.sampled_from(["user", "assistant"]), contents), min_size=1, max_size=3),
    st.one_of(text, blocks), schemas, st.booleans())
responses_bodies = st.builds(
    lambda model, items, instructions, schema_, stream: {
        "model": model, "input": items, "instructions": instructions, "stream": stream, "max_output_tokens": 32,
        "tools": [{"type": "function", "name": "f", "parameters": schema_}, {"type": "custom", "name": "g"}]},
    st.sampled_from(["gpt-4.1-mini", "claude-haiku-4-5", "deepseek-chat"]),
    st.one_of(text, st.lists(st.one_of(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "developer", "assistant"]), "content": contents}),
        st.fixed_dictionaries({"type": block_type}, optional={k: anything for k in (
            "content", "output", "arguments", "name", "call_id", "input", "summary", "encrypted_content")})),
        min_size=1, max_size=3)),
    st.one_of(st.none(), text, anything), schemas, st.booleans())
embeddings_bodies = st.builds(lambda inputs: {"model": "text-embedding-3-small", "input": inputs},
                              st.one_of(st.lists(text, min_size=1, max_size=3), anything))
structured = st.one_of(
    st.tuples(st.just("/v1/chat/completions"), chat_bodies),
    st.tuples(st.just("/v1/messages"), messages_bodies),
    st.tuples(st.just("/v1/responses"), responses_bodies),
    st.tuples(st.just("/v1/embeddings"), embeddings_bodies),
)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=structured)
def test_any_json_in_every_content_position(gateway, fuzz_account, http, case):
    path, body = case
    # stdlib json: orjson itself refuses to encode more than 254 levels, which is part of the test
    _post_and_check(gateway, fuzz_account, http, path, json.dumps(body).encode())
