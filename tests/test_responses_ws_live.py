"""Responses over WebSocket, live: a real WebSocket client (``websockets``) on loopback, the
daemon, the simulator upstream.

The module's daemon has a short idle timeout and a small body cap so that both limits can be
seen in a second; the audit (conftest) runs after every test against it.
"""

from __future__ import annotations

import json
import time
import uuid

import httpx
import orjson
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.faults import LIVENESS_S
from tests.live import Daemon, unique_email

pytestmark = pytest.mark.slow

IDLE_S = 3
MAX_BODY = 400_000
GPT, CLAUDE = "gpt-4.1-mini", "claude-haiku-4-5"
PRICES = {GPT: (400, 1600), CLAUDE: (1000, 5000)}  # nano-dollars a token: input, output
VARYING = {"id", "response_id", "item_id", "call_id", "created_at", "completed_at", "sequence_number",
           "obfuscation"}


@pytest.fixture(scope="module")
def gateway(sim, tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("gateway-ws"), sim.url,
               server=f"stream_idle_timeout_s = {IDLE_S}\nmax_body_bytes = {MAX_BODY}")
    yield d
    d.stop()


@pytest.fixture
def funded(gateway):
    account = gateway.admin.account(unique_email())
    key = gateway.admin.key(account["id"])
    return account, key, key["secret"]


def ws_url(gateway) -> str:
    return gateway.url.replace("http://", "ws://") + "/v1/responses"


def open_socket(gateway, secret: str):
    return connect(ws_url(gateway), additional_headers={"Authorization": f"Bearer {secret}"},
                   max_size=None, open_timeout=10)


def one_response(ws, timeout: float = 30) -> list[dict]:
    """The events of one response, through the one that ends it (or an ``error`` event)."""
    events = []
    while True:
        event = json.loads(ws.recv(timeout=timeout))
        events.append(event)
        if event["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events


def create(ws, **body) -> None:
    ws.send(json.dumps({"type": "response.create", **body}))


def settled_rows(gateway, account_id: str, count: int, timeout: float = 10) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        rows = gateway.admin.usage(account_id)
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def comparable(event: dict):
    """An event without the fields that differ between any two responses (ids, times)."""
    if isinstance(event, dict):
        return {k: comparable(v) for k, v in event.items() if k not in VARYING}
    if isinstance(event, list):
        return [comparable(v) for v in event]
    return event


def test_a_handshake_without_a_valid_key_is_refused_in_the_envelope(gateway):
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url(gateway), additional_headers={"Authorization": "Bearer gw-not-a-key"}, open_timeout=10)
    response = refused.value.response
    assert response.status_code == 401
    error = orjson.loads(response.body)["error"]
    assert error["message"].startswith("Invalid token") and response.headers["x-request-id"] in error["message"]
    with pytest.raises(InvalidStatus) as no_key:
        connect(ws_url(gateway), open_timeout=10)
    assert no_key.value.response.status_code == 401
    assert "Traceback" not in gateway.output.text


def test_a_key_outside_its_ip_allowlist_is_refused_at_the_handshake(gateway):
    account = gateway.admin.account(unique_email())
    key = gateway.admin.key(account["id"], allow_ips=["10.9.9.9/32"])
    with pytest.raises(InvalidStatus) as refused:
        open_socket(gateway, key["secret"])
    assert refused.value.response.status_code == 403


@pytest.mark.parametrize("model", [GPT, CLAUDE])
def test_two_responses_on_one_socket_are_two_requests_each_billed_exactly(gateway, sim, funded, model):
    """The second names the first by ``previous_response_id`` and sends only its new input, as
    Codex does: the provider gets the whole history, and each response has its own row."""
    account, _, secret = funded
    marker = f"ws-two-{uuid.uuid4().hex[:8]}"
    with open_socket(gateway, secret) as ws:
        request_id = ws.response.headers["x-request-id"]
        create(ws, model=model, input=f"first {marker} [[sim:words=5]]", store=False)
        first = one_response(ws)
        create(ws, model=model, input=[{"role": "user", "content": f"second {marker} [[sim:words=7]]"}],
               previous_response_id=first[-1]["response"]["id"], store=False)
        second = one_response(ws)
    assert request_id.startswith("req_")
    for events in (first, second):
        assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed", events[-1]
    rows = settled_rows(gateway, account["id"], 2)
    assert [(r["endpoint"], r["stream"], r["status"]) for r in rows] == [("responses", True, "ok")] * 2
    assert len({r["request_id"] for r in rows} | {request_id}) == 3  # each response a request of its own
    input_price, output_price = PRICES[model]
    by_usage = sorted((e[-1]["response"]["usage"]["input_tokens"], e[-1]["response"]["usage"]["output_tokens"])
                      for e in (first, second))
    assert sorted((r["input_tokens"], r["output_tokens"]) for r in rows) == by_usage
    assert all(r["cost_nano"] == r["input_tokens"] * input_price + r["output_tokens"] * output_price for r in rows)
    balance = gateway.admin.balance(account["id"])
    assert balance["balance_nano"] == 10_000_000_000 - sum(r["cost_nano"] for r in rows)
    assert balance["held_nano"] == 0
    # the provider got the whole history on the second: the first input, its answer, the new input
    upstream = sim.requests(f"second {marker}")[-1]["json"]
    text = json.dumps(upstream)
    assert f"first {marker}" in text and f"second {marker}" in text
    answer = "".join(e["delta"] for e in first if e["type"] == "response.output_text.delta")
    assert answer and answer in text
    assert "previous_response_id" not in upstream


@pytest.mark.parametrize("model", [GPT, CLAUDE])
def test_the_events_are_the_ones_the_sse_stream_carries(gateway, funded, model):
    _, _, secret = funded
    prompt = f"same answer {uuid.uuid4().hex[:6]} [[sim:words=6]]"
    with open_socket(gateway, secret) as ws:
        create(ws, model=model, input=prompt)
        over_socket = one_response(ws)
    with httpx.stream("POST", gateway.url + "/v1/responses", headers={"authorization": f"Bearer {secret}"},
                      json={"model": model, "input": prompt, "stream": True}, timeout=30) as answer:
        assert answer.status_code == 200
        over_sse = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in over_socket] == [e["type"] for e in over_sse]
    assert comparable(over_socket) == comparable(over_sse)


def test_a_second_create_while_busy_gets_an_error_event_and_the_first_goes_on(gateway, funded):
    account, _, secret = funded
    with open_socket(gateway, secret) as ws:
        create(ws, model=GPT, input="slow one [[sim:words=8]] [[sim:fault=chunk_delay_ms:100]]")
        first_event = json.loads(ws.recv(timeout=30))
        create(ws, model=GPT, input="too soon")
        events = [first_event, *one_response(ws)]
        errors = [e for e in events if e["type"] == "error"]
        assert len(errors) == 1, events
        assert errors[0]["status"] == 409 and errors[0]["error"]["code"] == "response_in_progress"
        assert events[-1]["type"] == "error" or events[-1]["type"] == "response.completed"
        if events[-1]["type"] == "error":  # the error came first: the first response is still running
            events += one_response(ws)
        assert events[-1]["type"] == "response.completed"
        assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta").count(" ") >= 7
        create(ws, model=GPT, input="after it [[sim:words=2]]")  # the socket serves the next one
        assert one_response(ws)[-1]["type"] == "response.completed"
    rows = settled_rows(gateway, account["id"], 2)
    assert [r["status"] for r in rows] == ["ok", "ok"]


def test_a_socket_closed_mid_response_is_billed_as_a_disconnect(gateway, sim, funded):
    """Closed mid-response: the provider's stream is closed within the hang-up grace (the
    simulator still had most of the 20 s answer to write) and the charge is what was produced."""
    account, _, secret = funded
    marker = "ws" + uuid.uuid4().hex[:10]
    ws = open_socket(gateway, secret)
    create(ws, model=GPT, input=f"long one {marker} [[sim:words=400]] [[sim:fault=chunk_delay_ms:50]]")
    seen = [json.loads(ws.recv(timeout=30)) for _ in range(6)]
    assert any(e["type"] == "response.output_text.delta" for e in seen)
    ws.close()
    [row] = settled_rows(gateway, account["id"], 1)
    assert row["status"] == "client_disconnected"
    assert 0 < row["output_tokens"] < 200 and row["cost_nano"] > 0  # what was produced, not the whole answer
    entry = sim.requests(marker)[0]
    assert entry["cancelled"] is True and entry["completed"] is False and entry["events_sent"] < 200
    balance = gateway.admin.balance(account["id"])
    assert balance["held_nano"] == 0 and balance["balance_nano"] == 10_000_000_000 - row["cost_nano"]


def test_an_idle_socket_is_closed_and_one_that_works_is_not(gateway, funded):
    _, _, secret = funded
    with open_socket(gateway, secret) as ws:
        create(ws, model=GPT, input="in time [[sim:words=3]]")
        assert one_response(ws)[-1]["type"] == "response.completed"
        with pytest.raises(ConnectionClosed) as closed:  # the daemon closes it, with its reason
            ws.recv(timeout=LIVENESS_S)
    assert closed.value.rcvd.code == 1000 and closed.value.rcvd.reason == "idle"


def test_an_oversized_message_closes_the_socket_with_1009(gateway, funded):
    account, _, secret = funded
    with open_socket(gateway, secret) as ws:
        create(ws, model=GPT, input="x" * (MAX_BODY + 10))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd.code == 1009
    assert gateway.admin.usage(account["id"]) == []


def test_bad_messages_get_error_events_and_the_socket_stays_usable(gateway, funded):
    account, _, secret = funded
    with open_socket(gateway, secret) as ws:
        ws.send("not json")
        assert json.loads(ws.recv(timeout=10))["status"] == 400
        ws.send(json.dumps({"type": "session.update"}))
        error = json.loads(ws.recv(timeout=10))
        assert (error["type"], error["status"], error["error"]["param"]) == ("error", 400, "type")
        ws.send(b"\x00binary")
        assert json.loads(ws.recv(timeout=10))["error"]["code"] == "invalid_message"
        create(ws, model=GPT, input="hi", stream=False)
        assert json.loads(ws.recv(timeout=10))["error"]["param"] == "stream"
        create(ws, model="no-such-model", input="hi")
        assert json.loads(ws.recv(timeout=10))["error"]["code"] == "model_not_found"
        create(ws, model=GPT, input="fine [[sim:words=2]]")
        assert one_response(ws)[-1]["type"] == "response.completed"
    assert [r["status"] for r in gateway.admin.usage(account["id"])] == ["ok"]
    assert "Traceback" not in gateway.output.text


def test_a_warm_up_is_answered_free_and_the_next_response_carries_its_input(gateway, sim, funded):
    """Codex's ``generate: false`` on a new socket: no provider call, no charge; the next
    request names it and the provider gets the warm-up's input with the new one."""
    account, _, secret = funded
    marker = f"ws-warm-{uuid.uuid4().hex[:8]}"
    with open_socket(gateway, secret) as ws:
        create(ws, model=CLAUDE, instructions="be brief", input=[{"role": "user", "content": f"context {marker}"}],
               generate=False)
        warm = one_response(ws)
        assert [e["type"] for e in warm] == ["response.created", "response.completed"]
        assert warm[-1]["response"]["usage"]["output_tokens"] == 0
        assert gateway.admin.usage(account["id"]) == [] and sim.requests(marker) == []
        create(ws, model=CLAUDE, instructions="be brief", previous_response_id=warm[-1]["response"]["id"],
               input=[{"role": "user", "content": "go on [[sim:words=3]]"}])
        assert one_response(ws)[-1]["type"] == "response.completed"
    [upstream] = sim.requests(marker)
    assert f"context {marker}" in json.dumps(upstream["json"]["messages"]) and "go on" in json.dumps(upstream["json"])
    [row] = settled_rows(gateway, account["id"], 1)
    assert row["status"] == "ok"
    with open_socket(gateway, secret) as ws:  # a warm-up is still checked: the model must exist
        create(ws, model="no-such-model", input="x", generate=False)
        assert json.loads(ws.recv(timeout=10))["error"]["code"] == "model_not_found"
