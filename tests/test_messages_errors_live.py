"""Error shapes on POST /v1/messages (issue 8 item 5), live against the simulator.

Gateway checks (key, IP, model list, availability, balance) answer in the chat envelope
like on every endpoint; once the request reaches the model step (body checks, provider
errors, gateway-made provider failures) the messages shape
``{"type": "error", "error": {"type", "message"}}`` with Anthropic's type for the status.
Nothing is ever charged for an error that happens before the model produced anything.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from gatewayd import tokens
from tests.live import Daemon, unique_email

PAID = 10_000_000_000
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                   529: "overloaded_error"}


def post(url, body, headers=None, path="/v1/messages") -> httpx.Response:
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(url + path, content=content, headers={"content-type": "application/json", **(headers or {})},
                      timeout=30)


def request(text="hi", **extra) -> dict:
    return {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": text}], **extra}


def assert_chat_envelope(r: httpx.Response, status: int, code: str, starts: str = "") -> None:
    assert r.status_code == status, r.text
    doc = r.json()
    assert set(doc) == {"error"}, doc
    error = doc["error"]
    assert error["code"] == code
    assert error["message"].startswith(starts)
    assert error["message"].endswith(f"(request id: {r.headers['x-request-id']})")


def assert_messages_shape(r: httpx.Response, status: int, fragment: str = "") -> dict:
    assert r.status_code == status, r.text
    doc = r.json()
    assert set(doc) == {"type", "error"} and doc["type"] == "error", doc
    assert set(doc["error"]) == {"type", "message"}
    assert doc["error"]["type"] == ANTHROPIC_TYPES.get(status, "api_error")
    assert fragment in doc["error"]["message"]
    return doc["error"]


def assert_nothing_charged(gateway, account) -> None:
    assert gateway.admin.balance(account["id"]) == {"balance_nano": PAID, "held_nano": 0, "total_paid_nano": PAID}


# -- gateway checks: the chat envelope -------------------------------------------------------------


@pytest.mark.parametrize("headers", [
    {},
    {"x-api-key": "sk-not-a-real-key"},
    {"authorization": "Bearer sk-not-a-real-key"},
    {"x-api-key": ""},
])
def test_bad_key_is_the_same_401_in_the_chat_envelope(gateway, headers):
    r = post(gateway.url, b"{not even json", headers)  # the key is checked before the body
    assert_chat_envelope(r, 401, "", "Invalid token")
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_model_not_on_the_keys_list_403(gateway, funded):
    account, _, _ = funded
    secret = gateway.admin.key(account["id"], models=["claude-haiku-4-5"])["secret"]
    assert_chat_envelope(post(gateway.url, request(), {"x-api-key": secret}), 403, "",
                         "This token has no access to model claude-sonnet-4-5")
    assert_nothing_charged(gateway, account)


def test_ip_not_allowed_403(gateway, funded):
    account, _, _ = funded
    secret = gateway.admin.key(account["id"], allow_ips=["10.9.8.0/24"])["secret"]
    assert_chat_envelope(post(gateway.url, request(), {"x-api-key": secret}), 403, "access_denied")
    assert_nothing_charged(gateway, account)


def test_unknown_model_503(gateway, funded):
    account, _, secret = funded
    r = post(gateway.url, request(model="claude-nope-9"), {"x-api-key": secret})
    assert_chat_envelope(r, 503, "model_not_found")
    assert "claude-nope-9" in r.json()["error"]["message"]
    assert_nothing_charged(gateway, account)


def test_models_not_visible_before_3_dollars_paid(gateway):
    account = gateway.admin.account(unique_email(), paid_usd=None)
    secret = gateway.admin.key(account["id"])["secret"]
    assert_chat_envelope(post(gateway.url, request(), {"x-api-key": secret}), 503, "model_not_found")


def test_balance_too_low_403_nothing_charged(gateway):
    account = gateway.admin.account(unique_email(), paid_usd="3.00")
    secret = gateway.admin.key(account["id"])["secret"]
    # a cap above the model's maximum is lowered to it (64,000 tokens, $0.96): 20 web searches,
    # each a model pass over the prompt, the results and the answer so far, need $16 held
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 20}
    r = post(gateway.url, request(max_tokens=1_000_000, tools=[search]), {"x-api-key": secret})
    assert_chat_envelope(r, 403, "insufficient_user_quota")
    assert gateway.admin.balance(account["id"]) == {"balance_nano": 3_000_000_000, "held_nano": 0,
                                                     "total_paid_nano": 3_000_000_000}
    # Claude Code's max_tokens of 32000 ($0.48 held) fits
    assert post(gateway.url, request(max_tokens=32000), {"x-api-key": secret}).status_code == 200


# -- the model step: the messages shape ------------------------------------------------------------


@pytest.mark.parametrize("raw,fragment", [
    (b"{not json", "not valid JSON"),
    (b"", "empty"),
    (b"[1, 2]", "JSON object"),
    ({"max_tokens": 10, "messages": []}, "'model'"),
    ({"model": 7, "max_tokens": 10, "messages": []}, "'model'"),
    ({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "x"}]}, "'max_tokens'"),
    ({"model": "claude-sonnet-4-5", "max_tokens": 0, "messages": []}, "'max_tokens'"),
    ({"model": "claude-sonnet-4-5", "max_tokens": "100", "messages": []}, "'max_tokens'"),
    ({"model": "claude-sonnet-4-5", "max_tokens": True, "messages": []}, "'max_tokens'"),
    ({"model": "claude-sonnet-4-5", "max_tokens": 10}, "'messages'"),
    ({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": "hello"}, "'messages'"),
    ({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [], "stream": "yes"}, "'stream'"),
])
def test_body_errors_in_the_messages_shape(gateway, funded, raw, fragment):
    account, _, secret = funded
    r = post(gateway.url, raw, {"x-api-key": secret})
    error = assert_messages_shape(r, 400, fragment)
    assert error["message"].endswith(f"(request id: {r.headers['x-request-id']})")
    assert_nothing_charged(gateway, account)
    assert gateway.admin.usage(account["id"]) == []


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 429, 500, 529])
def test_upstream_errors_keep_status_and_message(gateway, funded, status):
    account, _, secret = funded
    r = post(gateway.url, request(f"[[sim:fault=status:{status}]]"), {"x-api-key": secret})
    assert_messages_shape(r, status, f"simulated error {status}")
    if status == 429:
        assert r.headers["retry-after"] == "7"
    [row] = gateway.admin.usage(account["id"])
    assert (row["status"], row["http_status"], row["cost_nano"]) == ("upstream_error", status, 0)
    assert_nothing_charged(gateway, account)


@pytest.mark.parametrize("status,error_class", [(529, anthropic.APIStatusError), (429, anthropic.RateLimitError)])
def test_sdk_sees_upstream_overload_and_throttling(gateway, funded, status, error_class):
    _, _, secret = funded
    c = anthropic.Anthropic(base_url=gateway.url, api_key=secret, max_retries=0)
    with pytest.raises(error_class) as info:
        c.messages.create(model="claude-sonnet-4-5", max_tokens=50,
                          messages=[{"role": "user", "content": f"[[sim:fault=status:{status}]]"}])
    assert info.value.status_code == status
    assert info.value.body["error"]["type"] == ANTHROPIC_TYPES[status]


def test_invalid_provider_response_is_a_502_in_the_messages_shape(gateway, funded):
    account, _, secret = funded
    r = post(gateway.url, request("[[sim:fault=invalid_json]]"), {"x-api-key": secret})
    assert_messages_shape(r, 502, "invalid response")
    assert r.json()["error"]["message"].endswith(f"(request id: {r.headers['x-request-id']})")
    assert_nothing_charged(gateway, account)


def test_provider_disconnect_is_a_502_in_the_messages_shape(gateway, funded):
    account, _, secret = funded
    r = post(gateway.url, request("[[sim:fault=disconnect]]"), {"x-api-key": secret})
    assert_messages_shape(r, 502, "could not be reached")
    assert_nothing_charged(gateway, account)


# -- errors mid-stream -----------------------------------------------------------------------------


def _events(raw: bytes) -> list[tuple[str | None, dict]]:
    out = []
    for block in raw.split(b"\n\n"):
        if block.strip():
            lines = block.split(b"\n")
            name = next((ln[7:].decode() for ln in lines if ln.startswith(b"event: ")), None)
            data = b"".join(ln[6:] for ln in lines if ln.startswith(b"data: "))
            out.append((name, json.loads(data)))
    return out


def test_upstream_error_event_mid_stream_reaches_the_client(gateway, funded):
    account, _, secret = funded
    r = post(gateway.url, request("[[sim:fault=error_after:3]] [[sim:words=20]]", stream=True), {"x-api-key": secret})
    assert r.status_code == 200
    events = _events(r.content)
    assert events[-1] == ("error", {"type": "error", "error": {"type": "overloaded_error",
                                                                "message": "simulated mid-stream error"}})
    assert "message_stop" not in [name for name, _ in events]
    deltas = [d for name, d in events if name == "content_block_delta"]
    assert len(deltas) == 3
    [row] = gateway.admin.usage(account["id"])
    assert (row["status"], row["stream"]) == ("upstream_error", True)
    # billed for the input and what it produced (counted offline: the provider never said), nothing more
    input_tokens = events[0][1]["message"]["usage"]["input_tokens"]
    produced = tokens.count("".join(d["delta"]["text"] for d in deltas), "claude")
    assert (row["input_tokens"], row["output_tokens"]) == (input_tokens, produced)
    assert row["cost_nano"] == input_tokens * 3000 + produced * 15000


def test_sdk_stream_raises_on_a_mid_stream_error(gateway, funded):
    _, _, secret = funded
    c = anthropic.Anthropic(base_url=gateway.url, api_key=secret, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as info:
        with c.messages.stream(model="claude-sonnet-4-5", max_tokens=100,
                               messages=[{"role": "user", "content": "[[sim:fault=error_after:2]] hello"}]) as s:
            s.get_final_message()
    assert "simulated mid-stream error" in str(info.value)


def test_provider_dropping_the_stream_gives_an_error_event(gateway, funded):
    account, _, secret = funded
    r = post(gateway.url, request("[[sim:fault=drop_after:2]] [[sim:words=10]]", stream=True), {"x-api-key": secret})
    assert r.status_code == 200
    name, data = _events(r.content)[-1]
    assert name == "error" and data["type"] == "error" and data["error"]["type"] == "api_error"
    assert "incomplete" in data["error"]["message"]
    [row] = gateway.admin.usage(account["id"])
    assert row["status"] == "upstream_broken" and row["output_tokens"] == tokens.count("w1 w2 ", "claude")


def test_idle_provider_stream_is_cut_with_a_timeout_error_event(sim, tmp_path):
    daemon = Daemon(tmp_path, sim.url, server="stream_idle_timeout_s = 1\n")
    try:
        account = daemon.admin.account(unique_email())
        secret = daemon.admin.key(account["id"])["secret"]
        r = post(daemon.url, request("[[sim:fault=stall_after:2]] [[sim:words=10]]", stream=True),
                 {"x-api-key": secret})
        assert r.status_code == 200
        name, data = _events(r.content)[-1]
        assert (name, data["type"], data["error"]["type"]) == ("error", "error", "timeout_error")
        [row] = daemon.admin.usage(account["id"])
        assert row["status"] == "idle_timeout" and row["output_tokens"] == tokens.count("w1 w2 ", "claude")
    finally:
        daemon.stop()
