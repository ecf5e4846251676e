"""The exploit rows of issue 19 that the request side closes, over loopback: the official
SDKs (or raw HTTP) -> gatewayd -> the simulator. Each asserts what reached the simulator and
what the account was charged."""

from __future__ import annotations

import uuid

import anthropic
import httpx
import openai

from tests.live import unique_email

START = {"balance_nano": 3_000_000_000, "held_nano": 0, "total_paid_nano": 3_000_000_000}


def _account(gateway):
    account = gateway.admin.account(unique_email(), paid_usd="3.00")
    return account, gateway.admin.key(account["id"])["secret"]


def test_n_128_is_held_for_every_choice(gateway):
    """n=128 x max_tokens 32768 on gpt-4.1 is $33.55 of output: refused on a $3 balance."""
    account, secret = _account(gateway)
    r = httpx.post(gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                   json={"model": "gpt-4.1", "n": 128, "max_tokens": 32768,
                         "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "insufficient_user_quota"
    assert gateway.admin.balance(account["id"]) == START


def test_messages_with_a_chat_cap_field_is_refused_before_the_provider(gateway, sim):
    account, secret = _account(gateway)
    marker = uuid.uuid4().hex
    r = httpx.post(gateway.url + "/v1/messages", headers={"x-api-key": secret, "anthropic-version": "2023-06-01"},
                   json={"model": "claude-haiku-4-5", "max_tokens": 60000, "max_completion_tokens": 1,
                         "messages": [{"role": "user", "content": marker}]})
    assert r.status_code == 400, r.text
    doc = r.json()
    assert doc["type"] == "error" and "max_completion_tokens" in doc["error"]["message"]
    assert sim.requests(marker) == []
    assert gateway.admin.balance(account["id"]) == START


def test_a_128000_cap_is_lowered_to_the_model_maximum(gateway, sim):
    account, secret = _account(gateway)
    marker = uuid.uuid4().hex
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)
    reply = client.chat.completions.create(model="gpt-4.1-mini", max_tokens=128000,
                                           messages=[{"role": "user", "content": marker}])
    received = sim.last_request(marker)["body"]
    assert '"max_tokens":32768' in received.replace(" ", "")
    [row] = gateway.admin.usage(account["id"])
    assert row["output_tokens"] == reply.usage.completion_tokens and row["cost_nano"] > 0
    assert gateway.admin.balance(account["id"])["held_nano"] == 0


def test_without_a_cap_the_held_cap_is_sent(gateway, sim):
    _, secret = _account(gateway)
    marker = uuid.uuid4().hex
    client = anthropic.Anthropic(base_url=gateway.url, api_key=secret, max_retries=0)
    client.messages.create(model="claude-haiku-4-5", max_tokens=100, messages=[{"role": "user", "content": marker}],
                           tools=[{"type": "web_search_20250305", "name": "web_search"}])
    received = sim.last_request(marker)["body"]
    assert '"max_uses":5' in received


def test_an_unpriced_tier_is_refused_and_nothing_charged(gateway, sim):
    account, secret = _account(gateway)
    marker = uuid.uuid4().hex
    r = httpx.post(gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                   json={"model": "gpt-4.1-mini", "service_tier": "flex",
                         "messages": [{"role": "user", "content": marker}]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "unpriced_feature" and "flex" in error["message"]
    assert sim.requests(marker) == []
    assert gateway.admin.balance(account["id"]) == START
    assert all(row["cost_nano"] == 0 for row in gateway.admin.usage(account["id"]))
