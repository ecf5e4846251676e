"""Issue 31, N2: a Responses WebSocket's messages are bodies, its history is bounded, its count capped.

In process, as ``tests/test_responses_ws.py``: the listener driven with ``websocket`` scopes,
the provider an ``httpx.MockTransport``, with the public listener's body pools
(``gatewayd.bodies``, ``gatewayd.socket_limits``). Other tenants are asserted *served* while
an attack holds its sockets; no timing is asserted. (permessage-deflate, the attack's
amplifier, is declined by ``gatewayd.hypercorn_patches``: tests/test_hypercorn_patches.py.)
"""

from __future__ import annotations

import httpx
import orjson
import trio
import trio.testing

from gatewayd.bodies import account_owner
from tests.inproc import Gateway
from tests.test_responses_ws import DATA, Socket, Upstream, sse

KB = 1000
CHAT_ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4.1-mini",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}


def provider(go: trio.Event):
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat/completions"):
            return httpx.Response(200, json=CHAT_ANSWER)
        return httpx.Response(200, stream=Upstream(sse(DATA), go), headers={"content-type": "text/event-stream"})
    return handle


async def chat(gw: Gateway, secret: str) -> httpx.Response:
    return await gw.http.post("/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                              json={"model": "gpt-4.1-mini", "max_tokens": 8,
                                    "messages": [{"role": "user", "content": "hi"}]})


async def test_socket_messages_count_against_the_accounts_body_budget(tmp_path):
    """The issue's N2 attack: Responses over WebSocket bypassed the body budget (and with
    permessage-deflate about 1 MiB sent became about 1 GiB held, 3.2 GiB in one run), and
    ``/healthz`` took 4.6 s (median) meanwhile, with the key of an account that never paid.
    Now each message counts against its account's share (1,000,000 of a 4,000,000-byte
    budget here) while it is handled: a running response's 900 KB message is held, the same
    account's next 200 KB message on another socket is refused with an ``error`` event 503
    and dropped, and other tenants and /healthz are served meanwhile."""
    go = trio.Event()
    gw = Gateway(tmp_path, provider(go), budgets=True, server=f"max_buffered_bytes = {4000 * KB}\n")
    try:
        account_id, secret = await gw.funded_key()
        second_key = (await gw.directory.create_key(gw.directory.accounts[account_id], name="two"))[1]
        _, other = await gw.funded_key()
        first, second = Socket(gw, secret), Socket(gw, second_key)
        async with trio.open_nursery() as nursery:
            for socket in (first, second):
                await nursery.start(socket.run)
                assert (await socket.next())["type"] == "websocket.accept"
            await first.create(model="gpt-4.1-mini", input="x" * (900 * KB))
            _, created = await first.event()
            assert created["type"] == "response.created"
            held = gw.pools.api.by_owner[account_owner(account_id)]
            assert 900 * KB < held < 901 * KB  # the message, while its response runs
            await second.create(model="gpt-4.1-mini", input="y" * (200 * KB))
            _, refused = await second.event()
            served = [await chat(gw, other) for _ in range(3)]
            health = await gw.http.get("/healthz")
            go.set()
            rest = [(await first.event())[1]["type"] for _ in DATA[1:]]
            for socket in (first, second):
                await socket.to_app.send({"type": "websocket.disconnect", "code": 1000})
        assert (refused["type"], refused["status"], refused["error"]["code"]) == ("error", 503, "server_busy")
        assert "for this account" in refused["error"]["message"]
        assert all(a.status_code == 200 for a in served) and health.status_code == 200
        assert rest[-1] == "response.completed"
        assert gw.pools.api.held == 0  # messages and history given back when the sockets closed
        assert gw.ledger.open_holds == 0
    finally:
        await gw.aclose()


async def test_chained_warm_ups_cannot_grow_the_history_past_max_body_bytes(tmp_path):
    """The issue's N2: free warm-ups (``generate: false``) chained on one socket grew its
    remembered history without bound. Now the history is capped at ``max_body_bytes``
    (20,000 here): a warm-up that would take it over is answered, but its history is not
    kept, and a continuation naming it gets a 400 saying to send the whole input. The
    history counts in the account's budget while kept and is let go on close."""
    gw = Gateway(tmp_path, provider(trio.Event()), budgets=True, server="max_body_bytes = 20000\n")
    try:
        account_id, secret = await gw.funded_key()
        socket = Socket(gw, secret)
        kept: list[int] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(socket.run)
            await socket.next()  # accepted
            previous = None
            for _ in range(5):  # 6,000 bytes of input each: the fourth passes 20,000
                extra = {"previous_response_id": previous} if previous else {}
                await socket.create(model="gpt-4.1-mini", input=[{"role": "user", "content": "w" * 6000}],
                                    generate=False, **extra)
                _, first = await socket.event()
                if first["type"] != "response.created":
                    break
                _, completed = await socket.event()
                previous = completed["response"]["id"]
                await trio.testing.wait_all_tasks_blocked()  # the warm-up's request has ended: its message let go
                kept.append(gw.pools.api.by_owner.get(account_owner(account_id), 0))
            refused = first
            await socket.to_app.send({"type": "websocket.disconnect", "code": 1000})
        assert kept[:3] == sorted(kept[:3]) and kept[2] > 18_000  # three warm-ups kept, growing
        assert all(k <= 20_000 for k in kept)
        assert kept[3] == 0  # the fourth's history (over 20,000) was not kept
        assert refused["type"] == "error" and refused["status"] == 400, refused
        assert refused["error"]["code"] == "history_too_large" and refused["error"]["param"] == "previous_response_id"
        assert gw.pools.api.held == 0 and await gw.usage(account_id) == []
    finally:
        await gw.aclose()


async def test_sockets_per_key_and_per_account_are_capped(tmp_path):
    """Any number of sockets could be opened, each holding what it was sent. Now a key has at
    most ``max_sockets_per_key`` (2 here) and an account ``max_sockets_per_account`` (3): one
    more is answered 429 before the upgrade (or closed 1008 with the reason, on a server
    without the denial-response extension); another account's socket is accepted meanwhile."""
    gw = Gateway(tmp_path, provider(trio.Event()), budgets=True,
                 server="max_sockets_per_key = 2\nmax_sockets_per_account = 3\n")
    try:
        account_id, secret = await gw.funded_key()
        second_key = (await gw.directory.create_key(gw.directory.accounts[account_id], name="two"))[1]
        _, other = await gw.funded_key()
        answers = []
        async with trio.open_nursery() as nursery:
            opened = []
            for key in (secret, secret, secret, second_key, second_key, other):
                socket = Socket(gw, key)
                await nursery.start(socket.run)
                answers.append(await socket.next())
                if answers[-1]["type"] == "websocket.http.response.start":
                    answers[-1]["body"] = orjson.loads((await socket.next())["body"])
                opened.append(socket)
            bare = Socket(gw, second_key)
            bare.scope["extensions"] = {}
            await nursery.start(bare.run)
            closed = await bare.next()
            for socket in opened:
                await socket.to_app.send({"type": "websocket.disconnect", "code": 1000})
        kinds = [a["type"] for a in answers]
        assert kinds == ["websocket.accept", "websocket.accept", "websocket.http.response.start",
                         "websocket.accept", "websocket.http.response.start", "websocket.accept"]
        assert answers[2]["status"] == 429 and answers[2]["body"]["error"]["code"] == "too_many_sockets"
        assert "max_sockets_per_key" in answers[2]["body"]["error"]["message"]
        assert answers[4]["status"] == 429 and "max_sockets_per_account" in answers[4]["body"]["error"]["message"]
        assert closed["type"] == "websocket.close" and closed["code"] == 1008
        assert "max_sockets_per_account" in closed["reason"]
        listener = gw.app
        assert listener.sockets.by_key == {} and listener.sockets.by_account == {}
    finally:
        await gw.aclose()


async def test_a_warm_up_is_a_free_answer_with_the_free_body_limit(tmp_path):
    """A ``generate: false`` warm-up is answered by the gateway, free (issue 31, N3): its body is
    at most ``max_free_body_bytes`` (2,000 here): over it, a 413 ``error`` event; under it,
    answered; the provider is never asked."""
    gw = Gateway(tmp_path, provider(trio.Event()), budgets=True, server="max_free_body_bytes = 2000\n")
    try:
        account_id, secret = await gw.funded_key()
        socket = Socket(gw, secret)
        async with trio.open_nursery() as nursery:
            await nursery.start(socket.run)
            await socket.next()  # accepted
            await socket.create(model="gpt-4.1-mini", input="w" * 3000, generate=False)
            _, refused = await socket.event()
            await socket.create(model="gpt-4.1-mini", input="w" * 100, generate=False)
            answered = [(await socket.event())[1]["type"] for _ in range(2)]
            await socket.to_app.send({"type": "websocket.disconnect", "code": 1000})
        assert (refused["type"], refused["status"], refused["error"]["code"]) == ("error", 413, "request_too_large")
        assert "max_free_body_bytes" in refused["error"]["message"]
        assert answered == ["response.created", "response.completed"]
        assert await gw.usage(account_id) == [] and gw.pools.api.held == 0
    finally:
        await gw.aclose()
