"""Upstream keep-alive through the daemon: a finished stream gives its provider connection back
to the pool (no new TCP/TLS connection per request), and an upstream that never ends its body
after the terminal event still ends the client's stream promptly."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import orjson
import pytest

from tests.faults import LIVENESS_S, assert_money_consistent, chat_body, headers, new_account, provider_and_model, settled_row
from tests.live import Daemon

CHUNKS = [
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
     "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello"}, "finish_reason": None}]},
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
     "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
     "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}},
]
PLAIN = {"id": "c2", "object": "chat.completion", "created": 1, "model": "m",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}


class CountingUpstream:
    """An OpenAI-protocol HTTP/1.1 server on loopback that counts the connections it accepts.

    ``lingering``: after ``data: [DONE]`` it neither ends the chunked body nor closes."""

    def __init__(self, lingering: bool = False) -> None:
        self.lingering = lingering
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                body, buffer = orjson.loads(buffer[:length]), buffer[length:]
                if not body.get("stream"):
                    payload = orjson.dumps(PLAIN)
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                                 % len(payload) + payload)
                    continue
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                for event in [b"data: " + orjson.dumps(c) + b"\n\n" for c in CHUNKS] + [b"data: [DONE]\n\n"]:
                    conn.sendall(b"%x\r\n%s\r\n" % (len(event), event))
                if self.lingering:
                    time.sleep(LIVENESS_S * 2)  # the body never ends; the gateway must not wait for it
                    return
                conn.sendall(b"0\r\n\r\n")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def upstreams():
    made = {"proper": CountingUpstream(), "lingering": CountingUpstream(lingering=True)}
    yield made
    for upstream in made.values():
        upstream.close()


@pytest.fixture(scope="module")
def daemon(sim, upstreams, tmp_path_factory):
    extra = "".join(provider_and_model(name, u.base_url) for name, u in upstreams.items())
    d = Daemon(tmp_path_factory.mktemp("reuse"), sim.url, extra=extra)
    yield d
    d.stop()


def stream(daemon, secret: str, model: str) -> bytes:
    with httpx.Client(timeout=LIVENESS_S) as http:  # a gateway waiting on the lingering body: a read timeout
        with http.stream("POST", daemon.url + "/v1/chat/completions", headers=headers(secret),
                         json=chat_body("hi", model=model, stream=True)) as response:
            assert response.status_code == 200
            return response.read()


def test_finished_streams_and_answers_reuse_one_upstream_connection(daemon, upstreams):
    account, _, secret = new_account(daemon)
    for _ in range(3):
        raw = stream(daemon, secret, "proper-model")
        assert raw.endswith(b"data: [DONE]\n\n") and b"Hello" in raw
    with httpx.Client(timeout=10) as http:
        for _ in range(2):
            response = http.post(daemon.url + "/v1/chat/completions", headers=headers(secret),
                                 json=chat_body("hi", model="proper-model", stream=False))
            assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 1
    assert upstreams["proper"].connections == 1
    rows = daemon.admin.usage(account["id"])
    assert len(rows) == 5 and {r["status"] for r in rows} == {"ok"}
    assert_money_consistent(daemon, account["id"])


def test_an_upstream_body_that_never_ends_does_not_hold_the_client(daemon, upstreams):
    account, _, secret = new_account(daemon)
    raw = stream(daemon, secret, "lingering-model")  # the body after [DONE] never ends: not waited for
    assert raw.endswith(b"data: [DONE]\n\n")
    row = settled_row(daemon, account["id"])
    assert row["status"] == "ok" and row["output_tokens"] == 1
    stream(daemon, secret, "lingering-model")
    assert upstreams["lingering"].connections == 2  # that connection could not be reused
    assert_money_consistent(daemon, account["id"])
