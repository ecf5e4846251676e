"""Routes live: two simulators as two providers of one model, behind a real daemon.

Simulator ``a`` (OpenAI protocol, or Anthropic for the messages model) is each model's
first route (priority 1); simulator ``b`` is the second, spoken to as Azure OpenAI
(deployment URLs, api-version, api-key). One of them is made to fail with the
simulator's settings (docs/simulator.md): every client request must still succeed once,
be billed once, and its usage row must name the provider that served it.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import time

import httpx
import pytest

from tests.faults import assert_money_consistent, chat_body, headers, messages_body, new_account, settled_row
from tests.live import BIN, Daemon, Sim


def routed_models(a_url: str, b_url: str, names: list[str]) -> str:
    text = f"""
[[providers]]
name = "sim-a"
protocol = "openai"
base_url = "{a_url}/v1"
api_key = "key-a"

[[providers]]
name = "sim-b"
protocol = "azure-openai"
base_url = "{b_url}/openai"
api_version = "2024-10-21"
api_key = "key-b"

[[providers]]
name = "anthropic-a"
protocol = "anthropic"
base_url = "{a_url}"
api_key = "key-a"

[[providers]]
name = "anthropic-b"
protocol = "anthropic"
base_url = "{b_url}"
api_key = "key-b"

[[models]]
id = "routed-claude"
input_price = 3.0
output_price = 15.0
[[models.routes]]
provider = "anthropic-a"
priority = 1
[[models.routes]]
provider = "anthropic-b"
upstream_id = "routed-claude-20250929"
"""
    for name in names:
        text += f"""
[[models]]
id = "{name}"
input_price = 1.0
output_price = 2.0
[[models.routes]]
provider = "sim-a"
priority = 1
[[models.routes]]
provider = "sim-b"
upstream_id = "{name}-deployment"
"""
    return text


ROUTING = "[routing]\nfirst_byte_timeout_s = 1\nnon_stream_first_byte_timeout_s = 1\n"
MODELS = ["routed-503", "routed-429", "routed-hang", "routed-ok", "routed-none"]


@pytest.fixture(scope="module")
def sims():
    a, b = Sim(), Sim()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(scope="module")
def routed(sims, tmp_path_factory):
    a, b = sims
    daemon = Daemon(tmp_path_factory.mktemp("routes"), a.url, extra=routed_models(a.url, b.url, MODELS) + ROUTING)
    yield daemon
    daemon.stop()


@pytest.fixture
def trouble(sims):
    """Set simulator a's markers for one test."""
    a, _ = sims

    def set_markers(markers: str) -> None:
        a.http.put("/_sim/settings", json={"markers": markers}).raise_for_status()

    yield set_markers
    set_markers("")


def post(daemon, path: str, secret: str, body: dict, timeout: float = 20) -> httpx.Response:
    with httpx.Client(timeout=timeout) as http:
        return http.post(daemon.url + path, json=body, headers=headers(secret))


def served_by(daemon, account: dict, response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return settled_row(daemon, account["id"], response.headers["x-request-id"])


@pytest.mark.parametrize("fault", ["503", "429"])
def test_a_provider_that_answers_an_error_gives_way_to_the_other(routed, sims, trouble, fault):
    a, b = sims
    model = f"routed-{fault}"
    trouble(f"[[sim:fault=status:{fault}]]")
    account, _, secret = new_account(routed)
    rows = []
    for i, stream in enumerate((False, True, False)):
        response = post(routed, "/v1/chat/completions", secret, chat_body(f"hello {fault} {i}", model=model,
                                                                       stream=stream))
        rows.append(served_by(routed, account, response))
        assert "simulated" in response.text
    assert [(r["provider"], r["status"]) for r in rows] == [("sim-b", "ok")] * 3
    first_attempts = [r["attempts"] for r in rows]
    if fault == "429":
        assert first_attempts == [2, 1, 1]  # Retry-After: 7 took sim-a out after its first answer
    else:
        assert first_attempts[:2] == [2, 2]  # two failures in a row; the third cools it (default 3)
    assert len(routed.admin.usage(account["id"])) == 3
    assert_money_consistent(routed, account["id"])
    seen_b = b.last_request(f"hello {fault} 0")
    assert seen_b["path"] == f"/openai/deployments/{model}-deployment/chat/completions"
    assert seen_b["query"] == "api-version=2024-10-21" and seen_b["headers"]["api-key"] == "key-b"
    assert "authorization" not in seen_b["headers"]
    assert a.last_request(f"hello {fault} 0")["status"] == int(fault)


def test_a_provider_that_hangs_before_the_first_byte_is_left_after_the_first_byte_timeout(routed, sims, trouble):
    trouble("[[sim:fault=delay_ms:30000]]")
    account, _, secret = new_account(routed)
    for stream in (True, False):
        response = post(routed, "/v1/chat/completions", secret, chat_body(f"hang {stream}", model="routed-hang",
                                                                       stream=stream))
        # served by sim-b on a second attempt: sim-a was left at the first-byte timeout, not waited for
        row = served_by(routed, account, response)
        assert (row["provider"], row["attempts"], row["cost_nano"] > 0) == ("sim-b", 2, True)
    assert_money_consistent(routed, account["id"])


def test_messages_format_fails_over_between_anthropic_providers(routed, trouble, sims):
    _, b = sims
    trouble("[[sim:fault=status:529]]")
    account, _, secret = new_account(routed)
    for stream in (False, True):
        response = post(routed, "/v1/messages", secret, messages_body(f"claude {stream}", model="routed-claude",
                                                                    stream=stream))
        row = served_by(routed, account, response)
        assert (row["provider"], row["attempts"]) == ("anthropic-b", 2)
    assert b.last_request("claude True")["json"]["model"] == "routed-claude-20250929"
    assert_money_consistent(routed, account["id"])


def test_responses_through_azure_use_the_responses_path_with_the_deployment_as_model(routed, trouble, sims):
    _, b = sims
    trouble("[[sim:fault=status:500]]")
    account, _, secret = new_account(routed)
    response = post(routed, "/v1/responses", secret, {"model": "routed-ok", "input": "resp via azure"})
    row = served_by(routed, account, response)
    assert response.json()["output"][0]["content"][0]["text"].startswith("This is a simulated reply")
    assert (row["provider"], row["attempts"]) == ("sim-b", 2)
    seen = b.last_request("resp via azure")
    assert (seen["path"], seen["query"], seen["json"]["model"]) == (
        "/openai/responses", "api-version=2024-10-21", "routed-ok-deployment")


def test_a_client_error_is_not_retried_elsewhere(routed, sims):
    a, b = sims
    account, _, secret = new_account(routed)
    response = post(routed, "/v1/chat/completions", secret,
                    chat_body("bad one [[sim:fault=status:400]]", model="routed-ok", stream=False))
    assert response.status_code == 400 and response.json()["error"]["message"] == "simulated error 400"
    assert a.requests("bad one") and not b.requests("bad one")
    row = settled_row(routed, account["id"], response.headers["x-request-id"])
    assert (row["provider"], row["attempts"], row["cost_nano"]) == ("sim-a", 1, 0)


def test_every_route_failing_gives_the_last_provider_error(routed, sims):
    account, _, secret = new_account(routed)
    response = post(routed, "/v1/chat/completions", secret,
                    chat_body("all down [[sim:fault=status:503]]", model="routed-none", stream=False))
    assert response.status_code == 503 and response.json()["error"]["message"] == "simulated error 503"
    row = settled_row(routed, account["id"], response.headers["x-request-id"])
    assert (row["provider"], row["attempts"], row["status"], row["cost_nano"]) == ("sim-b", 2, "upstream_error", 0)
    assert_money_consistent(routed, account["id"])


def test_gatewayctl_routes_shows_state_errors_and_latency(routed, trouble):
    trouble("[[sim:fault=status:503]]")
    account, _, secret = new_account(routed)
    for i in range(3):  # three conversations (one would stick to sim-b after its first turn)
        assert post(routed, "/v1/chat/completions", secret,
                    chat_body(f"cool me {i}", model="routed-none", stream=False)).status_code == 200
    out = subprocess.run([str(BIN / "gatewayctl"), "routes", "--model", "routed-none", "--json",
                          "--socket", routed.socket], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    rows = {r["provider"]: r for r in json.loads(out.stdout)}
    assert set(rows) == {"sim-a", "sim-b"}
    assert rows["sim-a"]["state"] == "cooling" and rows["sim-a"]["cooling_for_s"] > 0, json.dumps(rows)
    assert rows["sim-a"]["last_error"] == "503: simulated error 503"
    assert rows["sim-a"]["recent_errors"][-1]["error"] == "503: simulated error 503"
    assert rows["sim-b"]["state"] == "healthy" and rows["sim-b"]["latency_ms"] > 0
    table = subprocess.run([str(BIN / "gatewayctl"), "routes", "--socket", routed.socket],
                           capture_output=True, text=True, timeout=30, env={"COLUMNS": "250"})
    assert table.returncode == 0 and "sim-a/routed-none" in table.stdout and "cooling" in table.stdout
    metrics = httpx.get(routed.url + "/metrics", timeout=10).text
    assert 'gateway_route_up{route="sim-a/routed-none"} 0.0' in metrics
    assert 'gateway_route_up{route="sim-b/routed-none-deployment"} 1.0' in metrics
    assert "route sim-a/routed-none is cooling down" in routed.output.text
    usage = subprocess.run([str(BIN / "gatewayctl"), "usage", account["id"], "--json", "--socket", routed.socket],
                           capture_output=True, text=True, timeout=30)
    assert [(r["provider"], r["attempts"]) for r in json.loads(usage.stdout)][-1] == ("sim-b", 2)


@pytest.mark.slow
def test_killing_one_provider_mid_traffic_loses_no_request(tmp_path):
    """Non-streaming requests waiting on provider a when it is killed, and every request after,
    are served by b; each is answered once and billed once."""
    a, b = Sim(), Sim()
    daemon = Daemon(tmp_path, a.url, extra=routed_models(a.url, b.url, ["routed-kill"]))
    try:
        account, _, secret = new_account(daemon)

        def one(i: int) -> httpx.Response:
            stream = i % 3 == 0
            text = f"req {i} [[sim:fault=delay_ms:400]]" if not stream else f"req {i}"
            return post(daemon, "/v1/chat/completions", secret, chat_body(text, model="routed-kill", stream=stream))

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(one, i) for i in range(24)]
            deadline = time.monotonic() + 30
            while len(daemon.admin.usage(account["id"])) < 4:  # some answered by a, others waiting on it
                assert time.monotonic() < deadline, "no request was answered"
                time.sleep(0.05)
            a.proc.kill()
            a.proc.wait(5)
            responses = [f.result() for f in futures]
        assert [r.status_code for r in responses] == [200] * 24, [r.text for r in responses if r.status_code != 200]
        assert all("simulated" in r.text for r in responses)
        rows = {r["request_id"]: r for r in daemon.admin.usage(account["id"], limit=100)}
        assert set(rows) == {r.headers["x-request-id"] for r in responses}
        assert all(r["status"] == "ok" and r["cost_nano"] > 0 for r in rows.values())
        providers = [(r["provider"], r["attempts"]) for r in rows.values()]
        assert ("sim-a", 1) in providers  # a served before it died
        assert ("sim-b", 2) in providers  # requests waiting on a moved to b
        assert all(p == "sim-b" for p, n in providers if n == 2)
        assert_money_consistent(daemon, account["id"])
    finally:
        daemon.stop()
        b.stop()
        if a.proc.poll() is None:
            a.stop()
