"""What a client or an operator can send that used to make a 500 or a crash (issue 20, point 6).

Against the suite's live daemon (real HTTP over loopback, the simulator as every provider;
``GATEWAY_TEST_DATABASE=postgres`` runs it on PostgreSQL): WebSocket handshakes from a raw
socket, duplicate top-level JSON keys, numbers past what any balance (or a 64-bit column) can
hold, control characters in names, provider errors naming the operator's organization and
key, and an admin socket path already taken by a file. Each is a clear 4xx (or one line and
exit 2), nothing held or charged, and no traceback in the daemon's log.
"""

from __future__ import annotations

import io
import json
import socket
import subprocess
import time

import httpx
import orjson
import pytest
from rich.console import Console

from gatewayd.sim.operator_ids import (SIM_ANTHROPIC_ORGANIZATION, SIM_GOOGLE_PROJECT, SIM_KEY_HINT, SIM_ORGANIZATION,
                                       SIM_PROJECT)
from tests.live import BIN, unique_email

BIG = 2**64 - 1  # the largest integer orjson reads as an integer
HANDSHAKE = ("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n")


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    return host, int(port)


def _raw_exchange(url: str, request: bytes, timeout: float = 5) -> bytes:
    """Send ``request`` on a fresh connection; everything received until the server closes it."""
    received = b""
    with socket.create_connection(_host_port(url), timeout=timeout) as conn:
        conn.sendall(request)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = conn.recv(65536)
            if not chunk:
                return received
            received += chunk
    raise AssertionError(f"the connection stayed open after the answer: {received[:500]!r}")


def _parse(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def _no_traceback(gateway) -> None:
    text = gateway.output.text
    at = text.find("Traceback")
    assert at < 0, text[max(0, at - 1500):at + 3000]  # the traceback itself, wherever it is


# --- WebSocket upgrades -----------------------------------------------------------------

@pytest.mark.parametrize(("path", "status", "code"), [
    ("/v1/responses", 401, ""),  # served (gatewayd.responses_ws): the key is checked at the handshake
    ("/v1/chat/completions", 400, "websocket_not_supported"),
    ("/console/", 400, "websocket_not_supported"),
    ("/v1/realtime", 404, "not_found"),
    ("/v1/files", 501, "api_not_implemented"),
])
def test_a_websocket_handshake_is_refused_in_the_json_envelope(gateway, path, status, code):
    raw = _raw_exchange(gateway.url, HANDSHAKE.format(path=path, extra="").encode())
    got, headers, body = _parse(raw)
    assert got == status, raw[:800]
    assert headers["content-type"] == "application/json"
    request_id = headers["x-request-id"]
    assert request_id.startswith("req_")
    error = orjson.loads(body[: int(headers["content-length"])])["error"]
    assert error["code"] == code and error["message"].endswith(f"(request id: {request_id})"), error
    _no_traceback(gateway)


def test_a_websocket_client_sees_a_wrong_key_refused_on_responses(gateway, funded):
    """What a WebSocket library reports (wsproto, hypercorn's own): a rejected handshake with
    the status and the JSON body; the gateway serves HTTP after it."""
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import RejectConnection, RejectData, Request

    _, _, secret = funded
    client = WSConnection(ConnectionType.CLIENT)
    wire = client.send(Request(host="127.0.0.1", target="/v1/responses",
                               extra_headers=[(b"authorization", f"Bearer {secret}x".encode())]))
    client.receive_data(_raw_exchange(gateway.url, wire))
    client.receive_data(None)
    events = list(client.events())
    rejected = [e for e in events if isinstance(e, RejectConnection)]
    assert rejected and rejected[0].status_code == 401, events
    body = b"".join(e.data for e in events if isinstance(e, RejectData))
    assert orjson.loads(body)["error"]["message"].startswith("Invalid token")
    answer = httpx.post(gateway.url + "/v1/responses", headers={"authorization": f"Bearer {secret}"},
                        json={"model": "gpt-4.1-mini", "input": "hi"}, timeout=30)
    assert answer.status_code == 200, answer.text
    _no_traceback(gateway)


# --- duplicate top-level keys -----------------------------------------------------------

DUPLICATES = [
    ("/v1/chat/completions", b'{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}],'
                             b'"model":"claude-sonnet-4-5"}', "model"),
    ("/v1/chat/completions", b'{"model": "gpt-4.1-mini", "n": 1, "messages": [{"role": "user", "content": "hi"}], '
                             b'"n": 2}', "n"),
    ("/v1/messages", b'{"model":"claude-sonnet-4-5","max_tokens":10,"max_tokens":20,'
                     b'"messages":[{"role":"user","content":"hi"}]}', "max_tokens"),
    ("/v1/responses", b'{"model":"gpt-4.1-mini","input":"hi","mod\\u0065l":"claude-sonnet-4-5"}', "model"),
    ("/v1/embeddings", b'{"model":"text-embedding-3-small","input":"a","input":"b"}', "input"),
]


@pytest.mark.parametrize(("path", "raw", "twice"), DUPLICATES, ids=[f"{p}:{k}" for p, _, k in DUPLICATES])
def test_duplicate_top_level_keys_are_400(gateway, sim, funded, path, raw, twice):
    account, _, secret = funded
    marker = f"dup-{time.time_ns()}"
    raw = raw.replace(b'"hi"', f'"hi {marker}"'.encode()).replace(b'"a"', f'"{marker}"'.encode())
    answer = httpx.post(gateway.url + path, content=raw, timeout=30,
                        headers={"authorization": f"Bearer {secret}", "content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert repr(twice) in error["message"], error
    assert error.get("param") == twice or path == "/v1/messages", error  # the messages shape has no param
    assert sim.requests(marker) == [], "a body with a duplicate key reached the provider"
    balance = gateway.admin.balance(account["id"])
    assert balance["held_nano"] == 0 and balance["balance_nano"] == balance["total_paid_nano"]


def test_the_same_key_nested_twice_is_not_a_duplicate(gateway, funded):
    """``text`` at the top and inside input items, written with spaces and escapes (the slow
    path of the check): served."""
    _, _, secret = funded
    body = {"model": "gpt-4.1-mini", "text": {"format": {"type": "text"}},
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "h\u00e9llo"}]}]}
    answer = httpx.post(gateway.url + "/v1/responses", content=json.dumps(body).encode(), timeout=30,
                        headers={"authorization": f"Bearer {secret}", "content-type": "application/json"})
    assert answer.status_code == 200, answer.text


# --- numbers past any balance -----------------------------------------------------------

HUGE = [
    ("/v1/chat/completions", {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}], "n": BIG}),
    ("/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
                      "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": BIG}]}),
    ("/v1/responses", {"model": "gpt-4.1-mini", "input": "hi", "max_tool_calls": BIG, "tools": [{"type": "web_search"}]}),
]


@pytest.mark.parametrize(("path", "body"), HUGE, ids=["chat-n", "messages-max_uses", "responses-max_tool_calls"])
def test_numbers_past_any_balance_are_400_on_either_store(gateway, sim, funded, path, body):
    """PostgreSQL answered 500 ``NumericValueOutOfRange`` (bigint) and SQLite 500
    ``InvalidOperation`` (the refusal's dollar amount) or 403."""
    account, _, secret = funded
    answer = httpx.post(gateway.url + path, json=body, headers={"authorization": f"Bearer {secret}"}, timeout=30)
    assert answer.status_code == 400, answer.text
    text = answer.text
    assert "request_too_expensive" in text or "invalid_request_error" in text, text
    balance = gateway.admin.balance(account["id"])
    assert balance["held_nano"] == 0 and balance["balance_nano"] == balance["total_paid_nano"]
    _no_traceback(gateway)


def test_admin_numbers_past_the_store_are_400(gateway):
    account = gateway.admin.account(unique_email(), paid_usd=None)
    for method, path, doc in [
        ("POST", f"/accounts/{account['id']}/payments", {"amount_nano": BIG}),
        ("POST", f"/accounts/{account['id']}/payments", {"amount_nano": 10**30}),
        ("POST", f"/accounts/{account['id']}/keys", {"name": "big", "spend_limit_nano": BIG}),
    ]:
        answer = gateway.admin.http.request(method, "/admin/v1" + path, json=doc)
        assert answer.status_code == 400, (path, doc, answer.text)
    for query in (f"before={BIG}", f"limit={BIG}", f"before={10**40}"):
        answer = gateway.admin.http.get(f"/admin/v1/accounts/{account['id']}/usage?{query}")
        assert answer.status_code == 200, (query, answer.text)
    _no_traceback(gateway)


# --- control characters in names --------------------------------------------------------

ESCAPE = "\x1b]0;owned\x07\x1b[2J"


def test_control_characters_in_names_are_refused(gateway):
    account = gateway.admin.account(unique_email(), paid_usd=None)
    attempts = [
        ("POST", "/accounts", {"email": unique_email(), "name": f"Eve{ESCAPE}"}),
        ("POST", "/accounts", {"email": f"eve{ESCAPE}@example.com"}),
        ("PATCH", f"/accounts/{account['id']}", {"name": f"Eve{ESCAPE}"}),
        ("POST", f"/accounts/{account['id']}/keys", {"name": f"ci{ESCAPE}"}),
        ("POST", f"/accounts/{account['id']}/keys", {"name": "right\u202etxt.exe"}),
        ("POST", f"/accounts/{account['id']}/payments", {"amount_nano": 1, "note": f"x{ESCAPE}"}),
    ]
    for method, path, doc in attempts:
        answer = gateway.admin.http.request(method, "/admin/v1" + path, json=doc)
        assert answer.status_code == 400, (doc, answer.text)
        assert "control characters" in answer.json()["error"]["message"]
    key = gateway.admin.key(account["id"], "ci")
    answer = gateway.admin.http.patch(f"/admin/v1/keys/{key['id']}", json={"name": f"ci{ESCAPE}"})
    assert answer.status_code == 400, answer.text
    shown = subprocess.run([str(BIN / "gatewayctl"), "key", "create", account["id"], "--name", f"ci{ESCAPE}",
                            "--socket", gateway.socket], capture_output=True, text=True, timeout=30)
    assert shown.returncode == 1 and "\x1b" not in shown.stderr and "control characters" in shown.stderr, shown


def test_gatewayctl_prints_a_stored_escape_as_its_escape():
    """A name stored before the rule: the tables show ``\\x1b``, never the byte itself."""
    from gatewayctl import render

    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    row = {"id": "key_1", "account_id": "acct_1", "name": f"ci{ESCAPE}", "state": "active",
           "spend_limit_nano": None, "spent_nano": 0}
    render.show_list(console, [row], render.KEY_COLUMNS, empty="none", title=f"keys of {ESCAPE}")
    render.show_object(console, row, render.KEY)
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert "ci\\x1b]0;owned\\x07" in text


# --- provider errors naming the operator ------------------------------------------------

OPERATOR_IDS = (SIM_ORGANIZATION, SIM_PROJECT, SIM_KEY_HINT, SIM_KEY_HINT[-4:] + ".", SIM_ANTHROPIC_ORGANIZATION,
                SIM_GOOGLE_PROJECT)

SCRUBBED = [
    ("/v1/chat/completions", "gpt-4.1-mini", 401, "Incorrect API key provided"),  # pass-through
    ("/v1/chat/completions", "gpt-4.1-mini", 403, "does not have access to model"),
    ("/v1/responses", "gpt-4.1-mini", 400, "Rate limit reached"),
    ("/v1/messages", "claude-sonnet-4-5", 400, "is disabled"),  # pass-through, messages shape
    ("/v1/chat/completions", "claude-sonnet-4-5", 400, "is disabled"),  # translated
    ("/v1/chat/completions", "gemini-2.5-flash", 400, "Quota exceeded"),  # translated
]


@pytest.mark.parametrize(("path", "model", "status", "kept"), SCRUBBED,
                         ids=[f"{p}:{m}:{s}" for p, m, s, _ in SCRUBBED])
def test_provider_errors_reach_the_client_without_the_operators_identifiers(gateway, funded, path, model, status,
                                                                            kept):
    _, _, secret = funded
    prompt = f"[[sim:fault=status:{status}]] [[sim:fault=operator_ids]]"
    if path == "/v1/responses":
        body = {"model": model, "input": prompt}
    else:
        body = {"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": prompt}]}
    answer = httpx.post(gateway.url + path, json=body, timeout=30,
                        headers={"authorization": f"Bearer {secret}", "anthropic-version": "2023-06-01"})
    assert answer.status_code == status, answer.text
    assert kept in answer.text and "[redacted]" in answer.text, answer.text
    for identifier in OPERATOR_IDS:
        assert identifier not in answer.text, (identifier, answer.text)
    answer.json()  # still JSON


# --- the admin socket path --------------------------------------------------------------

def test_an_admin_socket_path_taken_by_a_file_is_one_line_and_exit_2(tmp_path):
    taken = tmp_path / "admin.sock"
    taken.write_text("not a socket\n")
    done = subprocess.run([str(BIN / "gatewayd"), "serve", "--demo", "--listen", "127.0.0.1:0", "--data-dir",
                           str(tmp_path / "data"), "--admin-socket", str(taken)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and str(taken) in lines[0] and "not a socket" in lines[0], lines
    assert taken.read_text() == "not a socket\n"
