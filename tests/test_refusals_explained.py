"""Every model refusal says which case it is and what to do (issue 32, point 1), in the spec's
status and code; the request log line carries the requested model, the error code and a short
reason for every refused request, and tells the operator the cause of a 401 that the client
is never told.

In-process: the real listener, relay and SQLite file (tests/inproc.py), a provider that must
never be asked.
"""

from __future__ import annotations

import logging

import httpx
import orjson
import pytest

from tests.inproc import Gateway


def never_asked(request: httpx.Request) -> httpx.Response:
    raise AssertionError("a refused request reached the provider")


@pytest.fixture
async def gw(tmp_path):
    gateway = Gateway(tmp_path, never_asked)
    try:
        yield gateway
    finally:
        await gateway.aclose()


def chat(model: str) -> bytes:
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})


async def post(gw: Gateway, secret: str | None, body: bytes, path: str = "/v1/chat/completions",
               headers: dict | None = None) -> httpx.Response:
    sent = {"authorization": f"Bearer {secret}"} if secret else {}
    return await gw.http.post(path, content=body, headers={**sent, **(headers or {})})


def log_line(caplog, response: httpx.Response) -> dict:
    [line] = [r.fields for r in caplog.records if r.name == "gatewayd.request"
              and r.fields["request_id"] == response.headers["x-request-id"]]
    return line


async def test_an_unknown_id_names_the_closest_ids_and_the_model_list(gw, caplog):
    caplog.set_level(logging.INFO, logger="gatewayd.request")
    _, secret = await gw.funded_key()
    response = await post(gw, secret, chat("gpt-4.1-mni"))
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "model_not_found"
    assert error["message"].startswith("No available channel for model gpt-4.1-mni: no model with this id")
    assert "did you mean gpt-4.1-mini" in error["message"] and "GET /v1/models" in error["message"]
    line = log_line(caplog, response)
    assert (line["requested_model"], line["model"], line["error_code"], line["reason"], line["status"]) == (
        "gpt-4.1-mni", None, "model_not_found", "unknown model id", 503)


async def test_an_unknown_id_suggests_only_what_the_key_may_use(gw):
    account_id, _ = await gw.funded_key()
    account = gw.directory.accounts[account_id]
    _, secret = await gw.directory.create_key(account, name="one", models=["gpt-4.1-mini"])
    response = await post(gw, secret, chat("claude-haiku-4-5-20251001"))
    assert response.status_code == 403  # the key's list comes first (spec)
    message = response.json()["error"]["message"]
    assert message.startswith("This token has no access to model claude-haiku-4-5-20251001")
    assert "this key may use: gpt-4.1-mini" in message


async def test_an_account_under_the_threshold_is_told_how_much_more_to_pay(gw, caplog):
    caplog.set_level(logging.INFO, logger="gatewayd.request")
    account = await gw.directory.create_account("two@example.com")
    await gw.directory.pay(account, 2_000_000_000)
    _, secret = await gw.directory.create_key(account, name="t")
    response = await post(gw, secret, chat("gpt-4.1-mini"))
    assert response.status_code == 503 and response.json()["error"]["code"] == "model_not_found"
    message = response.json()["error"]["message"]
    assert "total paid reaches $3.00" in message and "paid $2.00 so far" in message
    assert "$1.00 more" in message and "Balance" in message
    assert log_line(caplog, response)["reason"] == "account under the visibility threshold"


async def test_an_embedding_model_not_enabled_says_so_and_who_enables_it(gw):
    account = await gw.directory.create_account("emb@example.com")
    await gw.directory.pay(account, 5_000_000_000)
    _, secret = await gw.directory.create_key(account, name="t")
    body = orjson.dumps({"model": "text-embedding-3-small", "input": ["x"]})
    response = await post(gw, secret, body, "/v1/embeddings")
    assert response.status_code == 503 and response.json()["error"]["code"] == "model_not_found"
    message = response.json()["error"]["message"]
    assert "not enabled for this account" in message and "--enable" in message


@pytest.mark.parametrize("case", ["none", "basic", "mistyped", "disabled", "revoked", "header"])
async def test_every_401_is_the_same_to_the_client_and_told_apart_in_the_log(gw, caplog, case):
    caplog.set_level(logging.INFO, logger="gatewayd.request")
    account_id, secret = await gw.funded_key()
    headers: dict = {}
    sent: str | None = secret
    if case == "none":
        sent = None
    elif case == "basic":
        sent, headers = None, {"authorization": "Basic abc"}
    elif case == "mistyped":
        sent = secret + "x"
    elif case == "header":
        sent, headers = None, {"x-api-key": secret}
    else:
        [key] = gw.directory.keys_by_account[account_id]
        await gw.directory.set_key_status(key, "disabled" if case == "disabled" else "deleted")
    response = await post(gw, sent, chat("gpt-4.1-mini"), headers=headers)
    assert response.status_code == 401
    assert response.json()["error"] == {"message": f"Invalid token (request id: {response.headers['x-request-id']})",
                                        "type": "invalid_request_error", "code": ""}
    reason = log_line(caplog, response)["reason"]
    expected = {"none": "no key presented", "basic": "Authorization header is not 'Bearer <key>'",
                "mistyped": "no key has this secret", "disabled": "is disabled", "revoked": "is revoked",
                "header": "key sent in x-api-key, which this endpoint does not read"}[case]
    assert expected in reason

