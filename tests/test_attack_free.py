"""Issue 31, N3: answers the gateway makes itself (Gemini's ``countTokens``) are capped like paid ones.

The issue's attack: ``countTokens`` was free and unbounded; the tokenizer ran over bodies up
to the body limit (128 MB) with no rate limit and no in-flight cap, the worker threads
starved, and console sign-in went from 0.6 s to 20.7 s. In process (the real listener,
relay, ledger and SQLite store; the provider an ``httpx.MockTransport``); other tenants are
asserted *served* while the attack runs, no timing is asserted.
"""

from __future__ import annotations

import attrs
import httpx
import orjson
import trio
import trio.testing

from gatewayd.catalogue import RateLimit
from tests.inproc import Gateway

MODEL = "gemini-2.5-flash"
COUNT = f"/v1beta/models/{MODEL}:countTokens"
CHAT_ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4.1-mini",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}


def contents(text: str) -> dict:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}]}


async def count(gw: Gateway, secret: str, text: str = "how many tokens is this", **kw) -> httpx.Response:
    return await gw.http.post(COUNT, headers={"x-goog-api-key": secret}, json=contents(text), **kw)


async def chat(gw: Gateway, secret: str, text: str = "hi") -> httpx.Response:
    return await gw.http.post("/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                              json={"model": "gpt-4.1-mini", "max_tokens": 8,
                                    "messages": [{"role": "user", "content": text}]})


def provider(go: trio.Event):
    async def handle(request: httpx.Request) -> httpx.Response:
        if b"slow" in request.content:
            await go.wait()
        return httpx.Response(200, json=CHAT_ANSWER)
    return handle


async def test_count_tokens_counts_against_the_accounts_requests_in_flight(tmp_path):
    """Account A has its two requests in flight (``max_concurrent_per_account = 2``): its
    countTokens is refused 429 like a third billable request; account B's is served."""
    go = trio.Event()
    gw = Gateway(tmp_path, provider(go), server="max_concurrent_per_account = 2\n")
    try:
        _, a = await gw.funded_key()
        _, b = await gw.funded_key()
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(chat, gw, a, "slow")
            with trio.fail_after(10):
                while sum(gw.relay.in_flight.by_key.values()) < 2:
                    await trio.sleep(0.01)
            refused = await count(gw, a)
            served = await count(gw, b)
            b_chat = await chat(gw, b)
            go.set()
        assert refused.status_code == 429 and "Too many concurrent requests" in refused.json()["error"]["message"]
        assert served.status_code == 200 and served.json()["totalTokens"] > 0
        assert b_chat.status_code == 200
        assert gw.relay.in_flight.by_key == {}  # the count left with each answer
    finally:
        await gw.aclose()


async def test_count_tokens_takes_the_models_rate_limit_like_a_billable_request(tmp_path):
    """A model limited to 2 requests a minute: A's two countTokens take the window, A's third
    and A's generateContent are 429 ``rate_limit_exceeded``; B is served."""
    gw = Gateway(tmp_path, provider(trio.Event()))
    try:
        models = dict(gw.config.models)
        models[MODEL] = attrs.evolve(models[MODEL], rate_limit=RateLimit(requests=2, minutes=1))
        gw.relay.config = attrs.evolve(gw.config, models=models)
        _, a = await gw.funded_key()
        _, b = await gw.funded_key()
        first = [await count(gw, a) for _ in range(3)]
        generate = await gw.http.post(f"/v1beta/models/{MODEL}:generateContent", headers={"x-goog-api-key": a},
                                      json=contents("hi"))
        other = await count(gw, b)
        assert [r.status_code for r in first] == [200, 200, 429]
        assert generate.status_code == 429 and "Rate limit reached" in generate.json()["error"]["message"]
        assert int(first[2].headers["retry-after"]) >= 1
        assert other.status_code == 200
    finally:
        await gw.aclose()


async def test_count_tokens_bodies_are_capped_at_max_free_body_bytes_before_they_are_read(tmp_path):
    """``max_free_body_bytes`` (10,000 here, the default 1 MiB; the body limit is 128 MB): a
    declared length over it is refused 413 before the body is read, a body sent without a
    length as soon as it passes it; a body within it is counted; B is served."""
    gw = Gateway(tmp_path, provider(trio.Event()), server="max_free_body_bytes = 10000\n")
    try:
        _, a = await gw.funded_key()
        _, b = await gw.funded_key()
        declared = await count(gw, a, "x " * 10_000)

        async def chunks():
            for _ in range(5):
                yield b'{"contents": [{"role": "user", "parts": [{"text": "' + b"y" * 4000
            yield b'"}]}]}'

        streamed = await gw.http.post(COUNT, headers={"x-goog-api-key": a}, content=chunks())
        within = await count(gw, a, "z " * 4000)
        served = await chat(gw, b)
        for refused in (declared, streamed):
            assert refused.status_code == 413, refused.text
            assert refused.json()["error"]["code"] == "request_too_large"  # (a check before the model step)
            assert "max_free_body_bytes" in refused.json()["error"]["message"]
        assert within.status_code == 200 and served.status_code == 200
    finally:
        await gw.aclose()


async def test_the_tokenizer_runs_in_threads_of_its_own_that_billable_requests_never_wait_behind(tmp_path):
    """Every free-answer thread is taken (``free_answer_threads = 1``, borrowed by the test):
    A's large countTokens waits for one, and meanwhile B's billable request is served and
    trio's default thread pool is untouched; once the thread is free, A's count is answered."""
    gw = Gateway(tmp_path, provider(trio.Event()))
    try:
        _, a = await gw.funded_key()
        _, b = await gw.funded_key()
        assert gw.relay.free_threads.total_tokens == 1
        borrower = object()
        gw.relay.free_threads.acquire_on_behalf_of_nowait(borrower)
        answers: dict[str, httpx.Response] = {}

        async def count_large() -> None:
            answers["count"] = await count(gw, a, "token " * 5_000)  # over the inline limit: to a thread

        async with trio.open_nursery() as nursery:
            nursery.start_soon(count_large)
            await trio.testing.wait_all_tasks_blocked()
            assert gw.relay.free_threads.statistics().tasks_waiting == 1  # A's count, waiting for its thread
            served = await chat(gw, b)
            assert "count" not in answers  # still waiting while B was served
            assert trio.to_thread.current_default_thread_limiter().borrowed_tokens == 0
            gw.relay.free_threads.release_on_behalf_of(borrower)
        assert served.status_code == 200
        assert answers["count"].status_code == 200 and answers["count"].json()["totalTokens"] >= 5_000
        assert orjson.loads(answers["count"].content) == answers["count"].json()
    finally:
        await gw.aclose()
