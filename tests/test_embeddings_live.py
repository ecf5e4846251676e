"""POST /v1/embeddings end to end: the official openai SDK -> gatewayd -> simulator.

An embedding model is usable only once enabled for the account (``gatewayctl account
embeddings ACCOUNT MODEL --enable``); before that it is refused like an unknown model and
not listed. The vectors must be the simulator's (``sim_embedding``), whichever encoding
the client asked for, and the charge is prompt tokens x the model's input rate, exactly.
"""

from __future__ import annotations

import base64
import json
import struct
import subprocess

import httpx
import openai
import orjson
import pytest

from gatewayd.formats.embeddings import convert_embeddings as _convert_embeddings
from gatewayd.sim.embeddings import DEFAULT_DIMENSIONS, encode_base64, sim_embedding
from tests.live import BIN

SMALL = "text-embedding-3-small"
SMALL_RATE = 20  # $0.02 per 1M tokens = 20 nano-dollars per token
LARGE_RATE = 130
START = 10_000_000_000


def client(gateway, secret) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)


def enable(gateway, account, model=SMALL, enabled=True):
    gateway.admin.call("PUT", f"/accounts/{account['id']}/embeddings/{model}", {"enabled": enabled})


@pytest.fixture
def embedder(gateway, funded):
    """A funded account with text-embedding-3-small enabled: (account, key, secret)."""
    enable(gateway, funded[0])
    return funded


def assert_billed(gateway, account, usage, model=SMALL, rate=SMALL_RATE) -> None:
    row = gateway.admin.usage(account["id"], limit=1)[0]
    assert (row["model"], row["endpoint"], row["stream"], row["status"]) == (model, "embeddings", False, "ok")
    assert (row["input_tokens"], row["output_tokens"]) == (usage.prompt_tokens, 0)
    assert row["cost_nano"] == usage.prompt_tokens * rate


def spent(gateway, account) -> int:
    balance = gateway.admin.balance(account["id"])
    assert balance["held_nano"] == 0
    return START - balance["balance_nano"]


def listed(gateway, secret) -> list[str]:
    return [m.id for m in client(gateway, secret).models.list()]


# -- enabling --------------------------------------------------------------------------


def test_refused_and_unlisted_until_enabled_with_gatewayctl(gateway, sim, funded):
    account, _, secret = funded
    with pytest.raises(openai.InternalServerError) as caught:  # the SDK's class for 5xx
        client(gateway, secret).embeddings.create(model=SMALL, input="before-enabling-4e1")
    error = caught.value
    assert error.status_code == 503 and error.body["code"] == "model_not_found"
    assert SMALL in error.body["message"]
    assert sim.requests("before-enabling-4e1") == []
    assert SMALL not in listed(gateway, secret)
    assert spent(gateway, account) == 0 and gateway.admin.usage(account["id"]) == []

    done = subprocess.run(
        [str(BIN / "gatewayctl"), "account", "embeddings", account["email"], SMALL, "--enable",
         "--socket", gateway.socket, "--json"],
        capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert SMALL in json.loads(done.stdout)["embedding_models"]

    ids = listed(gateway, secret)
    assert SMALL in ids and "text-embedding-3-large" not in ids
    result = client(gateway, secret).embeddings.create(model=SMALL, input="after enabling")
    assert result.data[0].embedding == sim_embedding("after enabling", DEFAULT_DIMENSIONS)
    assert_billed(gateway, account, result.usage)

    enable(gateway, account, enabled=False)
    assert SMALL not in listed(gateway, secret)
    with pytest.raises(openai.InternalServerError):
        client(gateway, secret).embeddings.create(model=SMALL, input="disabled again")


def test_enabling_one_model_does_not_enable_the_other(gateway, embedder):
    _, _, secret = embedder
    with pytest.raises(openai.InternalServerError) as caught:
        client(gateway, secret).embeddings.create(model="text-embedding-3-large", input="x")
    assert caught.value.body["code"] == "model_not_found"


# -- encodings and vectors ---------------------------------------------------------------


def test_sdk_default_base64_decodes_to_the_simulators_vectors(gateway, sim, embedder):
    account, _, secret = embedder
    texts = ["first text b64-7a2", "second, a bit longer text"]
    result = client(gateway, secret).embeddings.create(model=SMALL, input=texts)
    assert sim.last_request("b64-7a2")["json"]["encoding_format"] == "base64"  # the SDK's default
    assert [d.index for d in result.data] == [0, 1]
    assert [d.embedding for d in result.data] == [sim_embedding(t, DEFAULT_DIMENSIONS) for t in texts]
    assert result.model == SMALL and result.object == "list"
    assert result.usage.prompt_tokens == 3 + 5
    assert_billed(gateway, account, result.usage)
    assert spent(gateway, account) == 8 * SMALL_RATE


def test_float_encoding(gateway, embedder):
    account, _, secret = embedder
    result = client(gateway, secret).embeddings.create(model=SMALL, input="float please", encoding_format="float")
    assert result.data[0].embedding == sim_embedding("float please", DEFAULT_DIMENSIONS)
    assert_billed(gateway, account, result.usage)


@pytest.mark.parametrize("encoding", ["float", "base64", None])
def test_wire_shape_is_what_the_client_asked_for(gateway, embedder, encoding):
    _, _, secret = embedder
    body = {"model": SMALL, "input": ["wire shape"]}
    if encoding:
        body["encoding_format"] = encoding
    r = httpx.post(gateway.url + "/v1/embeddings", json=body, headers={"authorization": f"Bearer {secret}"})
    assert r.status_code == 200, r.text
    doc = r.json()
    vector = sim_embedding("wire shape", DEFAULT_DIMENSIONS)
    assert doc["object"] == "list" and doc["model"] == SMALL
    assert doc["usage"] == {"prompt_tokens": 2, "total_tokens": 2}
    [item] = doc["data"]
    assert (item["object"], item["index"]) == ("embedding", 0)
    if encoding == "base64":
        assert item["embedding"] == encode_base64(vector)
    else:  # float, and the API's default when encoding_format is absent
        assert item["embedding"] == vector


@pytest.mark.parametrize("dims", [3, 64, 1536])
def test_dimensions(gateway, sim, embedder, dims):
    _, _, secret = embedder
    text = f"dims-{dims}"
    result = client(gateway, secret).embeddings.create(model=SMALL, input=text, dimensions=dims)
    assert sim.last_request(text)["json"]["dimensions"] == dims
    assert len(result.data[0].embedding) == dims
    assert result.data[0].embedding == sim_embedding(text, dims)


def test_string_input(gateway, sim, embedder):
    account, _, secret = embedder
    result = client(gateway, secret).embeddings.create(model=SMALL, input="one single string input-s1")
    assert sim.last_request("input-s1")["json"]["input"] == "one single string input-s1"
    assert len(result.data) == 1
    assert result.data[0].embedding == sim_embedding("one single string input-s1")
    assert result.usage.prompt_tokens == 4
    assert_billed(gateway, account, result.usage)


def test_token_array_inputs(gateway, embedder):
    account, _, secret = embedder
    result = client(gateway, secret).embeddings.create(model=SMALL, input=[[1, 2, 3], [40, 50]])
    assert [d.embedding for d in result.data] == [sim_embedding("1 2 3"), sim_embedding("40 50")]
    assert result.usage.prompt_tokens == 5
    assert_billed(gateway, account, result.usage)


def test_large_model_billed_at_its_own_rate(gateway, funded):
    account, _, secret = funded
    enable(gateway, account, "text-embedding-3-large")
    result = client(gateway, secret).embeddings.create(model="text-embedding-3-large", input="a b c d e f g")
    assert result.usage.prompt_tokens == 7
    assert_billed(gateway, account, result.usage, "text-embedding-3-large", LARGE_RATE)
    assert spent(gateway, account) == 7 * LARGE_RATE


async def test_async_client(gateway, embedder):
    _, _, secret = embedder
    c = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)
    result = await c.embeddings.create(model=SMALL, input=["async one", "async two"])
    await c.close()
    assert [d.embedding for d in result.data] == [sim_embedding("async one"), sim_embedding("async two")]


# -- refusals ----------------------------------------------------------------------------


def _post(gateway, secret, path, body):
    return httpx.post(gateway.url + path, json=body, headers={"authorization": f"Bearer {secret}"})


def assert_clear_400(r, *, param: str | None, mentions: str) -> dict:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert mentions in error["message"]
    assert error["message"].endswith(f"(request id: {r.headers['x-request-id']})")
    return error


def test_chat_model_on_embeddings_is_a_clear_400(gateway, sim, embedder):
    account, _, secret = embedder
    with pytest.raises(openai.BadRequestError) as caught:
        client(gateway, secret).embeddings.create(model="gpt-4.1-mini", input="chat-on-embeddings-0c")
    assert (caught.value.body["param"], caught.value.body["code"]) == ("model", "invalid_model")
    assert "chat model" in caught.value.body["message"] and "/v1/embeddings" in caught.value.body["message"]
    assert sim.requests("chat-on-embeddings-0c") == []
    assert spent(gateway, account) == 0 and gateway.admin.usage(account["id"]) == []


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "embed-on-chat-5d"}]}),
    ("/v1/responses", {"input": "embed-on-chat-5d"}),
])
def test_embedding_model_on_chat_endpoints_is_a_clear_400(gateway, sim, embedder, path, body):
    account, _, secret = embedder
    r = _post(gateway, secret, path, {"model": SMALL, **body})
    error = assert_clear_400(r, param="model", mentions="embedding model")
    assert "/v1/embeddings" in error["message"]
    assert sim.requests("embed-on-chat-5d") == []
    assert spent(gateway, account) == 0 and gateway.admin.usage(account["id"]) == []


def test_embedding_model_on_chat_via_sdk(gateway, embedder):
    _, _, secret = embedder
    with pytest.raises(openai.BadRequestError) as caught:
        client(gateway, secret).chat.completions.create(model=SMALL, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body["param"] == "model"


def test_embedding_model_on_messages_is_a_clear_400(gateway, embedder):
    """A gateway check before the model is called (which envelope: the messages tests' business)."""
    _, _, secret = embedder
    r = httpx.post(gateway.url + "/v1/messages", headers={"x-api-key": secret, "anthropic-version": "2023-06-01"},
                   json={"model": SMALL, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400, r.text
    assert "embedding model" in r.json()["error"]["message"]


@pytest.mark.parametrize("body,param", [
    ({"model": SMALL}, "input"),
    ({"model": SMALL, "input": []}, "input"),
    ({"model": SMALL, "input": 5}, "input"),
    ({"model": SMALL, "input": ["ok", 5]}, "input"),
    ({"model": SMALL, "input": [[]]}, "input"),
    ({"model": SMALL, "input": [True]}, "input"),
    ({"model": SMALL, "input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"model": SMALL, "input": "x", "dimensions": 0}, "dimensions"),
    ({"model": SMALL, "input": "x", "dimensions": "8"}, "dimensions"),
    ({"input": "x"}, "model"),
])
def test_bad_bodies_are_clear_400s(gateway, embedder, body, param):
    account, _, secret = embedder
    r = _post(gateway, secret, "/v1/embeddings", body)
    assert_clear_400(r, param=param, mentions=param)
    assert spent(gateway, account) == 0


def test_upstream_error_passed_through_and_not_charged(gateway, embedder):
    account, _, secret = embedder
    with pytest.raises(openai.RateLimitError) as caught:
        client(gateway, secret).embeddings.create(model=SMALL, input="busy [[sim:fault=status:429]]")
    assert caught.value.status_code == 429
    assert spent(gateway, account) == 0
    assert gateway.admin.usage(account["id"], limit=1)[0]["cost_nano"] == 0


def test_invalid_upstream_json_is_502_and_not_charged(gateway, embedder):
    account, _, secret = embedder
    r = _post(gateway, secret, "/v1/embeddings", {"model": SMALL, "input": "bad [[sim:fault=invalid_json]]"})
    assert r.status_code == 502 and r.json()["error"]["code"] == "bad_gateway"
    assert spent(gateway, account) == 0


# -- the conversion, when the upstream answered in the other encoding (unit) ----------------


def _upstream(embeddings: list) -> bytes:
    return orjson.dumps({"object": "list", "model": SMALL, "usage": {"prompt_tokens": 2, "total_tokens": 2},
                         "data": [{"object": "embedding", "index": i, "embedding": e}
                                  for i, e in enumerate(embeddings)]})


def test_convert_floats_to_base64():
    vectors = [sim_embedding("a"), sim_embedding("b", 5)]
    doc = orjson.loads(_convert_embeddings(_upstream(vectors), "base64"))
    assert [d["embedding"] for d in doc["data"]] == [encode_base64(v) for v in vectors]
    assert doc["usage"] == {"prompt_tokens": 2, "total_tokens": 2} and doc["model"] == SMALL
    decoded = base64.b64decode(doc["data"][1]["embedding"])
    assert list(struct.unpack("<5f", decoded)) == vectors[1]


def test_convert_base64_to_floats():
    vectors = [sim_embedding("a"), sim_embedding("b", 3)]
    doc = orjson.loads(_convert_embeddings(_upstream([encode_base64(v) for v in vectors]), "float"))
    assert [d["embedding"] for d in doc["data"]] == vectors


@pytest.mark.parametrize("wanted", ["float", "base64"])
def test_no_conversion_keeps_the_upstream_bytes(wanted):
    vector = sim_embedding("same")
    raw = _upstream([vector if wanted == "float" else encode_base64(vector)])
    assert _convert_embeddings(raw, wanted) is raw
