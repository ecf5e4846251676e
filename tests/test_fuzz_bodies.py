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
from tests.live import Daemon

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
def fuzz_gateway(sim, tmp_path_factory):
    """A daemon of the fuzz tests' own. Their bodies put any JSON in any field, and the
    simulator counts the words of every string it is sent, in fields a real provider would
    refuse too: its counts for such bodies are no provider's, and the charges they make may
    pass their holds, which the audit rightly names. That must not fail the shared daemon's
    audit for the tests that run after these (tests/conftest.py checks it after each test)."""
    d = Daemon(tmp_path_factory.mktemp("fuzz-gateway"), sim.url)
    yield d
    d.stop()


@pytest.fixture(scope="module")
def fuzz_account(fuzz_gateway):
    gateway = fuzz_gateway
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
def test_no_5xx_no_hang_no_charge_for_rejects(fuzz_gateway, fuzz_account, http, path, body):
    _post_and_check(fuzz_gateway, fuzz_account, http, path, body)


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
def test_any_json_in_every_content_position(fuzz_gateway, fuzz_account, http, case):
    path, body = case
    # stdlib json: orjson itself refuses to encode more than 254 levels, which is part of the test
    _post_and_check(fuzz_gateway, fuzz_account, http, path, json.dumps(body).encode())


# -- names that are not strings: enum-like fields with arbitrary JSON, on every family ------------
#
# Each body is one every model accepts, with one of the fields that a translation (or the
# provider) reads as a name replaced by arbitrary JSON: a list where an effort, a role, a part
# type or an audio format is expected once reached a dict lookup as is (a TypeError, a 500).
# Tool schemas refer to their $defs, whose entries and $refs are drawn too.

ENUM_MODELS = ["gpt-4.1-mini", "claude-haiku-4-5", "gemini-2.5-flash", "deepseek-chat"]
names = st.sampled_from(["high", "low", "none", "auto", "required", "user", "assistant", "text", "function", "wav",
                         "json_schema", "image", "base64", "enabled", "#/$defs/a", ""])
odd = st.one_of(names, st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2, 2), names),
                                    lambda inner: st.one_of(st.lists(inner, max_size=2),
                                                            st.dictionaries(names, inner, max_size=2)),
                                    max_leaves=4))


def _schema() -> dict:
    return {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}, "b": {"type": "string"}},
            "$defs": {"a": {"type": "string", "enum": ["x", "y"]}}}


def _chat_base(model: str) -> dict:
    audio = model.startswith("gemini")  # only Gemini takes audio input; the others refuse it
    parts = [{"type": "text", "text": "hi"},
             {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}]
    if audio:
        parts.append({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}})
    return {"model": model, "max_tokens": 2048, "reasoning_effort": "low", "tool_choice": "auto",
            "messages": [{"role": "user", "content": parts}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": _schema()}}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": _schema()}}}


def _responses_base(model: str) -> dict:
    return {"model": model, "max_output_tokens": 2048, "reasoning": {"effort": "low"}, "tool_choice": "auto",
            "input": [{"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "hi"},
                {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"}]}],
            "tools": [{"type": "function", "name": "f", "parameters": _schema()}],
            "text": {"format": {"type": "json_schema", "name": "r", "schema": _schema()}}}


def _messages_base(model: str) -> dict:
    return {"model": model, "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024},
            "tool_choice": {"type": "auto"}, "tools": [{"name": "f", "input_schema": _schema()}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "hi"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]}


SCHEMA_SPOTS = [("$defs", "a"), ("$defs", "a", "type"), ("$defs", "a", "enum"), ("properties", "a", "$ref"),
                ("properties", "b", "type"), ("$defs",)]
ENUM_SPOTS = {
    "/v1/chat/completions": (_chat_base, [
        ("reasoning_effort",), ("tool_choice",), ("messages", 0, "role"), ("messages", 0, "content", 0, "type"),
        ("messages", 0, "content", 1, "type"), ("messages", 0, "content", 1, "image_url", "detail"),
        ("messages", 0, "content", -1, "input_audio", "format"), ("response_format", "type"),
        ("tools", 0, "type"),
        *(("tools", 0, "function", "parameters", *spot) for spot in SCHEMA_SPOTS),
        *(("response_format", "json_schema", "schema", *spot) for spot in SCHEMA_SPOTS)]),
    "/v1/responses": (_responses_base, [
        ("reasoning", "effort"), ("tool_choice",), ("input", 0, "role"), ("input", 0, "type"),
        ("input", 0, "content", 0, "type"), ("input", 0, "content", 1, "type"), ("input", 0, "content", 1, "detail"),
        ("text", "format", "type"), ("tools", 0, "type"),
        *(("tools", 0, "parameters", *spot) for spot in SCHEMA_SPOTS),
        *(("text", "format", "schema", *spot) for spot in SCHEMA_SPOTS)]),
    "/v1/messages": (_messages_base, [
        ("thinking", "type"), ("tool_choice", "type"), ("messages", 0, "role"), ("messages", 0, "content", 0, "type"),
        ("messages", 0, "content", 1, "type"), ("messages", 0, "content", 1, "source", "type"),
        ("messages", 0, "content", 1, "source", "media_type"),
        *(("tools", 0, "input_schema", *spot) for spot in SCHEMA_SPOTS)]),
}


def _broken(path: str, model: str, spot: tuple, value) -> tuple[str, dict]:
    base, _ = ENUM_SPOTS[path]
    if "input_audio" in spot:
        model = "gemini-2.5-flash"  # the one family whose bodies carry audio
    body = base(model)
    node = body
    for step in spot[:-1]:
        node = node[step]
    node[spot[-1]] = value
    return path, body


enum_cases = st.sampled_from(sorted(ENUM_SPOTS)).flatmap(lambda path: st.builds(
    _broken, st.just(path), st.sampled_from(ENUM_MODELS), st.sampled_from(ENUM_SPOTS[path][1]), odd))


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(case=enum_cases)
def test_any_json_where_a_name_is_expected_on_every_family(fuzz_gateway, fuzz_account, http, case):
    path, body = case
    _post_and_check(fuzz_gateway, fuzz_account, http, path, orjson.dumps(body))
