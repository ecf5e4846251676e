"""The relay's pipes in-process: what the client receives of a provider's stream, and what it is
charged. The provider is an ``httpx.MockTransport`` sending SSE events one read at a time; the
listener, relay, pump, ledger and SQLite file are the real ones (tests/inproc.py)."""

from __future__ import annotations

import httpx
import orjson
import pytest
import trio
import trio.testing

from tests.clocks import thread_aware_clock
from tests.inproc import Gateway
from tests.test_relay_serve import USAGE_CHUNK, chat, chunk, silence


def sse(name: str, data: dict) -> bytes:
    return f"event: {name}\n".encode() + b"data: " + orjson.dumps(data) + b"\n\n"


MESSAGES_STREAM = [
    sse("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-haiku-4-5",
        "usage": {"input_tokens": 12, "output_tokens": 1}}}),
    sse("content_block_start", {"type": "content_block_start", "index": 0,
                                "content_block": {"type": "text", "text": ""}}),
    sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                "delta": {"type": "text_delta", "text": "bonjour"}}),
    sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
    sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                          "usage": {"output_tokens": 7}}),
    sse("message_stop", {"type": "message_stop"}),
]


def streaming(parts: list[bytes], *, hang_at: int | None = None):
    request: httpx.Request

    class Body(httpx.AsyncByteStream):
        async def __aiter__(self):
            for i, part in enumerate(parts):
                if i == hang_at:
                    await silence(request)
                yield part

    def handler(asked: httpx.Request) -> httpx.Response:
        nonlocal request
        request = asked
        return httpx.Response(200, stream=Body(), headers={"content-type": "text/event-stream"})

    return handler


@pytest.fixture
def mock_clock(monkeypatch):
    return thread_aware_clock(monkeypatch)  # never jumps while a store thread works (tests/clocks.py)


async def ask(gw: Gateway, secret: str, body: dict, path: str = "/v1/chat/completions") -> httpx.Response:
    return await gw.http.post(path, json=body, headers={"authorization": f"Bearer {secret}",
                                                        "anthropic-version": "2023-06-01"})


async def test_a_pass_through_stream_reaches_the_client_byte_for_byte(tmp_path):
    parts = [chunk("one "), chunk("two"), USAGE_CHUNK, b"data: [DONE]\n\n"]
    gw = Gateway(tmp_path, streaming(parts))
    try:
        account_id, secret = await gw.funded_key()
        response = await ask(gw, secret, chat(stream=True, stream_options={"include_usage": True}))
        assert response.status_code == 200
        assert response.content == b"".join(parts)  # not re-encoded: the provider's bytes as they came
        [row] = await gw.usage(account_id)
        assert (row["status"], row["input_tokens"], row["output_tokens"]) == ("ok", 10, 5)
    finally:
        await gw.aclose()


async def test_a_translated_stream_is_chat_chunks_charged_at_the_providers_usage(tmp_path):
    gw = Gateway(tmp_path, streaming(MESSAGES_STREAM))
    try:
        account_id, secret = await gw.funded_key()
        response = await ask(gw, secret, chat(stream=True, model="claude-haiku-4-5",
                                              stream_options={"include_usage": True}))
        assert response.status_code == 200
        events = [line[6:] for line in response.content.split(b"\n") if line.startswith(b"data: ")]
        assert events[-1] == b"[DONE]"
        docs = [orjson.loads(e) for e in events[:-1]]
        text = "".join(c["delta"].get("content") or "" for d in docs for c in d["choices"])
        assert text == "bonjour"
        assert docs[-1]["usage"]["prompt_tokens"] == 12 and docs[-1]["usage"]["completion_tokens"] == 7
        [row] = await gw.usage(account_id)
        assert (row["status"], row["input_tokens"], row["output_tokens"]) == ("ok", 12, 7)
    finally:
        await gw.aclose()


async def test_a_translated_stream_gone_silent_is_closed_in_the_clients_format(tmp_path, mock_clock):
    gw = Gateway(tmp_path, streaming(MESSAGES_STREAM, hang_at=3))
    try:
        account_id, secret = await gw.funded_key()
        started = trio.current_time()
        response = await ask(gw, secret, {"model": "claude-haiku-4-5", "max_tokens": 50, "stream": True,
                                          "messages": [{"role": "user", "content": "hi"}]}, "/v1/messages")
        idle = gw.relay.upstream.stream_idle_timeout_s
        assert idle <= trio.current_time() - started < idle + 1
        assert b"bonjour" in response.content
        assert b"event: error" in response.content and b"timeout_error" in response.content
        [row] = await gw.usage(account_id)
        assert row["status"] == "idle_timeout" and row["input_tokens"] == 12 and row["output_tokens"] >= 1
        assert gw.directory.accounts[account_id].held_nano == 0
    finally:
        await gw.aclose()
