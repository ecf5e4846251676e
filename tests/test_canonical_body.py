"""One canonical body, and every billable thing priced or refused (issue 30, points 3 and 4).

Through the whole in-process gateway (tests/inproc.py, a real SQLite file): what the provider
receives is what the hold priced; a field given twice (in any spelling, at any depth) or of the
wrong type is a 400 in the client's envelope, never a 500; a billable reference no price can
bound (a Gemini context cache, a stored or remote file, Anthropic's MCP connector) is a 400
``unpriced_feature`` naming the field, before any provider is called. The property tests over
generated bodies are in tests/test_canonical_property.py.
"""

from __future__ import annotations

import httpx
import orjson
import pytest
import trio

from gatewayd.formats.errors import TranslationError
from gatewayd.formats.gemini_body import camel, canonical_gemini
from gatewayd.formats.raw_json import duplicate_key
from gatewayd.formats.responses_socket import socket_event
from tests.inproc import Gateway

GEMINI_ANSWER = {"candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
                 "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4}}
MESSAGES_ANSWER = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                   "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
                   "usage": {"input_tokens": 3, "output_tokens": 1}}
GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
CONTENTS = [{"role": "user", "parts": [{"text": "hello"}]}]


@pytest.fixture
async def gw(tmp_path):
    calls: list[tuple[httpx.Request, int]] = []  # each upstream request, with the nano held when it went

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append((request, gw.ledger.held_nano))
        if "generateContent" in request.url.path:
            return httpx.Response(200, json=GEMINI_ANSWER)
        return httpx.Response(200, json=MESSAGES_ANSWER)

    gw = Gateway(tmp_path, handler)
    gw.calls = calls
    try:
        yield gw
    finally:
        await gw.aclose()


async def post(gw: Gateway, path: str, raw: bytes, headers: dict | None = None) -> tuple[httpx.Response, str]:
    account_id, secret = await gw.funded_key()
    with trio.fail_after(10):
        response = await gw.http.post(path, content=raw, headers={
            "authorization": f"Bearer {secret}", "content-type": "application/json", **(headers or {})})
    return response, account_id


async def refused(gw: Gateway, path: str, raw: bytes, headers: dict | None = None) -> dict:
    """A 400 that reached no provider, held and charged nothing; its error object."""
    response, account_id = await post(gw, path, raw, headers)
    assert response.status_code == 400, response.text[:500]
    assert gw.calls == [], "a refused body reached the provider"
    assert await gw.usage(account_id) == [], "a refused body left a usage row"
    account = gw.directory.accounts[account_id]
    assert account.held_nano == 0 and account.credit_nano == 10 * 10**9
    return response.json()["error"]


# -- the canonical form, as a function ---------------------------------------------------------


def test_camel_is_the_proto_json_name():
    assert camel("candidate_count") == "candidateCount"
    assert camel("max_output_tokens") == "maxOutputTokens"
    assert camel("candidateCount") == "candidateCount"


def test_snake_case_fields_are_renamed_at_every_level_and_client_data_is_not():
    body = {"contents": [{"role": "user", "parts": [{"function_call": {"name": "f", "args": {"snake_key": 1}}}]}],
            "generation_config": {"candidate_count": 2, "thinking_config": {"thinking_budget": 10},
                                  "response_json_schema": {"properties": {"user_id": {"type": "string"}}}},
            "tools": [{"function_declarations": [{"name": "f", "parameters": {
                "type": "OBJECT", "properties": {"file_path": {"type": "STRING", "max_length": 3}}}}]}],
            "system_instruction": {"parts": [{"text": "be brief"}]}, "cached_content": "cachedContents/x"}
    canonical, changed = canonical_gemini(body)
    assert changed
    assert canonical["generationConfig"] == {"candidateCount": 2, "thinkingConfig": {"thinkingBudget": 10},
                                             "responseJsonSchema": {"properties": {"user_id": {"type": "string"}}}}
    assert canonical["contents"][0]["parts"][0] == {"functionCall": {"name": "f", "args": {"snake_key": 1}}}
    prop = canonical["tools"][0]["functionDeclarations"][0]["parameters"]["properties"]
    assert prop == {"file_path": {"type": "STRING", "maxLength": 3}}  # a property's name is data
    assert canonical["cachedContent"] == "cachedContents/x" and "systemInstruction" in canonical
    same, changed = canonical_gemini({"contents": CONTENTS, "generationConfig": {"candidateCount": 2}})
    assert not changed and same == {"contents": CONTENTS, "generationConfig": {"candidateCount": 2}}


@pytest.mark.parametrize(("body", "param"), [
    ({"generationConfig": {"candidateCount": 1, "candidate_count": 8}}, "generationConfig.candidateCount"),
    ({"generationConfig": {}, "generation_config": {}}, "generationConfig"),
    ({"tools": [{"googleSearch": {}, "google_search": {}}]}, "tools[0].googleSearch"),
    ({"generationConfig": "8"}, "generationConfig"),
    ({"generationConfig": {"candidateCount": "8"}}, "generationConfig.candidateCount"),
    ({"generationConfig": {"maxOutputTokens": 1.5}}, "generationConfig.maxOutputTokens"),
    ({"tools": {"googleSearch": {}}}, "tools"),
    ({"tools": ["googleSearch"]}, "tools[0]"),
    ({"contents": [{"parts": [{"fileData": "gs://b/x"}]}]}, "contents[0].parts[0].fileData"),
])
def test_twice_or_of_the_wrong_type_is_the_clients_error(body, param):
    with pytest.raises(TranslationError) as caught:
        canonical_gemini({"contents": CONTENTS, **body})
    assert caught.value.param == param


def test_duplicate_keys_are_found_at_any_depth():
    raw = b'{"contents": [], "generationConfig": {"candidateCount": 1, "candidateCount": 8}}'
    assert duplicate_key(raw, orjson.loads(raw)) == ("candidateCount", "generationConfig.candidateCount")
    raw = b'{"tools":[{"type":"web_search_20250305","max_uses":1,"max_uses":99}]}'
    assert duplicate_key(raw, orjson.loads(raw)) == ("max_uses", "tools[0].max_uses")
    raw = b'{"a": {"b": [1, {"c": 1}]}, "d": "x"}'
    assert duplicate_key(raw, orjson.loads(raw)) is None
    deep = '{"k": 1, "k": 2}'
    for _ in range(900):  # deeper than Python's recursion limit: the path is found without recursing
        deep = f"[{deep}]"
    raw = f'{{"a": {deep}}}'.encode()
    assert duplicate_key(raw, orjson.loads(raw)) == ("k", "a" + "[0]" * 900 + ".k")


def test_a_responses_websocket_message_with_a_key_twice_is_refused():
    with pytest.raises(TranslationError) as caught:
        socket_event('{"type":"response.create","model":"gpt-4.1","model":"claude-sonnet-4-5","input":"hi"}')
    assert caught.value.param == "model"
    with pytest.raises(TranslationError):
        socket_event('{"type":"response.create","model":"gpt-4.1","input":"hi",'
                     '"tools":[{"type":"web_search","type":"function"}]}')


# -- through the gateway -----------------------------------------------------------------------


async def test_n1_snake_case_candidate_count_is_held_and_sent_canonical(gw):
    """Attack N1: ``candidate_count: 8`` was not read by the hold and was forwarded."""
    raw = orjson.dumps({"contents": CONTENTS, "generationConfig": {"candidate_count": 8, "max_output_tokens": 1000}})
    response, _ = await post(gw, GENERATE, raw)
    assert response.status_code == 200, response.text
    [(request, held)] = gw.calls
    sent = orjson.loads(request.content)
    assert sent["generationConfig"] == {"candidateCount": 8, "maxOutputTokens": 1000}
    assert b"candidate_count" not in request.content and b"max_output_tokens" not in request.content
    model = gw.config.models["gemini-2.5-flash"]
    assert held >= 8 * 1000 * model.output_price  # every candidate's output is held


async def test_n1_eight_candidates_are_charged_within_the_hold_on_each_store(tmp_path, store):
    """The money of attack N1, settled on SQLite and PostgreSQL: the provider writes 8
    candidates at the cap; their charge stays within what was held, and the balance never goes
    below zero (it was -$1.80 on a $3 account)."""
    held: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        held.append(gw.ledger.held_nano)
        sent = orjson.loads(request.content)
        n, cap = sent["generationConfig"]["candidateCount"], sent["generationConfig"]["maxOutputTokens"]
        candidates = [{"index": i, "content": {"role": "model", "parts": [{"text": "x"}]}, "finishReason": "MAX_TOKENS"}
                      for i in range(n)]
        return httpx.Response(200, json={"candidates": candidates, "usageMetadata": {
            "promptTokenCount": 3, "candidatesTokenCount": n * cap, "totalTokenCount": 3 + n * cap}})

    gw = Gateway(tmp_path, handler, store=store)
    try:
        account_id, secret = await gw.funded_key(3)
        raw = orjson.dumps({"contents": CONTENTS, "generation_config": {"candidate_count": 8, "max_output_tokens": 20_000}})
        with trio.fail_after(20):
            response = await gw.http.post(GENERATE, content=raw, headers={"authorization": f"Bearer {secret}"})
        assert response.status_code == 200, response.text
        [row] = await gw.usage(account_id)
        model = gw.config.models["gemini-2.5-flash"]
        assert row["output_tokens"] == 8 * 20_000
        assert held[0] >= row["cost_nano"] >= 8 * 20_000 * model.output_price
        account = gw.directory.accounts[account_id]
        assert account.held_nano == 0 and account.credit_nano == 3 * 10**9 - row["cost_nano"] >= 0
    finally:
        await gw.aclose()


async def test_a_camelcase_body_passes_as_its_bytes(gw):
    raw = orjson.dumps({"contents": CONTENTS, "generationConfig": {"maxOutputTokens": 100, "candidateCount": 2}})
    response, _ = await post(gw, GENERATE, raw)
    assert response.status_code == 200, response.text
    assert gw.calls[0][0].content == raw


@pytest.mark.parametrize("raw", [
    b'{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"candidateCount":1,"candidateCount":8}}',
    b'{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"candidateCount":1,"candidate_count":8}}',
    b'{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":[8]}',
    b'{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"tools":"googleSearch"}',
    b'{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"tools":[{"googleSearch":{}},{"codeExecution":{},'
    b'"codeExecution":{}}]}',
], ids=["duplicate-key", "two-spellings", "config-not-object", "tools-not-array", "duplicate-in-tools"])
async def test_gemini_bodies_that_say_a_field_twice_or_wrongly_are_400_not_500(gw, raw):
    error = await refused(gw, GENERATE, raw)
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT", error


@pytest.mark.parametrize(("body", "field"), [
    ({"cachedContent": "cachedContents/abc"}, "cachedContent"),
    ({"cached_content": "cachedContents/abc"}, "cachedContent"),
    ({"contents": [{"role": "user", "parts": [{"fileData": {"fileUri": "gs://bucket/movie.mp4",
                                                            "mimeType": "video/mp4"}}]}]},
     "contents[0].parts[0].fileData.fileUri"),
    ({"contents": [{"role": "user", "parts": [{"file_data": {"file_uri":
        "https://generativelanguage.googleapis.com/v1beta/files/abc", "mime_type": "application/pdf"}}]}]},
     "contents[0].parts[0].fileData.fileUri"),
    ({"contents": [{"role": "user", "parts": [{"fileData": {"fileUri": "https://www.youtube.com/watch?v=x"}}]}]},
     "contents[0].parts[0].fileData.fileUri"),
    ({"contents": [{"role": "user", "parts": [{"fileData": {"fileUri": "https://example.com/a.mp3",
                                                            "mimeType": "audio/mpeg"}}]}]},
     "contents[0].parts[0].fileData.fileUri"),
    ({"contents": [{"role": "user", "parts": [{"function_response": {"name": "f", "response": {}, "parts": [
        {"file_data": {"file_uri": "gs://b/x.pdf", "mime_type": "application/pdf"}}]}}]}]},
     "contents[0].parts[0].functionResponse.parts[0].fileData.fileUri"),
])
async def test_gemini_caches_and_files_are_refused_as_unpriced(gw, body, field):
    error = await refused(gw, GENERATE, orjson.dumps({"contents": CONTENTS, **body}))
    assert "not priced" in error["message"] and field in error["message"], error
    assert error["details"][0]["reason"] == "unpriced_feature", error


async def test_a_public_image_url_still_passes(gw):
    body = {"contents": [{"role": "user", "parts": [{"text": "what is this"}, {"fileData": {
        "fileUri": "https://example.com/cat.png", "mimeType": "image/png"}}]}]}
    response, _ = await post(gw, GENERATE, orjson.dumps(body))
    assert response.status_code == 200, response.text


async def test_mcp_servers_on_messages_are_refused_as_unpriced(gw):
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
            "mcp_servers": [{"type": "url", "url": "https://mcp.example.com/sse", "name": "x"}]}
    error = await refused(gw, "/v1/messages", orjson.dumps(body), {"anthropic-version": "2023-06-01"})
    assert "mcp_servers" in error["message"] and "not priced" in error["message"], error


async def test_inference_geo_on_messages_is_refused_as_unpriced(gw):
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
            "inference_geo": "us"}
    error = await refused(gw, "/v1/messages", orjson.dumps(body), {"anthropic-version": "2023-06-01"})
    assert "inference_geo" in error["message"] and "not priced" in error["message"], error
    body["inference_geo"] = "global"  # the default: nothing to price
    response, _ = await post(gw, "/v1/messages", orjson.dumps(body), {"anthropic-version": "2023-06-01"})
    assert response.status_code == 200, response.text


async def test_nested_duplicate_keys_are_400_on_every_format(gw):
    error = await refused(gw, "/v1/messages", b'{"model":"claude-sonnet-4-5","max_tokens":100,'
                          b'"messages":[{"role":"user","content":"hi"}],'
                          b'"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":1,"max_uses":99}]}',
                          {"anthropic-version": "2023-06-01"})
    assert "max_uses" in error["message"], error
    error = await refused(gw, "/v1/chat/completions", b'{"model":"gpt-4.1","messages":[{"role":"user",'
                          b'"content":"hi","content":"bye"}]}')
    assert error["param"] == "messages[0].content", error


async def test_count_tokens_reads_either_spelling_alike(gw):
    account_id, secret = await gw.funded_key()
    counts = []
    for key in ("systemInstruction", "system_instruction"):
        body = {"contents": CONTENTS, key: {"parts": [{"text": "a long system prompt " * 50}]}}
        response = await gw.http.post("/v1beta/models/gemini-2.5-flash:countTokens", json=body,
                                      headers={"authorization": f"Bearer {secret}"})
        assert response.status_code == 200, response.text
        counts.append(response.json()["totalTokens"])
    assert counts[0] == counts[1] > 50
