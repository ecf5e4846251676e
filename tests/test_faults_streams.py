"""Streams under faults: idle timeout, client disconnect, upstream errors mid-stream.

Each test injects one fault with a ``[[sim:fault=...]]`` marker and then checks the
money: the usage row (status, tokens, cost to the nano-dollar), nothing left held, and
the audit ok. A unique nonce in each prompt finds the request in the simulator's log.
"""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from tests.faults import (
    assert_money_consistent, chat_body, headers, messages_body, new_account, settled_row, sim_entry, sse_events,
    stream_all, wait_until,
)
from tests.live import Daemon
from gatewayd import tokens
from gatewayd.billing.estimate import estimate_input_tokens, prompt_transcript

# per-token prices in nano-dollars (catalogue: USD per 1M tokens x 1000)
MINI = (400, 1600)  # gpt-4.1-mini
HAIKU = (1000, 5000)  # claude-haiku-4-5


def nonce() -> str:
    return "n" + uuid.uuid4().hex[:12]


def cost(row: dict, prices: tuple[int, int]) -> int:
    return row["input_tokens"] * prices[0] + row["output_tokens"] * prices[1]


def content_of_chat(events) -> str:
    text = ""
    for _, data in events:
        if data == "[DONE]":
            continue
        for choice in json.loads(data).get("choices") or ():
            text += choice.get("delta", {}).get("content") or ""
    return text


@pytest.fixture(scope="module")
def idle_daemon(sim, tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("idle"), sim.url, server="stream_idle_timeout_s = 1\n")
    yield d
    d.stop()


# -- 1. idle timeout --------------------------------------------------------------------


@pytest.mark.slow
def test_idle_timeout_chat_gets_error_event_and_pays_for_what_came(idle_daemon, sim):
    account, _, secret = new_account(idle_daemon)
    n = nonce()
    status, hdrs, raw = stream_all(idle_daemon.url, "/v1/chat/completions", secret,  # ends: the stall never does
                                   chat_body(f"{n} [[sim:words=20]] [[sim:fault=stall_after:3]]"))
    assert status == 200
    events = sse_events(raw)
    assert events[-1][1] != "[DONE]", "a timed-out stream must not look complete"
    error = json.loads(events[-1][1])["error"]
    assert error["type"] == "timeout_error" and "incomplete" in error["message"]
    assert len(content_of_chat(events[:-1]).split()) == 3
    row = settled_row(idle_daemon, account["id"], hdrs["x-request-id"])
    assert row["status"] == "idle_timeout"
    assert row["input_tokens"] > 0 and row["output_tokens"] > 0
    assert row["cost_nano"] == cost(row, MINI)
    assert_money_consistent(idle_daemon, account["id"])
    wait_until(lambda: sim_entry(sim, n)["cancelled"], 3, "the upstream to see the gateway hang up")


@pytest.mark.slow
def test_idle_timeout_messages_gets_error_event(idle_daemon):
    account, _, secret = new_account(idle_daemon)
    status, hdrs, raw = stream_all(idle_daemon.url, "/v1/messages", secret,
                                   messages_body(f"{nonce()} [[sim:words=20]] [[sim:fault=stall_after:4]]"))
    assert status == 200
    events = sse_events(raw)
    name, data = events[-1]
    assert name == "error" and json.loads(data)["error"]["type"] == "timeout_error"
    assert "message_stop" not in [e[0] for e in events]
    row = settled_row(idle_daemon, account["id"], hdrs["x-request-id"])
    assert row["status"] == "idle_timeout"
    # message_start reports output_tokens 1; the four words streamed are more than that
    assert row["output_tokens"] >= 4
    assert row["cost_nano"] == cost(row, HAIKU)
    assert_money_consistent(idle_daemon, account["id"])


@pytest.mark.slow
def test_non_streaming_request_has_no_idle_cutoff(idle_daemon):
    account, _, secret = new_account(idle_daemon)
    with httpx.Client(timeout=15) as http:
        response = http.post(idle_daemon.url + "/v1/chat/completions", headers=headers(secret),
                             json=chat_body(f"{nonce()} [[sim:fault=delay_ms:2500]]", stream=False))
    assert response.status_code == 200, response.text
    row = settled_row(idle_daemon, account["id"], response.headers["x-request-id"])
    assert row["status"] == "ok" and row["cost_nano"] == cost(row, MINI)
    assert_money_consistent(idle_daemon, account["id"])


# -- 2. client disconnect ---------------------------------------------------------------


def _read_then_hang_up(url: str, path: str, secret: str, body: dict, events_wanted: int) -> tuple[str, bytes]:
    got = b""
    with httpx.Client(timeout=15) as http:
        with http.stream("POST", url + path, json=body, headers=headers(secret)) as response:
            assert response.status_code == 200
            request_id = response.headers["x-request-id"]
            for chunk in response.iter_raw():
                got += chunk
                if got.count(b"\n\n") >= events_wanted:
                    break
    return request_id, got  # leaving both blocks closes the connection


def responses_body(text: str, *, stream: bool = True, model: str = "gpt-4.1-mini") -> dict:
    return {"model": model, "input": text, "stream": stream}


def chat_via_claude(text: str, **kw) -> dict:
    return chat_body(text, model="claude-haiku-4-5", **kw)


@pytest.mark.parametrize("path,make_body,prices", [
    ("/v1/chat/completions", chat_body, MINI),
    ("/v1/messages", messages_body, HAIKU),
    ("/v1/chat/completions", chat_via_claude, HAIKU),
    ("/v1/responses", responses_body, MINI),
    ("/v1/responses", lambda text, **kw: responses_body(text, model="claude-haiku-4-5", **kw), HAIKU),
], ids=["chat", "messages", "chat-via-messages", "responses", "responses-via-messages"])
def test_client_disconnect_catches_a_usage_already_on_its_way_within_the_grace(gateway, sim, path, make_body, prices):
    """A client that hangs up when the provider has little left to send: the gateway reads on
    within the hang-up grace (2 s; the rest of this answer takes a fraction of it), so the
    provider's own usage, already on its way, is the charge. (Issue 30 replaced issue 19's
    rule, which read every stream on to its end after the client left: a long answer is now
    closed at the grace's end and charged what was produced, tests/test_hangup_billing_live.py.)"""
    account, _, secret = new_account(gateway)
    full_status, full_headers, _ = stream_all(gateway.url, path, secret,
                                              make_body(f"{nonce()} [[sim:words=30]] [[sim:fault=chunk_delay_ms:5]]"))
    assert full_status == 200
    full = settled_row(gateway, account["id"], full_headers["x-request-id"])
    n = nonce()
    body = make_body(f"{n} [[sim:words=30]] [[sim:fault=chunk_delay_ms:5]]")
    request_id, got = _read_then_hang_up(gateway.url, path, secret, body, events_wanted=8)
    row = settled_row(gateway, account["id"], request_id)
    entry = sim_entry(sim, n)
    assert entry["cancelled"] is False and entry["completed"] is True, "the usage on its way was not read"
    assert entry["stream"] is True
    assert row["status"] == "client_disconnected"
    # the provider's own count of the whole answer, as for the request read to the end
    assert (row["input_tokens"], row["output_tokens"]) == (full["input_tokens"], full["output_tokens"]), (row, full)
    assert row["cost_nano"] == cost(row, prices) == full["cost_nano"]
    assert_money_consistent(gateway, account["id"])


# -- 3. upstream failures mid-stream ----------------------------------------------------


def test_upstream_error_event_mid_stream_chat(gateway, sim):
    account, _, secret = new_account(gateway)
    status, hdrs, raw = stream_all(gateway.url, "/v1/chat/completions", secret,
                                   chat_body(f"{nonce()} [[sim:words=30]] [[sim:fault=error_after:5]]"))
    assert status == 200
    events = sse_events(raw)
    assert "error" in json.loads(events[-1][1])
    assert all(data != "[DONE]" for _, data in events)
    assert len(content_of_chat(events[:-1]).split()) == 5
    row = settled_row(gateway, account["id"], hdrs["x-request-id"])
    assert row["status"] == "upstream_error"
    assert row["output_tokens"] >= 5 and row["cost_nano"] == cost(row, MINI)
    rows = gateway.admin.usage(account["id"])
    assert len(rows) == 1, "charged more than once"
    assert_money_consistent(gateway, account["id"])


def test_upstream_error_event_mid_stream_messages(gateway):
    account, _, secret = new_account(gateway)
    status, hdrs, raw = stream_all(gateway.url, "/v1/messages", secret,
                                   messages_body(f"{nonce()} [[sim:words=30]] [[sim:fault=error_after:5]]"))
    assert status == 200
    events = sse_events(raw)
    assert events[-1][0] == "error"
    assert "message_stop" not in [e[0] for e in events]
    row = settled_row(gateway, account["id"], hdrs["x-request-id"])
    assert row["status"] == "upstream_error" and row["output_tokens"] >= 5
    assert row["cost_nano"] == cost(row, HAIKU)
    assert len(gateway.admin.usage(account["id"])) == 1
    assert_money_consistent(gateway, account["id"])


def test_upstream_error_mid_stream_translated_chat_to_messages(gateway):
    """chat client, Anthropic upstream: the messages error event becomes a chat error chunk."""
    account, _, secret = new_account(gateway)
    status, hdrs, raw = stream_all(gateway.url, "/v1/chat/completions", secret,
                                   chat_body(f"{nonce()} [[sim:words=30]] [[sim:fault=error_after:5]]",
                                             model="claude-haiku-4-5"))
    assert status == 200
    events = sse_events(raw)
    assert "error" in json.loads(events[-1][1]), events[-3:]
    assert all(data != "[DONE]" for _, data in events)
    row = settled_row(gateway, account["id"], hdrs["x-request-id"])
    assert row["status"] != "ok" and row["output_tokens"] >= 5
    assert row["cost_nano"] == cost(row, HAIKU)
    assert_money_consistent(gateway, account["id"])


@pytest.mark.parametrize("path,make_body", [
    ("/v1/chat/completions", chat_body), ("/v1/messages", messages_body)], ids=["chat", "messages"])
def test_upstream_drops_connection_mid_stream(gateway, path, make_body):
    account, _, secret = new_account(gateway)
    body = make_body(f"{nonce()} [[sim:words=30]] [[sim:fault=drop_after:4]]")
    status, hdrs, raw = stream_all(gateway.url, path, secret, body)
    assert status == 200
    name, data = sse_events(raw)[-1]
    assert "incomplete" in data
    row = settled_row(gateway, account["id"], hdrs["x-request-id"])
    assert row["status"] == "upstream_broken" and row["output_tokens"] >= 4
    if path == "/v1/messages":
        assert name == "error"
    else:
        # OpenAI reports usage only at the end: the input is the prompt counted, not the estimate
        text, flat = prompt_transcript(body, "chat")
        assert row["input_tokens"] == tokens.count(text) + flat != estimate_input_tokens(body, "chat")
    assert_money_consistent(gateway, account["id"])


def test_upstream_without_final_usage_is_billed_from_the_stream(gateway):
    account, _, secret = new_account(gateway)
    status, hdrs, raw = stream_all(gateway.url, "/v1/chat/completions", secret,
                                   chat_body(f"{nonce()} [[sim:words=25]] [[sim:fault=no_usage]]"))
    assert status == 200 and sse_events(raw)[-1][1] == "[DONE]"
    row = settled_row(gateway, account["id"], hdrs["x-request-id"])
    assert row["status"] == "ok" and row["output_tokens"] >= 25
    assert_money_consistent(gateway, account["id"])


def test_client_giving_up_on_a_non_streaming_request_pays_the_answer_the_provider_finished(gateway, sim):
    """OpenAI finishes (and bills) a non-streamed answer whose client left (docs/billing.md, "A
    client that hangs up"): the gateway reads it on in a task the daemon owns and charges the
    provider's own usage. (The rule before issue 30 closed the request and charged the input
    only, while the provider billed the whole answer.)"""
    account, _, secret = new_account(gateway)
    n = nonce()
    with httpx.Client(timeout=httpx.Timeout(10, read=0.5)) as http:
        with pytest.raises(httpx.ReadTimeout):
            http.post(gateway.url + "/v1/chat/completions", headers=headers(secret),
                      json=chat_body(f"{n} [[sim:words=20]] [[sim:fault=delay_ms:2500]]", stream=False))
    row = settled_row(gateway, account["id"], timeout=10)
    entry = sim_entry(sim, n)
    # the gateway stayed for the answer (it did not close the provider's request), which came whole
    assert entry["completed"] is True and entry["cancelled"] is False
    assert entry["finished_after_client_left"] is False
    assert row["status"] == "client_disconnected" and row["stream"] is False
    usage = entry["answer"]["usage"]
    assert (row["input_tokens"], row["output_tokens"]) == (usage["prompt_tokens"], usage["completion_tokens"])
    assert row["cost_nano"] == cost(row, MINI)
    assert_money_consistent(gateway, account["id"])


@pytest.mark.slow
@pytest.mark.parametrize("path,make_body", [
    ("/v1/chat/completions", chat_via_claude),
    ("/v1/responses", responses_body),
], ids=["chat-via-messages", "responses"])
def test_idle_timeout_on_other_routes_ends_with_the_clients_error_event(idle_daemon, path, make_body):
    account, _, secret = new_account(idle_daemon)
    status, hdrs, raw = stream_all(idle_daemon.url, path, secret,
                                   make_body(f"{nonce()} [[sim:words=20]] [[sim:fault=stall_after:3]]"))
    assert status == 200
    name, data = sse_events(raw)[-1]
    doc = json.loads(data)
    if path == "/v1/responses":
        assert name == "error" and doc["type"] == "error" and "incomplete" in doc["message"]
    else:
        assert doc["error"]["type"] == "timeout_error"
    row = settled_row(idle_daemon, account["id"], hdrs["x-request-id"])
    assert row["status"] == "idle_timeout" and row["output_tokens"] >= 3
    assert_money_consistent(idle_daemon, account["id"])
