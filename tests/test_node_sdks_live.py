"""The official Node SDKs (``openai``, ``@anthropic-ai/sdk``) as clients of a live gatewayd.

Each scenario is a script in ``tests/node/`` run with Node against the session's gateway
(simulator upstream); it prints one JSON document, and this file checks it against what the
simulator received and what the gateway billed: tool call arguments intact, thinking
signatures carried, embeddings decoded from the SDK's base64 default, and usage rows equal to
the usage the SDK reported.

The SDKs are pinned in ``tests/node/package.json`` (and its lockfile) and installed into
``tests/node/node_modules`` (ignored by git): ``.ci/run`` installs them with ``npm ci``; the
fixture does the same when they are missing or stale, and the tests are skipped, with the
reason, when Node or npm is missing or the registry cannot be reached.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from gatewayd.sim.embeddings import DEFAULT_DIMENSIONS, sim_embedding
from tests.live import ROOT

pytestmark = pytest.mark.slow

NODE_DIR = ROOT / "tests" / "node"
PINS: dict[str, str] = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]
START = 10_000_000_000
# nano-dollars per token (input, output), from the default catalogue
PRICES = {
    "gpt-4.1": (2_000, 8_000),
    "claude-sonnet-4-5": (3_000, 15_000),
    "text-embedding-3-small": (20, 0),
}


def _installed() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PINS:
        try:
            versions[name] = json.loads((NODE_DIR / "node_modules" / name / "package.json").read_text())["version"]
        except (OSError, ValueError, KeyError):
            versions[name] = None
    return versions


@pytest.fixture(scope="session")
def node_sdks() -> Path:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: cannot run the Node SDK tests")
    if _installed() != PINS:
        if shutil.which("npm") is None:
            pytest.skip("npm is not installed: cannot install the Node SDKs")
        try:
            done = subprocess.run(
                ["npm", "ci", "--prefix", str(NODE_DIR), "--no-audit", "--no-fund", "--fetch-retries=1"],
                capture_output=True, text=True, timeout=300,
            )
        except subprocess.TimeoutExpired:
            pytest.skip("npm ci in tests/node timed out (registry unreachable?)")
        if done.returncode != 0 or _installed() != PINS:
            pytest.skip(f"npm ci in tests/node failed (registry unreachable?): "
                        f"{(done.stderr or done.stdout).strip()[-500:]}")
    return NODE_DIR


def run_node(script: str, gateway, secret: str, model: str, marker: str) -> dict:
    env = {
        "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"),
        "GATEWAY_URL": gateway.url, "GATEWAY_KEY": secret, "GATEWAY_MODEL": model, "GATEWAY_MARKER": marker,
    }
    done = subprocess.run(["node", str(NODE_DIR / script)], env=env, cwd=NODE_DIR,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"node {script} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return json.loads(done.stdout)


def rows_oldest_first(gateway, account, count: int) -> list[dict]:
    rows = gateway.admin.usage(account["id"])
    assert len(rows) == count, rows
    return rows[::-1]


def assert_balance(gateway, account, rows: list[dict]) -> None:
    balance = gateway.admin.balance(account["id"])
    assert balance["held_nano"] == 0
    assert balance["balance_nano"] == START - sum(r["cost_nano"] for r in rows)


def cost(model: str, input_tokens: int, output_tokens: int) -> int:
    input_rate, output_rate = PRICES[model]
    return input_tokens * input_rate + output_tokens * output_rate


# -- openai: chat streaming with tools ----------------------------------------------------


@pytest.mark.parametrize("model", ["gpt-4.1", "claude-sonnet-4-5"])
def test_openai_node_chat_stream_with_parallel_tools_and_results(node_sdks, gateway, sim, funded, model):
    account, _, secret = funded
    marker = f"node-chat-{uuid.uuid4().hex[:8]}"
    out = run_node("chat_stream_tools.mjs", gateway, secret, model, marker)
    first, second = out["first"], out["second"]

    assert first["finish_reason"] == "tool_calls"
    calls = first["tool_calls"]
    assert [(c["type"], c["name"]) for c in calls] == [("function", "get_weather"), ("function", "lookup")]
    assert json.loads(calls[0]["arguments"]) == {"city": "sim-city", "unit": "celsius", "days": 42}
    assert json.loads(calls[1]["arguments"]) == {"query": "sim-query", "exact": True}
    assert [(d["name"], d["arguments"]) for d in first["arguments_done"]] == [
        (c["name"], c["arguments"]) for c in calls]  # the SDK saw each call's arguments complete
    assert len({c["id"] for c in calls}) == 2 and all(c["id"] for c in calls)
    assert first["chunks"] > 2 * 3  # really streamed: at least three argument fragments per call

    assert second["finish_reason"] == "stop"
    assert second["content"] == "Tool result received: result of lookup"
    assert second["tool_calls"] == []

    # what reached the provider on the second turn: both results, each under its call's id
    upstream = sim.last_request(marker)
    if model == "gpt-4.1":
        assert upstream["path"] == "/v1/chat/completions"
        results = [(m["tool_call_id"], m["content"]) for m in upstream["json"]["messages"] if m["role"] == "tool"]
    else:
        assert upstream["path"] == "/v1/messages"
        results = [(b["tool_use_id"], b["content"] if isinstance(b["content"], str) else b["content"][0]["text"])
                   for m in upstream["json"]["messages"] if isinstance(m["content"], list)
                   for b in m["content"] if b["type"] == "tool_result"]
    assert results == [(c["id"], f"result of {c['name']}") for c in calls]

    rows = rows_oldest_first(gateway, account, 2)
    for row, turn in zip(rows, (first, second)):
        usage = turn["usage"]
        assert (row["model"], row["endpoint"], row["stream"], row["status"]) == (model, "chat", True, "ok")
        assert (row["input_tokens"], row["output_tokens"]) == (usage["prompt_tokens"], usage["completion_tokens"])
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        assert row["cost_nano"] == cost(model, row["input_tokens"], row["output_tokens"]) > 0
    assert_balance(gateway, account, rows)


# -- openai: responses streaming ----------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt-4.1", "claude-sonnet-4-5"])
def test_openai_node_responses_stream_with_a_function_tool(node_sdks, gateway, sim, funded, model):
    account, _, secret = funded
    marker = f"node-resp-{uuid.uuid4().hex[:8]}"
    out = run_node("responses_stream.mjs", gateway, secret, model, marker)
    first, second = out["first"], out["second"]

    for turn in (first, second):
        assert turn["status"] == "completed"
        assert turn["events"][0] == "response.created" and turn["events"][-1] == "response.completed"
    [call] = first["function_calls"]
    assert call["name"] == "search_docs" and call["call_id"]
    assert json.loads(call["arguments"]) == {"query": "sim-query", "limit": 42}
    assert "response.function_call_arguments.done" in first["events"]

    assert second["function_calls"] == []
    assert second["output_text"] == second["streamed_text"] == "Tool result received: docs/install.md"

    upstream = sim.last_request(marker)
    assert upstream["path"] == ("/v1/responses" if model == "gpt-4.1" else "/v1/messages")

    rows = rows_oldest_first(gateway, account, 2)
    for row, turn in zip(rows, (first, second)):
        usage = turn["usage"]
        assert (row["model"], row["endpoint"], row["stream"], row["status"]) == (model, "responses", True, "ok")
        assert (row["input_tokens"], row["output_tokens"]) == (usage["input_tokens"], usage["output_tokens"])
        # the simulator's 8 words of thinking; Anthropic's usage does not split them out (docs/responses.md)
        assert usage["output_tokens_details"]["reasoning_tokens"] == (8 if model == "gpt-4.1" else 0)
        assert row["cost_nano"] == cost(model, row["input_tokens"], row["output_tokens"]) > 0
    assert_balance(gateway, account, rows)


# -- openai: embeddings with the SDK's base64 default -------------------------------------


def test_openai_node_embeddings_decode_the_base64_default(node_sdks, gateway, sim, funded):
    account, _, secret = funded
    model = "text-embedding-3-small"
    gateway.admin.call("PUT", f"/accounts/{account['id']}/embeddings/{model}", {"enabled": True})
    marker = f"node-emb-{uuid.uuid4().hex[:8]}"
    out = run_node("embeddings.mjs", gateway, secret, model, marker)

    upstream = sim.last_request(marker)["json"]
    assert upstream["encoding_format"] == "base64"  # the Node SDK's default, forwarded as asked
    assert (out["object"], out["model"]) == ("list", model)
    assert [d["index"] for d in out["data"]] == [0, 1]
    # components are k/1024, exact in float32: the decoded vectors equal the simulator's
    assert [d["embedding"] for d in out["data"]] == [sim_embedding(t, DEFAULT_DIMENSIONS) for t in out["input"]]

    [row] = rows_oldest_first(gateway, account, 1)
    assert (row["model"], row["endpoint"], row["stream"], row["status"]) == (model, "embeddings", False, "ok")
    assert (row["input_tokens"], row["output_tokens"]) == (out["usage"]["prompt_tokens"], 0)
    assert out["usage"]["prompt_tokens"] == len(out["input"][0].split()) + len(out["input"][1].split())
    assert row["cost_nano"] == cost(model, row["input_tokens"], 0) > 0
    assert_balance(gateway, account, [row])


# -- @anthropic-ai/sdk: messages streaming with thinking and tools ------------------------


def test_anthropic_node_messages_stream_with_thinking_and_tools(node_sdks, gateway, sim, funded):
    account, _, secret = funded
    model = "claude-sonnet-4-5"
    marker = f"node-msg-{uuid.uuid4().hex[:8]}"
    out = run_node("messages_stream.mjs", gateway, secret, model, marker)
    first, second = out["first"], out["second"]

    assert first["events"][0] == "message_start" and first["events"][-1] == "message_stop"
    assert first["stop_reason"] == "tool_use"
    thinking, tool_use = first["content"]
    assert thinking["type"] == "thinking"
    assert thinking["thinking"] == first["streamed_thinking"] == "Let me think about this step by step."
    assert thinking["signature"] == "sig-" + hashlib.sha256(thinking["thinking"].encode()).hexdigest()[:32]
    assert tool_use["type"] == "tool_use" and tool_use["name"] == "read_file" and tool_use["id"]
    assert tool_use["input"] == {"path": "sim-path", "max_lines": 42, "binary": True}

    assert second["stop_reason"] == "end_turn"
    assert [b["type"] for b in second["content"]] == ["thinking", "text"]
    assert second["content"][1]["text"] == "Tool result received: # gatewayd"

    # the second turn carried the thinking block, signature and all, and the tool result, upstream
    upstream = sim.last_request(marker)
    assert upstream["path"] == "/v1/messages"
    assistant, results = upstream["json"]["messages"][-2:]
    assert assistant["content"][0] == thinking
    assert assistant["content"][1]["id"] == tool_use["id"]
    assert results["content"][0]["tool_use_id"] == tool_use["id"]

    rows = rows_oldest_first(gateway, account, 2)
    for row, turn in zip(rows, (first, second)):
        usage = turn["usage"]
        assert (row["model"], row["endpoint"], row["stream"], row["status"]) == (model, "messages", True, "ok")
        assert usage["cache_read_input_tokens"] in (0, None) and usage["cache_creation_input_tokens"] in (0, None)
        assert (row["input_tokens"], row["output_tokens"]) == (usage["input_tokens"], usage["output_tokens"])
        assert row["cost_nano"] == cost(model, row["input_tokens"], row["output_tokens"]) > 0
    assert_balance(gateway, account, rows)


# -- the Vercel AI SDK: item_reference by default, store: false as docs/responses.md says ------


def test_vercel_ai_sdk_needs_store_false_and_the_refusal_says_so(node_sdks, gateway, sim, funded):
    """On a translated model: the SDK's default (``store`` on) sends the earlier answer as an
    ``item_reference`` and gets a 400 that says to send ``store: false``; with
    ``providerOptions: { openai: { store: false } }`` the answer itself goes back and the second
    turn is served. Every served turn is billed as the SDK reported it; the refused one is free."""
    account, _, secret = funded
    model = "claude-sonnet-4-5"
    marker = f"node-aisdk-{uuid.uuid4().hex[:8]}"
    out = run_node("ai_sdk_store.mjs", gateway, secret, model, marker)

    refused = out["stored_default"]["error"]
    assert refused["status"] == 400, refused
    message = json.loads(refused["body"])["error"]["message"]
    assert "item_reference" in message and "send store: false" in message
    assert "providerOptions: { openai: { store: false } }" in message
    assert sim.requests(f"second stored {marker}") == []  # refused before the provider

    served = out["unstored"]
    assert (served["first"]["text"], served["second"]["text"]) == ("w1 w2 w3 w4", "w1 w2 w3")
    upstream = sim.last_request(f"second unstored {marker}")
    assert upstream["path"] == "/v1/messages"
    history = json.dumps(upstream["json"]["messages"])
    assert served["first"]["text"] and served["first"]["text"] in history  # the earlier answer, itself

    rows = rows_oldest_first(gateway, account, 3)
    turns = [out["stored_default"]["first"], served["first"], served["second"]]
    for row, turn in zip(rows, turns):
        assert (row["model"], row["endpoint"], row["status"]) == (model, "responses", "ok")
        assert (row["input_tokens"], row["output_tokens"]) == (turn["usage"]["inputTokens"],
                                                               turn["usage"]["outputTokens"])
        assert row["cost_nano"] == cost(model, row["input_tokens"], row["output_tokens"])
    assert_balance(gateway, account, rows)
