"""Bad request bodies and headers: 413 over the body cap (declared or chunked, answered
before the body is read), 400 for malformed JSON and wrong types, a clear error for
oversized headers, never a 500, and nothing charged for any of them.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from gatewayd.config import load_config
from tests.faults import PAID, chat_body, headers, messages_body, new_account
from tests.live import Daemon

CAP = 1000


@pytest.fixture(scope="module")
def small_cap(sim, tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("cap"), sim.url, server=f"max_body_bytes = {CAP}\n")
    yield d
    d.stop()


@pytest.fixture(scope="module")
def capped_account(small_cap):
    return new_account(small_cap)


def test_default_body_cap_is_128_mib():
    assert load_config(None, environ={}).server.max_body_bytes == 128 * 1024 * 1024


def _raw_request(daemon, head: bytes, body_parts: list[bytes], *, read_timeout: float = 5) -> tuple[bytes, bool]:
    """Send a request by hand (so the body can stay unfinished); return the answer and whether
    the server then closed the connection."""
    url = urlsplit(daemon.url)
    with socket.create_connection((url.hostname, url.port), timeout=read_timeout) as sock:
        sock.sendall(head)
        for part in body_parts:
            sock.sendall(part)
        answer = b""
        closed = False
        deadline = time.monotonic() + read_timeout
        while time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                closed = True
                break
            if not data:
                closed = True
                break
            answer += data
        return answer, closed


def _head(secret: str, extra: str) -> bytes:
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {secret}\r\n"
            f"Content-Type: application/json\r\n{extra}\r\n").encode()


def test_declared_length_over_cap_is_413_before_the_body_is_sent(small_cap, capped_account):
    _, _, secret = capped_account
    answer, closed = _raw_request(small_cap, _head(secret, "Content-Length: 1000000000\r\n"), [])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"request_too_large" in answer and b"x-request-id" in answer.lower()
    assert closed, "the connection must be closed after a 413"


def test_chunked_body_over_cap_is_413_while_the_body_is_still_coming(small_cap, capped_account):
    account, _, secret = capped_account
    chunk = b"x" * 600
    part = b"%x\r\n%s\r\n" % (len(chunk), chunk)
    # two chunks (1200 bytes) and no terminating chunk: the body never ends, yet the 413 must come
    answer, closed = _raw_request(small_cap, _head(secret, "Transfer-Encoding: chunked\r\n"), [part, part])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert closed
    assert small_cap.admin.balance(account["id"])["balance_nano"] == PAID


def test_httpx_content_length_and_generator_bodies_over_cap(small_cap, capped_account):
    account, _, secret = capped_account
    big = b'{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"' + b"a" * 2000 + b'"}]}'
    with httpx.Client(timeout=10) as http:
        response = http.post(small_cap.url + "/v1/chat/completions", content=big, headers=headers(secret))
        assert response.status_code == 413 and response.headers["connection"] == "close"
        assert response.json()["error"]["code"] == "request_too_large"

        def pieces():
            for i in range(0, len(big), 100):
                yield big[i:i + 100]

        response = http.post(small_cap.url + "/v1/chat/completions", content=pieces(), headers=headers(secret))
        assert response.status_code == 413, response.text
        assert response.headers["connection"] == "close"
    assert small_cap.admin.usage(account["id"]) == []


def test_body_just_under_cap_is_served(small_cap, capped_account):
    _, _, secret = capped_account
    with httpx.Client(timeout=10) as http:
        response = http.post(small_cap.url + "/v1/chat/completions", headers=headers(secret),
                             json=chat_body("short", stream=False))
    assert response.status_code == 200, response.text


BAD_BODIES = [
    ("/v1/chat/completions", b"{not json", "not valid JSON"),
    ("/v1/chat/completions", b"", "empty"),
    ("/v1/chat/completions", b"[1, 2]", "JSON object"),
    ("/v1/chat/completions", b'"just a string"', "JSON object"),
    ("/v1/chat/completions", chat_body("hi", stream="true"), "'stream'"),
    ("/v1/chat/completions", chat_body("hi", max_tokens=10.5), "'max_tokens'"),
    ("/v1/chat/completions", chat_body("hi", max_tokens="10"), "'max_tokens'"),
    ("/v1/chat/completions", chat_body("hi", max_tokens=True), "'max_tokens'"),
    ("/v1/chat/completions", {"model": "gpt-4.1-mini", "messages": [{"role": "wizard", "content": "hi"}]}, "role"),
    ("/v1/chat/completions", {"model": "gpt-4.1-mini", "messages": "hi"}, "'messages'"),
    ("/v1/chat/completions", {"model": 5, "messages": [{"role": "user", "content": "hi"}]}, "'model'"),
    ("/v1/messages", messages_body("hi", stream="yes"), "'stream'"),
    ("/v1/messages", messages_body("hi", max_tokens=1.5), "'max_tokens'"),
    ("/v1/messages", {"model": "claude-haiku-4-5", "max_tokens": 10,
                      "messages": [{"role": "wizard", "content": "hi"}]}, "role"),
    ("/v1/messages", b"{\"model\": ", "not valid JSON"),
    ("/v1/responses", {"model": "gpt-4.1-mini", "input": "hi", "stream": 1}, "'stream'"),
    ("/v1/responses", {"model": "gpt-4.1-mini", "input": 7}, "'input'"),
    ("/v1/embeddings", {"model": "text-embedding-3-small", "input": {"a": 1}}, "'input'"),
]


@pytest.mark.parametrize("path,body,says", BAD_BODIES)
def test_bad_bodies_are_400_with_a_clear_message_and_free(gateway, path, body, says):
    account, _, secret = new_account(gateway)
    with httpx.Client(timeout=10) as http:
        if isinstance(body, bytes):
            response = http.post(gateway.url + path, content=body,
                                 headers={**headers(secret), "content-type": "application/json"})
        else:
            response = http.post(gateway.url + path, json=body, headers=headers(secret))
    assert response.status_code == 400, response.text
    doc = response.json()
    message = doc["error"]["message"]
    assert says in message, message
    assert "(request id: req_" in message
    if path == "/v1/messages":
        assert doc["type"] == "error"
    assert gateway.admin.balance(account["id"])["balance_nano"] == PAID
    assert gateway.admin.usage(account["id"]) == []


def test_oversized_headers_get_a_clear_4xx_not_a_500(gateway):
    account, _, secret = new_account(gateway)
    with httpx.Client(timeout=10) as http:
        try:
            response = http.post(gateway.url + "/v1/chat/completions", json=chat_body("hi", stream=False),
                                 headers={**headers(secret), "x-padding": "p" * 200_000})
        except httpx.RemoteProtocolError as e:  # pragma: no cover - shows what went wrong
            pytest.fail(f"the gateway hung up instead of answering: {e}")
    assert response.status_code == 431, response.text
    error = response.json()["error"]
    assert error["code"] == "request_header_too_large" and "headers are too large" in error["message"]
    assert response.headers["x-request-id"].startswith("req_")
    assert response.headers["connection"] == "close"
    assert gateway.admin.usage(account["id"]) == []


def test_broken_http_gets_a_clear_400(gateway):
    url = urlsplit(gateway.url)
    with socket.create_connection((url.hostname, url.port), timeout=5) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost gw no colon here\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b'"invalid_http_request"' in answer and b"x-request-id: req_" in answer.lower()
