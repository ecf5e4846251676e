"""Issue 31, N6: body bytes are counted as they arrive, per account, in pools of their own.

In process: the real listener with the public listener's body pools and deadline
(``gatewayd.bodies``), the real relay, ledger, console, Stripe webhook and SQLite store;
the ASGI app driven directly, so a test holds connections open mid-body at no bandwidth.
The provider is an ``httpx.MockTransport``. Other tenants are asserted *served* while an
attack holds its connections (no timing is asserted: the body deadline runs on trio's mock
clock, moved by the test once the others were served).
"""

from __future__ import annotations

import re

import httpx
import orjson
import pytest
import trio
import trio.testing

from gatewayd.bodies import account_owner
from gatewayd.payments.stripe_webhook import MAX_BODY_BYTES as WEBHOOK_MAX_BODY_BYTES
from tests.console_helpers import PASSWORD
from tests.inproc import Gateway
from tests.stripe_fake import SECRET_KEY, WEBHOOK_SECRET, event, signed

MB = 1_000_000
FORM = b"application/x-www-form-urlencoded"
CHAT_ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4.1-mini",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}
STRIPE = ('\n[payments.stripe]\nsecret_key_env = "T_STRIPE_KEY"\nwebhook_secret_env = "T_STRIPE_HOOK"\n'
          'currency = "usd"\napi_base = "http://stripe.test"\n')


def provider(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=CHAT_ANSWER)


def scope_of(path: str, length: int, headers: list[tuple[bytes, bytes]] = (), *,
             content_type: bytes = b"application/json") -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"content-type", content_type), (b"content-length", str(length).encode()),
                        *headers], "client": ("203.0.113.9", 4000), "server": ("127.0.0.1", 8080)}


class HeldConnection:
    """A client that sends the headers (declaring ``length``), then ``sent`` bytes, then nothing
    until ``leave`` is set: the attack's connection, at the cost of the bytes it sent."""

    def __init__(self, gw: Gateway, scope: dict, sent: int, leave: trio.Event) -> None:
        self.gw, self.scope, self.sent, self.leave = gw, scope, sent, leave
        self.status: int | None = None
        self.body = b""
        self.done = trio.Event()

    async def run(self) -> None:
        chunks = [b"x" * self.sent] if self.sent else []

        async def receive():
            if chunks:
                return {"type": "http.request", "body": chunks.pop(), "more_body": True}
            await self.leave.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                self.status = message["status"]
            elif message["type"] == "http.response.body":
                self.body += message.get("body", b"")

        try:
            await self.gw.app(self.scope, receive, send)
        finally:
            self.done.set()


async def sign_in(gw: Gateway, email: str) -> httpx.Response:
    page = await gw.http.get("/console/signin")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    return await gw.http.post("/console/signin", data={"email": email, "password": PASSWORD, "csrf_token": token})


async def webhook(gw: Gateway) -> httpx.Response:
    body, headers = signed(event("customer.created", {"id": "cus_1", "object": "customer"}))
    return await gw.http.post("/webhooks/stripe", content=body, headers=headers)


async def chat(gw: Gateway, secret: str) -> httpx.Response:
    return await gw.http.post("/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                              json={"model": "gpt-4.1-mini", "max_tokens": 8,
                                    "messages": [{"role": "user", "content": "hi"}]})


@pytest.fixture
async def gw_budgets(tmp_path, monkeypatch):
    monkeypatch.setenv("T_STRIPE_KEY", SECRET_KEY)
    monkeypatch.setenv("T_STRIPE_HOOK", WEBHOOK_SECRET)
    gw = Gateway(tmp_path, provider, budgets=True, extra=STRIPE,
                 server=f"body_timeout_s = 1.5\nmax_buffered_bytes = {4 * MB}\nconsole_buffered_bytes = {4 * MB}\n")
    await gw.mount_console()
    try:
        yield gw
    finally:
        await gw.aclose()


async def holder(gw: Gateway, email: str) -> None:
    account = await gw.directory.create_account(email, "Holder", "UTC", PASSWORD)
    await gw.directory.pay(account, 10 * 10**9)


async def test_keyless_connections_declaring_large_bodies_hold_nothing_and_time_out(gw_budgets, mock_clock):
    """The issue's N6 attack: with no key at all, two idle connections that declared large
    bodies and sent nothing made every console form (sign-in included) and the signed Stripe
    webhook answer 503 (their declared lengths filled the quarter of the budget that every
    key-less request shared: here two forms declaring 500,000 bytes against a 4,000,000-byte
    budget, and a webhook delivery declaring the webhook's largest). Now they hold nothing
    while they wait, the console, the webhook and the API are served meanwhile, and each gets
    408 at the body deadline (``body_timeout_s``, 1.5 s here, on the mock clock: it passes when the test says)."""
    gw = gw_budgets
    await holder(gw, "holder@example.com")
    _, secret = await gw.funded_key()
    leave = trio.Event()
    idle = [HeldConnection(gw, scope_of("/console/signin", MB // 2, content_type=FORM), 0, leave),
            HeldConnection(gw, scope_of("/console/signin", MB // 2, content_type=FORM), 0, leave),
            HeldConnection(gw, scope_of("/webhooks/stripe", WEBHOOK_MAX_BODY_BYTES), 0, leave)]
    async with trio.open_nursery() as nursery:
        for connection in idle:
            nursery.start_soon(connection.run)
        await trio.testing.wait_all_tasks_blocked()  # each is waiting for its body
        assert gw.pools.console.held == 0 and gw.pools.webhook.held == 0 and gw.pools.api.held == 0
        signed_in = await sign_in(gw, "holder@example.com")
        delivered = await webhook(gw)
        answered = await chat(gw, secret)
        assert all(not c.done.is_set() for c in idle), "the idle connections are still waiting"
        mock_clock.jump(1.6)  # the body deadline passes
        for connection in idle:
            await connection.done.wait()
        leave.set()
    assert signed_in.status_code == 302 and signed_in.headers["location"].endswith("/console/keys"), signed_in.text
    assert delivered.status_code == 200 and delivered.json()["received"] is True, delivered.text
    assert answered.status_code == 200, answered.text
    for connection in idle:
        assert connection.status == 408, (connection.status, connection.body)
        assert orjson.loads(connection.body)["error"]["code"] == "request_timeout"
    assert gw.pools.console.held == 0 and gw.pools.webhook.held == 0 and gw.pools.api.held == 0


async def test_an_account_with_four_keys_holds_one_accounts_share(gw_budgets, mock_clock):
    """The issue's N6 attack with a key: one unpaid account with 4 keys declared large bodies
    on each (990,000 bytes declared here, under a 4,000,000-byte budget) and made every API
    request of every tenant 503 at zero bandwidth. Now a key's bytes count against its
    account as they arrive: the account holds at most its quarter (1,000,000), its other
    keys' bodies are refused 503 as their bytes come, and other tenants are served."""
    gw = gw_budgets
    attacker = await gw.directory.create_account("unpaid@example.com")  # never paid
    secrets = [(await gw.directory.create_key(attacker, name=f"k{n}"))[1] for n in range(4)]
    _, other = await gw.funded_key()
    await holder(gw, "holder@example.com")
    leave = trio.Event()
    held = [HeldConnection(gw, scope_of("/v1/chat/completions", 990_000,
                                        [(b"authorization", f"Bearer {s}".encode())]), 600_000, leave)
            for s in secrets]
    async with trio.open_nursery() as nursery:
        for connection in held:
            nursery.start_soon(connection.run)
        await trio.testing.wait_all_tasks_blocked()  # (the body deadline stands still: the mock clock)
        assert sum(c.done.is_set() for c in held) == 3  # three refused as their bytes came
        refused = [c for c in held if c.done.is_set()]
        assert gw.pools.api.by_owner == {account_owner(attacker.id): 600_000}  # the fourth's bytes, held
        answers = [await chat(gw, other) for _ in range(3)]
        signed_in = await sign_in(gw, "holder@example.com")
        leave.set()
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    assert signed_in.status_code == 302
    for connection in refused:
        assert connection.status == 503, connection.body
        error = orjson.loads(connection.body)["error"]
        assert error["code"] == "server_busy" and "for this account" in error["message"]
    assert gw.pools.api.held == 0  # all given back once the connections went
