"""Helpers shared by the fault-injection tests (tests/test_faults_*.py).

Raw httpx on purpose: a fault test must see the exact bytes and the exact moment a
stream breaks, which the SDKs hide behind retries and exceptions. Money is always
checked the same way afterwards: the audit is ok, nothing is held, and the usage rows
add up to the balance change.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Callable

import httpx

from tests.live import BIN, unique_email

PAID = 10_000_000_000  # $10 in nano-dollars, what Admin.account pays by default


def chat_body(text: str, *, stream: bool = True, model: str = "gpt-4.1-mini", **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}], "stream": stream, **extra}


def messages_body(text: str, *, stream: bool = True, model: str = "claude-haiku-4-5", **extra) -> dict:
    return {"model": model, "max_tokens": 256, "messages": [{"role": "user", "content": text}], "stream": stream,
            **extra}


def headers(secret: str) -> dict:
    return {"authorization": f"Bearer {secret}", "anthropic-version": "2023-06-01"}


def new_account(daemon, *, paid_usd: str | None = "10", **key_fields) -> tuple[dict, dict, str]:
    account = daemon.admin.account(unique_email("fault"), paid_usd=paid_usd)
    key = daemon.admin.key(account["id"], **key_fields)
    return account, key, key["secret"]


def sse_events(raw: bytes) -> list[tuple[str | None, str]]:
    """(event name, data) of each SSE event in ``raw``."""
    out = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = None, []
        for line in block.decode().split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            out.append((name, "\n".join(data)))
    return out


def stream_all(url: str, path: str, secret: str, body: dict, timeout: float = 15) -> tuple[int, dict, bytes]:
    with httpx.Client(timeout=timeout) as http:
        with http.stream("POST", url + path, json=body, headers=headers(secret)) as response:
            raw = response.read()
            return response.status_code, dict(response.headers), raw


LIVENESS_S = 60.0
"""How long a test waits for what must happen before it calls it a hang. Tests never assert
how fast something happens (that depends on how busy the machine is: ``bench/`` measures it);
they wait up to this long for it to happen at all, and print the time it took."""


def wait_until(check: Callable[[], object], timeout: float = 5, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def settled_row(daemon, account_id: str, request_id: str | None = None, timeout: float = 5) -> dict:
    """The usage row of a request, waiting for it (settlement of a cut stream is asynchronous to the client)."""

    def find():
        rows = daemon.admin.usage(account_id)
        if request_id is None:
            return rows[0] if rows else None
        return next((r for r in rows if r["request_id"] == request_id), None)

    return wait_until(find, timeout, f"usage row {request_id or ''}")


def assert_money_consistent(daemon, account_id: str, paid_nano: int = PAID) -> dict:
    """Audit ok, nothing held, and the account's usage rows add up to what left the balance."""
    audit = daemon.admin.audit()
    assert audit["ok"] is True, json.dumps(audit, indent=1)
    balance = daemon.admin.balance(account_id)
    assert balance["held_nano"] == 0, balance
    rows = daemon.admin.usage(account_id, limit=1000)
    assert paid_nano - sum(r["cost_nano"] for r in rows) == balance["balance_nano"], (balance, rows)
    return balance


def gatewayctl_audit(socket_path: str) -> tuple[int, dict]:
    done = subprocess.run([str(BIN / "gatewayctl"), "audit", "--json", "--socket", socket_path],
                          capture_output=True, text=True, timeout=30)
    return done.returncode, json.loads(done.stdout)


def sim_entry(sim, marker: str) -> dict:
    found = sim.requests(marker)
    assert len(found) == 1, f"expected one upstream request containing {marker!r}, got {len(found)}"
    return found[0]


class BadUpstream:
    """A TCP listener that misbehaves where a real HTTP server would answer.

    ``reset``: accepts, reads the request, then closes with RST (SO_LINGER 0).
    ``garbage``: accepts and answers bytes that are not HTTP.
    ``blackhole``: never accepts, and its accept queue is kept full, so a new connect
    hangs in SYN-SENT on loopback (the kernel drops SYNs to a full queue): a connect timeout.
    ``closed``: a port nobody listens on (connection refused).
    """

    def __init__(self, mode: str) -> None:
        import socket
        import threading

        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._fillers: list = []
        if mode == "closed":
            self.sock.close()
            return
        self.sock.listen(0 if mode == "blackhole" else 16)
        if mode == "blackhole":
            for _ in range(3):
                filler = socket.socket()
                filler.setblocking(False)
                try:
                    filler.connect(("127.0.0.1", self.port))
                except BlockingIOError:
                    pass
                self._fillers.append(filler)
            return
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _serve(self) -> None:
        import socket
        import struct

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                conn.settimeout(2)
                conn.recv(65536)
                if self.mode == "garbage":
                    conn.sendall(b"\x00\x01 this is not HTTP at all\r\n\r\n")
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            finally:
                conn.close()

    def close(self) -> None:
        for filler in self._fillers:
            filler.close()
        self.sock.close()


def provider_and_model(name: str, base_url: str, protocol: str = "openai") -> str:
    """Config text for one more provider and one chat model served by it (``<name>-model``)."""
    return (
        f'[[providers]]\nname = "{name}"\nprotocol = "{protocol}"\nbase_url = "{base_url}"\napi_key = "k"\n\n'
        f'[[models]]\nid = "{name}-model"\nprovider = "{name}"\ninput_price = 1.0\noutput_price = 2.0\n\n'
    )
