"""Issue 20: a large body is checked for what needs only its model before anything walks it.

The body below is 300 KB and its message has a role the format does not have: if the gateway
walked it first, every request would be that 400. An account that may not use the model is
refused for that instead; an account that may gets the body's own 400.
"""

from __future__ import annotations

import httpx

from tests.live import unique_email

BROKEN = b'{"model": "gpt-4.1-mini", "messages": [{"role": "wizard", "content": "' + b"x" * 300_000 + b'"}]}'


def _post(gateway, secret: str) -> httpx.Response:
    return httpx.post(gateway.url + "/v1/chat/completions", content=BROKEN, timeout=30,
                      headers={"authorization": f"Bearer {secret}", "content-type": "application/json"})


def test_a_model_the_account_cannot_see_is_refused_before_the_large_body_is_walked(gateway):
    unpaid = gateway.admin.account(unique_email("unpaid"), paid_usd=None)
    answer = _post(gateway, gateway.admin.key(unpaid["id"])["secret"])
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "model_not_found", answer.text


def test_a_model_outside_the_keys_list_is_refused_before_the_large_body_is_walked(gateway):
    account = gateway.admin.account(unique_email("listed"), paid_usd="3")
    key = gateway.admin.key(account["id"], models=["gpt-4.1"])
    answer = _post(gateway, key["secret"])
    assert answer.status_code == 403 and "no access to model gpt-4.1-mini" in answer.text, answer.text


def test_an_account_that_may_use_the_model_gets_the_bodys_own_400(gateway):
    account = gateway.admin.account(unique_email("paid"), paid_usd="3")
    answer = _post(gateway, gateway.admin.key(account["id"])["secret"])
    assert answer.status_code == 400 and "role" in answer.text, answer.text
    assert gateway.admin.usage(account["id"]) == []
