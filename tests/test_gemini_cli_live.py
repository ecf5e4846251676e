"""Issue 23 point 1, live: Gemini CLI (npm ``@google/gemini-cli``, pinned) runs a prompt and
a tool round trip through gatewayd's Gemini API, on a Gemini-routed model (pass-through) and
on a Claude model (translated), with the simulator as upstream.

The simulator asks for the CLI's own ``read_file`` tool with a marker in the prompt; the CLI
runs it and sends the file back as a ``functionResponse``.
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

VERSION = "0.61.0"


@pytest.fixture(scope="session")
def gemini_cli() -> Path:
    return pinned_cli("@google/gemini-cli", VERSION, "gemini")


def run_gemini(cli: Path, gateway, secret: str, model: str, prompt: str, work: Path) -> dict:
    """``gemini -p --output-format json`` in a fresh HOME: the key and base URL from the
    environment (the Gemini API key auth), telemetry and update checks off."""
    home = work.parent / "gemini-home"
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
    }))
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "GEMINI_API_KEY": secret,
           "GOOGLE_GEMINI_BASE_URL": gateway.url, "GEMINI_CLI_NO_RELAUNCH": "true", "NO_COLOR": "1",
           "CI": "true", "GEMINI_CLI_TRUST_WORKSPACE": "true"}
    done = subprocess.run([str(cli), "-m", model, "--output-format", "json", "-p", prompt],
                          env=env, cwd=work, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"gemini exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout[done.stdout.index("{"):])


@pytest.mark.parametrize("model", ["gemini-2.5-flash", "claude-sonnet-4-5"])
def test_gemini_cli_prompt_and_tool_round_trip(gemini_cli, gateway, sim, funded, tmp_path, model):
    account, _, secret = funded
    work = tmp_path / "work"
    work.mkdir()
    marker = f"gcli-{uuid.uuid4().hex[:8]}"
    found = work / "sim-found.txt"
    found.write_text(f"found me {marker}\n")
    args = json.dumps({"file_path": str(found)})
    out = run_gemini(gemini_cli, gateway, secret, model,
                     f"Read the file please ({marker}) [[sim:tool=read_file]] [[sim:args={args}]]", work)
    assert out["response"].startswith("Tool result received: ")

    turns = sim.requests(marker)
    assert len(turns) >= 2
    upstream = "/v1beta/models/gemini-2.5-flash:streamGenerateContent" if model.startswith("gemini") else "/v1/messages"
    assert all(t["path"].startswith(upstream) for t in turns)  # passed through / translated
    last = turns[-1]["json"]
    sent = json.dumps(last)
    assert f"found me {marker}" in sent  # the file's text went back as the tool's result
    rows = [r for r in gateway.admin.usage(account["id"]) if r["endpoint"] == "gemini"]
    assert len(rows) >= 2 and all(r["status"] == "ok" and r["model"] == model for r in rows)
    balance = gateway.admin.balance(account["id"])
    assert balance["held_nano"] == 0
    assert balance["balance_nano"] == 10_000_000_000 - sum(r["cost_nano"] for r in gateway.admin.usage(account["id"]))
