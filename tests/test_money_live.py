"""Issue 19's table of exploits, each tried the way a hostile account holder would, over
loopback against the daemon with the simulator billing the way the providers do.

Each test asserts the two halves of the promise: the charge is what the provider bills
(``tests/sim/provider_bill.py``, computed from the provider's own answer without gatewayd's
billing code), and it never escapes the hold.
"""

from __future__ import annotations

import uuid

import httpx

from tests.faults import assert_money_consistent, headers, new_account, settled_row, sim_entry
from tests.sim.provider_bill import provider_bill

def nonce() -> str:
    return f"n{uuid.uuid4().hex[:12]}"


O4_MINI = {"input": 1100, "output": 4400, "cached_input": 275}


def _read_until(url: str, path: str, secret: str, body: dict, word: bytes) -> str:
    """Stream, and hang up as soon as ``word`` has arrived."""
    seen = b""
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", url + path, json=body, headers=headers(secret)) as response:
            assert response.status_code == 200, response.read()
            request_id = response.headers["x-request-id"]
            for chunk in response.iter_raw():
                seen += chunk
                if word in seen:
                    break
    return request_id


def test_hanging_up_at_the_visible_end_still_pays_the_hidden_reasoning(gateway, sim):
    """A reasoning model streams a short visible answer after 20,000 hidden reasoning tokens;
    the client hangs up at ``END``. The provider bills the reasoning: so does the gateway."""
    account, _, secret = new_account(gateway)
    n = nonce()
    body = {"model": "o4-mini", "stream": True, "max_completion_tokens": 30000,
            "messages": [{"role": "user", "content": f"{n} [[sim:reasoning=20000]] [[sim:end=END]] [[sim:tail=40]]"}]}
    request_id = _read_until(gateway.url, "/v1/chat/completions", secret, body, b"END")
    row = settled_row(gateway, account["id"], request_id, timeout=15)
    entry = sim_entry(sim, n)
    assert entry["completed"], "the provider's stream was not read to its usage"
    billed = provider_bill("chat", entry["answer"], O4_MINI)
    assert row["output_tokens"] >= 20000, row
    assert row["cost_nano"] == billed, (row, entry["answer"]["usage"])
    assert_money_consistent(gateway, account["id"])


def test_hanging_up_when_the_usage_is_far_off_pays_the_hold_s_output_allowance(gateway, sim):
    """The same hang-up at ``END``, but the rest of the answer takes 20 s: the provider's stream
    is closed at the hang-up grace's end with its usage unsent (issue 30), and a model that
    reasons out of sight is charged the hold's whole output allowance -- at least the reasoning
    it may have billed, never more than the hold (docs/billing.md)."""
    account, _, secret = new_account(gateway)
    n = nonce()
    body = {"model": "o4-mini", "stream": True, "max_completion_tokens": 30000,
            "messages": [{"role": "user", "content": f"{n} [[sim:reasoning=20000]] [[sim:end=END]] [[sim:tail=400]] "
                                                     "[[sim:fault=chunk_delay_ms:50]]"}]}
    request_id = _read_until(gateway.url, "/v1/chat/completions", secret, body, b"END")
    row = settled_row(gateway, account["id"], request_id, timeout=15)
    entry = sim_entry(sim, n)
    assert not entry["completed"] and entry["cancelled"], "the provider's stream was read past the grace"
    assert row["status"] == "client_disconnected"
    assert row["output_tokens"] == 30000, row  # the allowance: more than the 20,000 hidden tokens
    assert row["cost_nano"] <= row["hold_nano"], row
    assert_money_consistent(gateway, account["id"])
