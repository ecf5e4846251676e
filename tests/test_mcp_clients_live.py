"""Real MCP clients through a real daemon: Claude Code (``claude mcp add --transport http``, pinned via
tests/npm_cli.py) lists the gateway's tools and calls one in an agent turn; the official
TypeScript SDK (pinned in tests/mcp/node/package.json) connects, lists and calls. Upstream:
the SDK's FastMCP as a stdio server the daemon runs (tests/mcp/servers.py); models: the
simulator, which asks for the MCP tool the prompt names (``[[sim:tool=...]]``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.live import Daemon, unique_email
from tests.npm_cli import pinned_cli

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
CLAUDE_VERSION = "2.1.197"  # as tests/test_claude_code_live.py
NODE_DIR = ROOT / "tests" / "mcp" / "node"
MCP = f"""
[[mcp_servers]]
name = "local"
command = {json.dumps(sys.executable)}
args = ["-m", "tests.mcp.servers", "local"]
cwd = {json.dumps(str(ROOT))}
price_per_call = 0.01
"""


@pytest.fixture(scope="module")
def daemon(sim, tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("mcp-clients"), sim.url, extra=MCP)
    yield d
    d.stop()


@pytest.fixture()
def funded_key(daemon):
    account = daemon.admin.account(unique_email("mcp-client"))
    return account, daemon.admin.key(account["id"], mcp=["local:add", "local:echo"])["secret"]


def test_claude_code_lists_and_calls_a_tool_through_the_gateway(daemon, sim, funded_key, tmp_path):
    claude = pinned_cli("@anthropic-ai/claude-code", CLAUDE_VERSION, "claude")
    account, secret = funded_key
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {
        "PATH": os.environ["PATH"], "HOME": str(home),
        "ANTHROPIC_BASE_URL": daemon.url, "ANTHROPIC_API_KEY": secret,
        "ANTHROPIC_MODEL": "claude-sonnet-4-5", "ANTHROPIC_SMALL_FAST_MODEL": "claude-haiku-4-5",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "claude-haiku-4-5",
        "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }

    def run(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
        done = subprocess.run([str(claude), *args], env=env, cwd=work, capture_output=True, text=True,
                              timeout=timeout)
        assert done.returncode == 0, f"claude {args[:3]} exited {done.returncode}:\n{done.stdout[-2000:]}\n" \
                                     f"{done.stderr[-2000:]}"
        return done

    run("mcp", "add", "--transport", "http", "gw", f"{daemon.url}/mcp", "--header", f"Authorization: Bearer {secret}")
    listed = run("mcp", "list")
    assert "gw" in listed.stdout and "Connected" in listed.stdout, listed.stdout
    marker = f"mcp-{uuid.uuid4().hex[:8]}"
    done = run("-p", f'Add the numbers ({marker}) [[sim:tool=mcp__gw__local__add]] [[sim:args={{"a": 20, "b": 22}}]]',
               "--output-format", "json", "--model", "claude-sonnet-4-5", "--allowedTools", "mcp__gw__local__add")
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["num_turns"] == 2, result
    assert result["result"].startswith("Tool result received:") and "42" in result["result"], result
    rows = daemon.admin.usage(account["id"])
    mcp_rows = [(r["model"], r["provider"], r["status"], r["cost_nano"]) for r in rows if r["endpoint"] == "mcp"]
    assert mcp_rows == [("local:add", "local", "ok", 10_000_000)]
    # Claude Code offered the model only the key's tools: add and echo, not shout or progress
    first = sim.requests(marker)[0]
    offered = sorted(t["name"] for t in first["json"]["tools"] if t["name"].startswith("mcp__"))
    assert offered == ["mcp__gw__local__add", "mcp__gw__local__echo"]
    assert daemon.admin.audit()["ok"] is True


def _node_ready() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node or npm is not installed")
    installed = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
    pinned = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]["@modelcontextprotocol/sdk"]
    if not installed.exists() or json.loads(installed.read_text())["version"] != pinned:
        done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--fetch-retries=1"], cwd=NODE_DIR,
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            pytest.skip(f"npm ci failed (registry unreachable?): {(done.stderr or done.stdout)[-500:]}")
    return NODE_DIR / "client.mjs"


def test_the_typescript_sdk_connects_lists_and_calls(daemon, funded_key):
    script = _node_ready()
    account, secret = funded_key
    done = subprocess.run(["node", str(script), f"{daemon.url}/mcp", secret], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["server"]["name"] == "gatewayd" and report["protocolVersion"] == "2025-11-25"
    assert report["tools"] == ["local__add", "local__echo"]
    assert report["sum"] == {"result": 5}
    assert report["refused"]["code"] == -32602 and "Unknown tool: local__shout" in report["refused"]["message"]
    rows = [(r["model"], r["cost_nano"]) for r in daemon.admin.usage(account["id"])]
    assert rows == [("local:add", 10_000_000)]


def test_the_console_key_form_sets_and_checks_the_mcp_list(daemon):
    from tests.console_helpers import ConsoleClient, account_with_password

    email = unique_email("mcp-console")
    account = account_with_password(daemon.admin, email)
    console = ConsoleClient(daemon.url)
    try:
        assert console.sign_in(email).status_code == 302
        page = console.get("/console/keys/new").text
        assert 'name="mcp"' in page and "<code>local</code>" in page  # the field, and the servers it may name
        made = console.post("/console/keys/new", {"name": "agent", "mcp": "local:add\nlocal:e*"},
                            token_from="/console/keys/new")
        assert made.status_code == 302, made.text[-500:]
        [key] = daemon.admin.call("GET", f"/accounts/{account['id']}/keys")["data"]
        assert key["mcp"] == ["local:add", "local:e*"]
        refused = console.post("/console/keys/new", {"name": "bad", "mcp": "nosuch"}, token_from="/console/keys/new")
        assert refused.status_code == 400 and "no MCP server" in refused.text and "has-error" in refused.text
        edit = console.get(f"/console/keys/{key['id']}").text
        assert "local:add\nlocal:e*" in edit  # the form shows the list as stored
    finally:
        console.close()
