"""Claude Code, the real CLI from npm, pointed at gatewayd with only a base URL and a key.

``claude -p`` runs a whole agent turn through the gateway against the simulator: the
simulator asks for the Glob tool, Claude Code really runs it in a scratch directory
(where a file the simulated arguments match is waiting), sends the result back as a
``tool_result``, and the simulator answers with it. Claude Code's own report of the
tokens it used must equal what the gateway billed.

The CLI is installed once into ``.venv/npm`` (ignored by git); the test is skipped,
with the reason, when npm is missing or the registry cannot be reached.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.npm_cli import pinned_cli

pytestmark = pytest.mark.slow

# Pinned: the test relies on the CLI's flags (--tools) and tool names (Glob); bump deliberately.
VERSION = "2.1.197"


@pytest.fixture(scope="session")
def claude_cli() -> Path:
    return pinned_cli("@anthropic-ai/claude-code", VERSION, "claude")


def test_claude_code_tool_round_trip_through_the_gateway(claude_cli, gateway, sim, funded, tmp_path):
    account, _, secret = funded
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    (work / "sim-path").mkdir(parents=True)
    (work / "sim-path" / "sim-pattern").write_text("found me\n")  # what Glob(pattern=sim-pattern, path=sim-path) finds
    marker = f"claude-code-{uuid.uuid4().hex[:8]}"
    env = {
        "PATH": os.environ["PATH"], "HOME": str(home),  # a fresh home: no user settings, no stored login
        "ANTHROPIC_BASE_URL": gateway.url, "ANTHROPIC_API_KEY": secret,
        "ANTHROPIC_MODEL": "claude-sonnet-4-5", "ANTHROPIC_SMALL_FAST_MODEL": "claude-haiku-4-5",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "claude-haiku-4-5",
        "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    done = subprocess.run(
        [str(claude_cli), "-p", f"Find the file please ({marker})", "--output-format", "json",
         "--model", "claude-sonnet-4-5", "--tools", "Glob", "--allowedTools", "Glob"],
        env=env, cwd=work, capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 0, f"claude exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["subtype"] == "success", result
    assert result["num_turns"] == 2
    assert result["result"] == "Tool result received: sim-path/sim-pattern"

    # what reached the provider: two turns, the provider's key, Claude Code's version and betas
    first, second = sim.requests(marker)
    for turn in (first, second):
        headers = turn["headers"]
        assert turn["path"] == "/v1/messages" and turn["json"]["model"] == "claude-sonnet-4-5"
        assert turn["json"]["stream"] is True
        assert headers["x-api-key"] == "sim-provider-key" and "authorization" not in headers
        assert not any(secret[3:] in value for value in headers.values())
        assert headers["anthropic-version"] == "2023-06-01"
        assert "claude-code-20250219" in headers.get("anthropic-beta", "")
    [tool_use] = [b for b in second["json"]["messages"][-2]["content"] if b["type"] == "tool_use"]
    assert (tool_use["name"], tool_use["input"]) == ("Glob", {"pattern": "sim-pattern", "path": "sim-path"})
    [tool_result] = second["json"]["messages"][-1]["content"]
    assert tool_result["type"] == "tool_result" and tool_result["tool_use_id"] == tool_use["id"]
    assert "sim-path/sim-pattern" in json.dumps(tool_result["content"])

    # billed: two streamed requests, exactly the tokens Claude Code says it used
    rows = gateway.admin.usage(account["id"])
    assert [(r["endpoint"], r["stream"], r["status"]) for r in rows] == [("messages", True, "ok")] * 2
    usage = result["usage"]
    assert sum(r["input_tokens"] for r in rows) == (usage["input_tokens"] + usage["cache_read_input_tokens"]
                                                    + usage["cache_creation_input_tokens"])
    assert sum(r["output_tokens"] for r in rows) == usage["output_tokens"]
    assert all(r["cost_nano"] == r["input_tokens"] * 3000 + r["output_tokens"] * 15000 for r in rows)
    balance = gateway.admin.balance(account["id"])
    assert balance["balance_nano"] == 10_000_000_000 - sum(r["cost_nano"] for r in rows)
    assert balance["held_nano"] == 0


def test_claude_code_with_no_model_set_is_served_its_default_model(claude_cli, gateway, sim, funded, tmp_path):
    """Pointed at the gateway with only a base URL and a key (issue 32): Claude Code sends its
    built-in default id (claude-opus-4-8 in 2.1.197), a model of the default catalogue now:
    served at once (it used to be nine 503s over two minutes), and its small model's dated id
    (if it sends one) through its alias."""
    account, _, secret = funded
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    marker = f"claude-default-{uuid.uuid4().hex[:8]}"
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_BASE_URL": gateway.url,
           "ANTHROPIC_API_KEY": secret, "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    done = subprocess.run([str(claude_cli), "-p", f"Say hello ({marker})", "--output-format", "json"],
                          env=env, cwd=work, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"claude exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert json.loads(done.stdout)["is_error"] is False
    rows = [r for r in gateway.admin.usage(account["id"]) if r["status"] == "ok"]
    assert rows and {r["model"] for r in rows} == {"claude-opus-4-8"}
    assert {turn["json"]["model"] for turn in sim.requests(marker)} == {"claude-opus-4-8"}
