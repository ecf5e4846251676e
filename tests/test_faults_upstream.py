"""Upstream failures before the first byte: refused, reset, garbage, connect timeout,
invalid bodies, and provider errors passed on (status, message, Retry-After).

Whatever fails, the hold is released, nothing is charged for a request the provider
never answered, exactly one usage row records it, and the audit stays ok.
"""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from tests.faults import (
    BadUpstream, assert_money_consistent, chat_body, headers, messages_body, new_account, provider_and_model,
    settled_row, sse_events,
)
from tests.live import Daemon


def nonce() -> str:
    return "n" + uuid.uuid4().hex[:12]


@pytest.fixture(scope="module")
def bad():
    upstreams = {mode: BadUpstream(mode) for mode in ("closed", "reset", "garbage", "blackhole")}
    yield upstreams
    for upstream in upstreams.values():
        upstream.close()


@pytest.fixture(scope="module")
def faulty_daemon(sim, bad, tmp_path_factory):
    extra = "".join(provider_and_model(mode, u.base_url) for mode, u in bad.items())
    extra += provider_and_model("anthropic-closed", f"http://127.0.0.1:{bad['closed'].port}", "anthropic")
    d = Daemon(tmp_path_factory.mktemp("faulty"), sim.url, server="upstream_connect_timeout_s = 1\n", extra=extra)
    yield d
    d.stop()


def post(daemon, path: str, secret: str, body: dict, timeout: float = 15) -> httpx.Response:
    with httpx.Client(timeout=timeout) as http:
        return http.post(daemon.url + path, json=body, headers=headers(secret))


def assert_refused_cleanly(daemon, account: dict, response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    row = settled_row(daemon, account["id"], response.headers["x-request-id"])
    assert row["cost_nano"] == 0 and row["http_status"] == status
    assert len(daemon.admin.usage(account["id"])) == 1
    assert_money_consistent(daemon, account["id"])
    return row


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_connection_refused_is_502(faulty_daemon, stream):
    account, _, secret = new_account(faulty_daemon)
    response = post(faulty_daemon, "/v1/chat/completions", secret, chat_body("hi", model="closed-model", stream=stream))
    assert_refused_cleanly(faulty_daemon, account, response, 502)
    error = response.json()["error"]
    assert "could not be reached" in error["message"] and error["message"].endswith(")")
    assert error["code"] == "bad_gateway"


def test_connection_refused_on_messages_uses_the_messages_envelope(faulty_daemon):
    account, _, secret = new_account(faulty_daemon)
    response = post(faulty_daemon, "/v1/messages", secret, messages_body("hi", model="anthropic-closed-model"))
    assert_refused_cleanly(faulty_daemon, account, response, 502)
    doc = response.json()
    assert doc["type"] == "error" and "could not be reached" in doc["error"]["message"]


@pytest.mark.parametrize("mode", ["reset", "garbage"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_reset_or_garbage_before_any_byte_is_502(faulty_daemon, mode, stream):
    account, _, secret = new_account(faulty_daemon)
    response = post(faulty_daemon, "/v1/chat/completions", secret,
                    chat_body("hi", model=f"{mode}-model", stream=stream))
    assert_refused_cleanly(faulty_daemon, account, response, 502)


def test_connect_timeout_is_504_with_a_clear_message(faulty_daemon):
    account, _, secret = new_account(faulty_daemon)
    response = post(faulty_daemon, "/v1/chat/completions", secret, chat_body("hi", model="blackhole-model"))
    # the daemon's 504 (its upstream_connect_timeout_s = 1), not the client giving up
    assert_refused_cleanly(faulty_daemon, account, response, 504)
    assert "did not accept a connection" in response.json()["error"]["message"]


# -- the simulator's faults before the first byte -----------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("path,make_body", [
    ("/v1/chat/completions", chat_body), ("/v1/messages", messages_body)], ids=["chat", "messages"])
def test_upstream_disconnect_before_status_is_502(gateway, path, make_body, stream):
    account, _, secret = new_account(gateway)
    response = post(gateway, path, secret, make_body(f"{nonce()} [[sim:fault=disconnect]]", stream=stream))
    assert_refused_cleanly(gateway, account, response, 502)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("path,make_body", [
    ("/v1/chat/completions", chat_body), ("/v1/messages", messages_body),
    ("/v1/chat/completions", lambda text, **kw: chat_body(text, model="claude-haiku-4-5", **kw)),
], ids=["chat", "messages", "chat-via-messages"])
def test_invalid_upstream_body_is_502(gateway, path, make_body, stream):
    account, _, secret = new_account(gateway)
    response = post(gateway, path, secret, make_body(f"{nonce()} [[sim:fault=invalid_json]]", stream=stream))
    row = assert_refused_cleanly(gateway, account, response, 502)
    assert row["status"] == "upstream_invalid"
    assert "invalid response" in response.text


def test_responses_invalid_stream_is_502(gateway):
    account, _, secret = new_account(gateway)
    response = post(gateway, "/v1/responses", secret,
                    {"model": "gpt-4.1-mini", "input": f"{nonce()} [[sim:fault=invalid_json]]", "stream": True})
    assert_refused_cleanly(gateway, account, response, 502)


@pytest.mark.parametrize("code", [429, 500, 503])
def test_provider_error_passed_on_with_status_message_and_retry_after(gateway, code):
    account, _, secret = new_account(gateway)
    response = post(gateway, "/v1/chat/completions", secret,
                    chat_body(f"{nonce()} [[sim:fault=status:{code}]]", stream=True))
    assert_refused_cleanly(gateway, account, response, code)
    assert response.json()["error"]["message"] == f"simulated error {code}"
    if code == 429:
        assert response.headers["retry-after"] == "7"


@pytest.mark.parametrize("code", [429, 529])
def test_provider_error_passed_on_messages(gateway, code):
    account, _, secret = new_account(gateway)
    response = post(gateway, "/v1/messages", secret, messages_body(f"{nonce()} [[sim:fault=status:{code}]]"))
    assert_refused_cleanly(gateway, account, response, code)
    doc = response.json()
    assert doc["type"] == "error" and doc["error"]["message"] == f"simulated error {code}"
    if code == 429:
        assert response.headers["retry-after"] == "7"


def test_provider_429_on_translated_route_keeps_status_and_retry_after(gateway):
    account, _, secret = new_account(gateway)
    response = post(gateway, "/v1/chat/completions", secret,
                    chat_body(f"{nonce()} [[sim:fault=status:429]]", model="claude-haiku-4-5", stream=False))
    assert_refused_cleanly(gateway, account, response, 429)
    assert response.headers["retry-after"] == "7"
    assert "simulated error 429" in response.json()["error"]["message"]


@pytest.mark.slow
def test_stream_headers_later_than_idle_timeout_is_504(sim, tmp_path):
    """A provider that does not even send its status line within the idle time: 504, nothing charged."""
    d = Daemon(tmp_path, sim.url, server="stream_idle_timeout_s = 1\n")
    try:
        account, _, secret = new_account(d)
        response = post(d, "/v1/chat/completions", secret, chat_body(f"{nonce()} [[sim:fault=delay_ms:3000]]"))
        assert_refused_cleanly(d, account, response, 504)
        assert "sent nothing for 1 seconds" in response.json()["error"]["message"]
        # the stream that stalls before its first event: also 504, before any byte
        account, _, secret = new_account(d)
        response = post(d, "/v1/chat/completions", secret,
                        chat_body(f"{nonce()} [[sim:fault=stall_after:0]] [[sim:words=3]]"))
        # the role chunk came before the stall, so this one is a started stream cut by the idle timeout
        assert response.status_code == 200
        assert json.loads(sse_events(response.content)[-1][1])["error"]["type"] == "timeout_error"
        assert_money_consistent(d, account["id"])
    finally:
        d.stop()
