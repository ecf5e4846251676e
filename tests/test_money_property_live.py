"""Issue 19, point 8: over random bodies and random provider behaviours, the charge is the
provider's own bill and never escapes the hold.

Each example sends one request through the daemon to the simulator, with a random model
and route (pass-through and translated, every upstream protocol), random caps, ``n``,
streaming, hidden reasoning, cache reads and 5-minute / 1-hour writes, long-context prompts,
service tiers, server tools and a client that may hang up mid-stream. Then:

- ``cost_nano`` equals ``tests/sim/provider_bill.provider_bill`` of the answer the
  simulator actually produced (its request log), computed from the vendors' rules without
  gatewayd's billing code;
- ``cost_nano <= hold_nano x (1 + HOLD_TOLERANCE)``.

Long-context prompts are real long prompts (~600 KB of words): a provider's tokenizer counts
what the body holds, and so does the hold's estimate.

A client that leaves is not drawn here: tests/test_hangup_billing_live.py and
tests/test_hangups_inproc.py check those charges (docs/billing.md, "A client that hangs up").
"""

from __future__ import annotations

import os
import uuid
from fractions import Fraction

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gatewayd.billing.estimate import HOLD_TOLERANCE
from gatewayd.config import load_config
from tests.faults import headers, new_account, settled_row, wait_until
from tests.sim.provider_bill import provider_bill

MODELS = load_config(None, environ={}).models  # the default catalogue (its providers need no key here)

# (client format, model, upstream protocol as provider_bill names it)
ROUTES = [
    ("chat", "gpt-4.1-mini", "chat"),
    ("chat", "o4-mini", "chat"),
    ("responses", "gpt-4.1", "responses"),
    ("messages", "claude-sonnet-4-5", "messages"),
    ("chat", "claude-haiku-4-5", "messages"),
    ("responses", "claude-sonnet-4-5", "messages"),
    ("chat", "gemini-2.5-pro", "gemini"),
]
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}


def prices_of(model_id: str) -> dict:
    """The catalogue's schedule in provider_bill's shape (nano a token / a call)."""
    m = MODELS[model_id]

    def rates(r) -> dict:
        return {"input": r.input, "output": r.output, "cached_input": r.cached_input, "cache_write": r.cache_write,
                "cache_write_1h": r.cache_write_1h}

    out = {**rates(m.base_rates), "tools": dict(m.tool_prices),
           "service_tiers": {name: rates(r) for name, r in m.service_tiers.items()}}
    if m.long_context is not None:
        out["long_context"] = {"above_input_tokens": m.long_context.above_input_tokens, **rates(m.long_context.rates)}
    return out


@st.composite
def scenarios(draw) -> dict:
    client_format, model, protocol = draw(st.sampled_from(ROUTES))
    m = MODELS[model]
    markers = [f"[[sim:words={draw(st.integers(0, 120))}]]"]
    if draw(st.booleans()):
        markers.append(f"[[sim:reasoning={draw(st.integers(1, 3000))}]]")
    cached = {}
    if client_format == "messages":  # cache_control reaches the provider only on /v1/messages
        for name in ("cache_read", "cache_write", "cache_write_1h"):
            if draw(st.booleans()):
                cached[name] = draw(st.integers(1, 5000))
                markers.append(f"[[sim:{name}={cached[name]}]]")
    filler = {"lo": 0, "lorem": 0}  # words of filler text (made in the test, not printed)
    if m.long_context is not None and draw(st.integers(0, 3)) == 0:
        # a real long prompt (the simulator counts words): the hold sees its bytes, as it would
        # see a real one's; ~600 KB, what agent clients send every turn
        filler["lo"] = m.long_context.above_input_tokens + draw(st.integers(1, 20000))
    stream = draw(st.booleans())
    body: dict = {"model": model, "stream": stream}
    cap = draw(st.one_of(st.none(), st.integers(1, 8000)))
    text = " ".join(markers)
    if cached:
        # the simulator counts cache tokens on top of the prompt's words; a provider counts them
        # inside the prompt: the prompt carries that many tokens' worth of bytes ("lorem " is
        # two tokens of the estimate a word), and says where the cache breakpoint is
        filler["lorem"] = sum(cached.values())
    if client_format == "messages":
        body["max_tokens"] = cap or 4000
        control = {"type": "ephemeral", **({"ttl": "1h"} if "cache_write_1h" in cached else {})}
        body["messages"] = [{"role": "user", "content": [{"type": "text", "text": text, "cache_control": control}]}]
        if draw(st.booleans()):
            body["tools"] = [{"type": "web_search_20250305", "name": "web_search",
                              "max_uses": draw(st.integers(1, 4))}]
            markers.append(f"[[sim:web_search={draw(st.integers(1, 6))}]]")
    elif client_format == "chat":
        body["messages"] = [{"role": "user", "content": text}]
        if cap is not None:
            body["max_completion_tokens"] = cap
        if m.family == "gpt" and draw(st.booleans()):
            body["n"] = draw(st.integers(1, 4))
        if m.service_tiers and draw(st.booleans()):
            body["service_tier"] = draw(st.sampled_from(sorted(m.service_tiers)))
    else:
        body["input"] = text
        if cap is not None:
            body["max_output_tokens"] = cap
        if m.service_tiers and draw(st.booleans()):
            body["service_tier"] = draw(st.sampled_from(sorted(m.service_tiers)))
        if m.family == "gpt" and draw(st.booleans()):
            body["tools"] = [{"type": "web_search"}]
            markers.append(f"[[sim:web_search={draw(st.integers(1, 3))}]]")
    hang_up = draw(st.one_of(st.none(), st.integers(1, 6))) if stream else None
    return {"format": client_format, "protocol": protocol, "body": body, "markers": markers, "hang_up": hang_up,
            "filler": filler}


def _send(url: str, secret: str, scenario: dict) -> str | None:
    """The request, read whole or hung up after ``hang_up`` chunks; its request id, or None
    when the balance cannot cover its hold (the spec's 403, before the provider)."""
    path, body = PATHS[scenario["format"]], scenario["body"]
    with httpx.Client(timeout=30) as http:
        if not body["stream"]:
            response = http.post(url + path, json=body, headers=headers(secret))
            if _refused_for_balance(response):
                return None
            assert response.status_code == 200, response.text
            return response.headers["x-request-id"]
        with http.stream("POST", url + path, json=body, headers=headers(secret)) as response:
            if _refused_for_balance(response):
                return None
            assert response.status_code == 200, response.read()
            request_id = response.headers["x-request-id"]
            for n, _ in enumerate(response.iter_raw(), 1):
                if scenario["hang_up"] is not None and n >= scenario["hang_up"]:
                    break
    return request_id


def _refused_for_balance(response: httpx.Response) -> bool:
    if response.status_code != 403:
        return False
    response.read()
    return response.json()["error"]["code"] == "insufficient_user_quota"


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("GATEWAY_PROPERTY_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=scenarios())
def test_the_charge_is_the_providers_bill_and_within_the_hold(gateway, sim, scenario):
    account, _, secret = new_account(gateway)
    nonce = "p" + uuid.uuid4().hex[:12]
    body = scenario["body"]
    filler = scenario["filler"]
    text = f"{nonce} " + " ".join(scenario["markers"]) + " " + "lo " * filler["lo"] + "lorem " * filler["lorem"]
    if "messages" in body and isinstance(body["messages"][0]["content"], list):
        body["messages"][0]["content"][0]["text"] = text
    elif "messages" in body:
        body["messages"][0]["content"] = text
    else:
        body["input"] = text
    request_id = _send(gateway.url, secret, scenario)
    if request_id is None:  # the hold was more than the balance: nothing reached the provider
        assert sim.requests(nonce) == [] and gateway.admin.usage(account["id"]) == []
        return
    row = settled_row(gateway, account["id"], request_id, timeout=15)
    entry = wait_until(lambda: next((e for e in sim.requests(nonce) if e["completed"]), None), 10,
                       "the provider's answer to be complete")
    billed = provider_bill(scenario["protocol"], entry["answer"], prices_of(body["model"]))
    assert row["cost_nano"] == billed, (row, entry["answer"].get("usage") or entry["answer"].get("usageMetadata"))
    assert row["cost_nano"] <= row["hold_nano"] * (1 + HOLD_TOLERANCE), row
    assert sum(line["nano"] for line in row["breakdown"]["lines"]) == row["cost_nano"]
    assert Fraction(row["cost_nano"]) >= 0
