"""Helpers shared by the live key and account tests: raw requests, refusals, money snapshots.

Refusals are checked on the raw HTTP answer (status, ``error.code``, message prefix,
the request-id suffix) because that is what the spec fixes; money is read back over the
admin socket so "nothing was charged" means: same balance, same held amount, same usage
rows, same key spend.
"""

from __future__ import annotations

import os
import re
import subprocess
from contextlib import contextmanager

import httpx
import orjson

from tests.live import BIN

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
EMBEDDINGS = "/v1/embeddings"
HELLO = [{"role": "user", "content": "hello"}]


def body_for(path: str, model: str, **extra) -> dict:
    if path == MESSAGES:
        return {"model": model, "max_tokens": extra.pop("max_tokens", 20), "messages": HELLO, **extra}
    if path == RESPONSES:
        return {"model": model, "input": "hello", **extra}
    if path == EMBEDDINGS:
        return {"model": model, "input": ["hello"], **extra}
    return {"model": model, "messages": HELLO, **extra}


def post(gateway, secret: str | None, model: str = "gpt-4.1-mini", *, path: str = CHAT, body=None,
         headers: dict | None = None, **extra) -> httpx.Response:
    """One raw request; ``body`` may be bytes (sent as is) or a dict (default: a minimal valid body)."""
    sent = {"content-type": "application/json"}
    if secret is not None:
        sent["authorization"] = f"Bearer {secret}"
    sent.update(headers or {})
    if body is None:
        body = body_for(path, model, **extra)
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return httpx.post(gateway.url + path, headers=sent, content=content, timeout=30)


def ok(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def refused(response: httpx.Response, status: int, code: str | None, prefix: str) -> dict:
    """The gateway's own refusal, chat envelope: status, code, message prefix and request-id suffix."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if code is not None:
        assert error.get("code") == code, error
    assert error["message"].startswith(prefix), error
    assert error["message"].endswith(f" (request id: {response.headers['x-request-id']})"), error
    return error


def without_request_id(response: httpx.Response) -> bytes:
    return response.content.replace(response.headers["x-request-id"].encode(), b"<id>")


def key_state(admin, key_id: str) -> str:
    """What ``gatewayctl key show --json`` prints as ``state`` (the same admin call)."""
    return admin.call("GET", f"/keys/{key_id}")["state"]


def money(admin, account_id: str) -> tuple:
    keys = admin.call("GET", f"/accounts/{account_id}/keys")["data"]
    return (admin.balance(account_id), admin.usage(account_id, limit=10_000),
            sorted((k["id"], k["spent_nano"], k["held_nano"]) for k in keys))


@contextmanager
def nothing_charged(admin, account_id: str):
    before = money(admin, account_id)
    yield
    assert money(admin, account_id) == before, "a refused request changed the account's money"


def ctl(gateway, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``gatewayctl ARGS --socket <daemon's admin socket>`` as an operator would type it."""
    return subprocess.run([str(BIN / "gatewayctl"), *args, "--socket", gateway.socket], capture_output=True,
                          text=True, timeout=60, input=stdin, env={**os.environ, "COLUMNS": "200"})


def one_line(text: str) -> str:
    """Error text without rich's box drawing and line wrapping."""
    return re.sub(r"\s+", " ", re.sub(r"[│╭╮╰╯─]", " ", text)).strip()
