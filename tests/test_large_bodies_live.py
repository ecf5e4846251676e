"""Large prompts (issue 15): a 1 MB body goes through pass-through (with the model id swapped
in its bytes) and translated routes intact, and is estimated and charged like a small one."""

from __future__ import annotations

import uuid

import httpx
import orjson

from tests.faults import assert_money_consistent, headers, new_account


def big_text(marker: str) -> str:
    return marker + " " + "the quick brown fox jumps over the lazy dog, \"quoted\" and caf\u00e9 " * 16000


def test_one_megabyte_pass_through_with_model_swap_keeps_every_other_byte(gateway, sim):
    _, _, secret = new_account(gateway)
    marker = "big-" + uuid.uuid4().hex[:10]
    # model after the messages (as the OpenAI SDK orders it), spacing a re-encoding would drop
    raw = (b'{"messages": [{"role": "user", "content": ' + orjson.dumps(big_text(marker))
           + b'}], "max_tokens": 16, "model": "claude-3-5-haiku", "temperature": 0.50}')
    assert len(raw) > 1_000_000
    with httpx.Client(timeout=30) as http:
        response = http.post(gateway.url + "/v1/messages", content=raw,
                             headers={**headers(secret), "content-type": "application/json"})
    assert response.status_code == 200, response.text
    received = sim.last_request(marker)
    assert received["json"]["model"] == "claude-3-5-haiku-latest"
    sent = raw.replace(b'"model": "claude-3-5-haiku"', b'"model": "claude-3-5-haiku-latest"')
    assert received["body"].encode() == sent  # byte for byte: no re-encoding ("0.50", the spacing)


def test_one_megabyte_translated_request_arrives_whole(gateway, sim):
    account, _, secret = new_account(gateway)
    marker = "big-" + uuid.uuid4().hex[:10]
    text = big_text(marker)
    body = {"model": "claude-haiku-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": text}]}
    with httpx.Client(timeout=30) as http:
        response = http.post(gateway.url + "/v1/chat/completions", json=body, headers=headers(secret))
    assert response.status_code == 200, response.text
    upstream = sim.last_request(marker)["json"]
    assert upstream["messages"][-1]["content"] in (text, [{"type": "text", "text": text}], [
        {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}])  # auto_cache's breakpoint
    usage = gateway.admin.usage(account["id"])
    assert len(usage) == 1 and usage[0]["status"] == "ok" and usage[0]["input_tokens"] > 100_000
    assert_money_consistent(gateway, account["id"])
