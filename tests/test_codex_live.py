"""Codex CLI, the real CLI from npm, pointed at gatewayd as a custom model provider.

``codex exec`` runs a whole agent turn through the gateway's ``/v1/responses`` against the
simulator, configured the way docs/responses.md tells Codex users to (``wire_api =
"responses"``, base URL ``{gateway}/v1``, the key from an environment variable):

- on a GPT-like model the Responses request passes through; the simulator asks for
  Codex's ``exec_command`` function, Codex really runs it in a scratch directory, sends
  the output back as a ``function_call_output``, and the simulator answers with it;
- on a Claude-like model the request is translated to the messages format: Codex's free-form
  ``apply_patch`` tool travels as a function with one string argument, the simulator's call
  to it comes back to Codex as the ``custom_tool_call`` it expects, and Codex really applies
  the patch (the file appears on disk); hosted tools (``web_search``) are dropped.

Both bill exactly the tokens Codex reports. The CLI is installed once into ``.venv/npm``
(ignored by git); the test is skipped, with the reason, when npm or the registry is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.live import Daemon, unique_email
from tests.npm_cli import pinned_cli

pytestmark = pytest.mark.slow

# Pinned: the test relies on the CLI's config keys, tool names (exec_command, apply_patch) and
# its model catalogue format; bump deliberately.
VERSION = "0.169.0"

# What a Codex user adds so that a gateway model gets Codex's free-form apply_patch tool
# (docs/responses.md): Codex knows tool types only for OpenAI's own model ids.
CATALOGUE_ENTRY = {
    "display_name": "", "slug": "", "apply_patch_tool_type": "freeform", "shell_type": "shell_command",
    "base_instructions": "You are Codex, a coding agent. Edit files with the apply_patch tool.",
    "supported_reasoning_levels": [], "visibility": "list", "supported_in_api": True, "priority": 0,
    "support_verbosity": False, "truncation_policy": {"mode": "tokens", "limit": 10000},
    "experimental_supported_tools": [], "context_window": 200000,
}


@pytest.fixture(scope="session")
def codex_cli() -> Path:
    return pinned_cli("@openai/codex", VERSION, "codex")


def run_codex(cli: Path, gateway, secret: str, model: str, prompt: str, tmp_path: Path,
              *, websockets: bool = False, compact_at: int | None = None,
              settings: str = "") -> tuple[list[dict], Path]:
    """``codex exec --json`` in a fresh CODEX_HOME and work directory; returns its events.
    ``websockets``: over the Responses WebSocket (docs/codex-websocket.md's settings).
    ``compact_at``: Codex's own OpenAI provider pointed at the gateway (``openai_base_url``,
    the key in ``CODEX_API_KEY``), which makes Codex compact remotely (a ``compaction_trigger``
    request) once a turn's context passes this many tokens (``model_auto_compact_token_limit``)."""
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir(exist_ok=True)
    catalogue = home / "models.json"
    catalogue.write_text(json.dumps({"models": [{**CATALOGUE_ENTRY, "slug": model, "display_name": model}]}))
    if compact_at is not None:
        (home / "config.toml").write_text(
            f'model = "{model}"\n'
            f'model_catalog_json = "{catalogue}"\n'
            f'model_auto_compact_token_limit = {compact_at}\n'
            f'openai_base_url = "{gateway.url}/v1"\n'
        )
    else:
        (home / "config.toml").write_text(
            f'model = "{model}"\n'
            'model_provider = "gatewayd"\n'
            f'model_catalog_json = "{catalogue}"\n'
            + settings
            + ("\n[features]\nresponses_websockets = true\n" if websockets else "")
            + "\n[model_providers.gatewayd]\n"
            'name = "gatewayd"\n'
            f'base_url = "{gateway.url}/v1"\n'
            'env_key = "GATEWAYD_API_KEY"\n'
            'wire_api = "responses"\n'
            + ("supports_websockets = true\n" if websockets else "")
        )
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(home), "GATEWAYD_API_KEY": secret}
    if compact_at is not None:
        env["CODEX_API_KEY"] = secret
    done = subprocess.run(
        [str(cli), "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
         "-C", str(work), prompt],
        env=env, cwd=work, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"codex exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")], work


def _billed_as_codex_reports(gateway, account: dict, events: list[dict], input_price: int, output_price: int) -> None:
    rows = gateway.admin.usage(account["id"])
    assert [(r["endpoint"], r["stream"], r["status"]) for r in rows] == [("responses", True, "ok")] * 2
    [usage] = [e["usage"] for e in events if e["type"] == "turn.completed"]
    assert sum(r["input_tokens"] for r in rows) == usage["input_tokens"]
    assert sum(r["output_tokens"] for r in rows) == usage["output_tokens"]
    assert all(r["cost_nano"] == r["input_tokens"] * input_price + r["output_tokens"] * output_price for r in rows)
    balance = gateway.admin.balance(account["id"])
    assert balance["balance_nano"] == 10_000_000_000 - sum(r["cost_nano"] for r in rows)
    assert balance["held_nano"] == 0


def test_codex_runs_a_command_on_a_gpt_like_model(codex_cli, gateway, sim, funded, tmp_path):
    account, _, secret = funded
    marker = f"codex-gpt-{uuid.uuid4().hex[:8]}"
    args = json.dumps({"cmd": "cat sim-found.txt", "login": False})
    prompt = f"Show me the file please ({marker}) [[sim:tool=exec_command]] [[sim:args={args}]]"
    (tmp_path / "work").mkdir(parents=True, exist_ok=True)
    (tmp_path / "work" / "sim-found.txt").write_text(f"found me {marker}\n")
    events, _ = run_codex(codex_cli, gateway, secret, "gpt-4.1-mini", prompt, tmp_path)

    [command] = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"]
    assert command["exit_code"] == 0 and f"found me {marker}" in command["aggregated_output"]
    [answer] = [e["item"]["text"] for e in events if e["type"] == "item.completed"
                and e["item"]["type"] == "agent_message"]
    assert answer.startswith("Tool result received: ")

    first, second = sim.requests(marker)
    for turn in (first, second):  # passed through: the Responses API upstream, Codex's own body
        assert turn["path"] == "/v1/responses" and turn["json"]["model"] == "gpt-4.1-mini"
        assert turn["json"]["stream"] is True and turn["json"]["store"] is False
        assert turn["headers"]["authorization"] == "Bearer sim-provider-key"
        assert {"web_search", "custom", "function"} <= {t["type"] for t in turn["json"]["tools"]}
    [call] = [i for i in second["json"]["input"] if i.get("type") == "function_call"]
    [output] = [i for i in second["json"]["input"] if i.get("type") == "function_call_output"]
    assert call["name"] == "exec_command" and json.loads(call["arguments"]) == json.loads(args)
    assert output["call_id"] == call["call_id"] and f"found me {marker}" in output["output"]
    _billed_as_codex_reports(gateway, account, events, 400, 1600)


def test_codex_applies_a_patch_on_a_claude_like_model(codex_cli, gateway, sim, funded, tmp_path):
    """Translated: Codex's free-form apply_patch reaches the model as a function and comes back
    as a custom tool call, which Codex applies; its hosted web_search is dropped."""
    account, _, secret = funded
    marker = f"codex-claude-{uuid.uuid4().hex[:8]}"
    patch = f"*** Begin Patch\n*** Add File: hello.txt\n+hello from the simulator {marker}\n*** End Patch\n"
    prompt = (f"Add the file please ({marker}) [[sim:tool=apply_patch]] "
              f"[[sim:args={json.dumps({'input': patch})}]]")
    events, work = run_codex(codex_cli, gateway, secret, "claude-haiku-4-5", prompt, tmp_path)

    assert (work / "hello.txt").read_text() == f"hello from the simulator {marker}\n"
    [change] = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "file_change"]
    assert change["status"] == "completed" and change["changes"] == [{"path": str(work / "hello.txt"), "kind": "add"}]

    first, second = sim.requests(marker)
    for turn in (first, second):  # translated: the messages upstream, Codex's tools as functions
        assert turn["path"] == "/v1/messages" and turn["json"]["model"] == "claude-haiku-4-5"
        assert turn["headers"]["x-api-key"] == "sim-provider-key"
        tools = {t["name"]: t for t in turn["json"]["tools"]}
        assert tools["apply_patch"]["input_schema"]["properties"] == {"input": {
            "type": "string", "description": "The tool's whole input as raw text (a free-form tool: not JSON)."}}
        assert "lark grammar" in tools["apply_patch"]["description"]
        assert "exec_command" in tools and not {"web_search", "tool_search"} & set(tools)
    [tool_use] = [b for b in second["json"]["messages"][-2]["content"] if b["type"] == "tool_use"]
    assert (tool_use["name"], tool_use["input"]) == ("apply_patch", {"input": patch})
    [result] = second["json"]["messages"][-1]["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == tool_use["id"]
    assert "A hello.txt" in json.dumps(result["content"])
    _billed_as_codex_reports(gateway, account, events, 1000, 5000)


# --- over the Responses WebSocket (docs/codex-websocket.md) ---------------------------------

def _request_lines(gateway, account_id: str) -> list[dict]:
    """The daemon's request log lines for ``account_id`` (JSON lines)."""
    lines = []
    for line in gateway.output.text.splitlines():
        if account_id in line and line.lstrip().startswith("{"):
            doc = json.loads(line)
            lines.append(doc.get("fields", doc))
    return lines


def _went_over_the_socket(gateway, account_id: str) -> None:
    """Codex's turns were ``response.create`` events on one socket, not HTTP requests: the log
    has the handshake (101) and one ``GET /v1/responses`` line a response, no POST: Codex's
    warm-up (``generate: false``, answered by the gateway, free) and the two billed turns."""
    lines = [line for line in _request_lines(gateway, account_id) if line.get("path") == "/v1/responses"]
    assert lines and all(line["method"] == "GET" for line in lines), lines
    assert [(line["status"], line["endpoint"]) for line in lines if not line.get("model")] == [
        (101, "responses_socket")], lines
    answered = [(line["status"], line["usage_status"]) for line in lines if line.get("model")]
    assert answered == [(200, None), (200, "ok"), (200, "ok")], lines


def test_codex_runs_a_command_over_the_websocket_on_a_gpt_like_model(codex_cli, gateway, sim, funded, tmp_path):
    """Pass-through, over the socket: the tool round trip's second request names the first
    response by ``previous_response_id`` with only the command's output as input; the provider
    gets the whole history."""
    account, _, secret = funded
    marker = f"codex-ws-gpt-{uuid.uuid4().hex[:8]}"
    args = json.dumps({"cmd": "cat sim-found.txt", "login": False})
    prompt = f"Show me the file please ({marker}) [[sim:tool=exec_command]] [[sim:args={args}]]"
    (tmp_path / "work").mkdir(parents=True, exist_ok=True)
    (tmp_path / "work" / "sim-found.txt").write_text(f"found me {marker}\n")
    events, _ = run_codex(codex_cli, gateway, secret, "gpt-4.1-mini", prompt, tmp_path, websockets=True)

    [command] = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"]
    assert command["exit_code"] == 0 and f"found me {marker}" in command["aggregated_output"]
    [answer] = [e["item"]["text"] for e in events if e["type"] == "item.completed"
                and e["item"]["type"] == "agent_message"]
    assert answer.startswith("Tool result received: ")
    first, second = sim.requests(marker)
    assert second["json"]["input"][: len(first["json"]["input"])] == first["json"]["input"]
    [call] = [i for i in second["json"]["input"] if i.get("type") == "function_call"]
    [output] = [i for i in second["json"]["input"] if i.get("type") == "function_call_output"]
    assert call["name"] == "exec_command" and output["call_id"] == call["call_id"]
    assert "previous_response_id" not in second["json"] and "type" not in second["json"]
    _billed_as_codex_reports(gateway, account, events, 400, 1600)
    _went_over_the_socket(gateway, account["id"])


def test_codex_applies_a_patch_over_the_websocket_on_a_claude_like_model(codex_cli, gateway, sim, funded, tmp_path):
    account, _, secret = funded
    marker = f"codex-ws-claude-{uuid.uuid4().hex[:8]}"
    patch = f"*** Begin Patch\n*** Add File: hello.txt\n+hello over the socket {marker}\n*** End Patch\n"
    prompt = (f"Add the file please ({marker}) [[sim:tool=apply_patch]] "
              f"[[sim:args={json.dumps({'input': patch})}]]")
    events, work = run_codex(codex_cli, gateway, secret, "claude-haiku-4-5", prompt, tmp_path, websockets=True)

    assert (work / "hello.txt").read_text() == f"hello over the socket {marker}\n"
    first, second = sim.requests(marker)
    for turn in (first, second):
        assert turn["path"] == "/v1/messages" and turn["json"]["model"] == "claude-haiku-4-5"
    [tool_use] = [b for b in second["json"]["messages"][-2]["content"] if b["type"] == "tool_use"]
    assert (tool_use["name"], tool_use["input"]) == ("apply_patch", {"input": patch})
    _billed_as_codex_reports(gateway, account, events, 1000, 5000)
    _went_over_the_socket(gateway, account["id"])


# --- a model the operator added the plain way (issue 32, point 8) ----------------------------

OPERATORS_MODEL = """
[[models]]
id = "team-gpt"
provider = "openai"
upstream_id = "gpt-4.1-mini"
input_price = 0.40
output_price = 1.60

[[models]]
id = "team-gpt-no-tools"
provider = "openai"
upstream_id = "gpt-4.1-mini"
input_price = 0.40
output_price = 1.60
tool_prices = {}
"""


def test_codex_runs_on_a_model_configured_without_tool_prices(codex_cli, sim, tmp_path):
    """Codex sends a hosted web_search tool with every request: a model whose [[models]] entry
    says nothing of tool_prices has its provider's list prices for it, so the turn is served
    (it was refused with unpriced_feature), passed through with the tool."""
    daemon = Daemon(tmp_path / "gateway", sim.url, extra=OPERATORS_MODEL)
    try:
        account = daemon.admin.account(unique_email("codex-plain"))
        secret = daemon.admin.key(account["id"])["secret"]
        marker = f"codex-plain-{uuid.uuid4().hex[:8]}"
        args = json.dumps({"cmd": "cat sim-found.txt", "login": False})
        prompt = f"Show me the file please ({marker}) [[sim:tool=exec_command]] [[sim:args={args}]]"
        (tmp_path / "work").mkdir(parents=True, exist_ok=True)
        (tmp_path / "work" / "sim-found.txt").write_text(f"found me {marker}\n")
        events, _ = run_codex(codex_cli, daemon, secret, "team-gpt", prompt, tmp_path)
        [command] = [e["item"] for e in events if e["type"] == "item.completed"
                     and e["item"]["type"] == "command_execution"]
        assert command["exit_code"] == 0 and f"found me {marker}" in command["aggregated_output"]
        for turn in sim.requests(marker):
            assert turn["json"]["model"] == "gpt-4.1-mini" and "web_search" in {t["type"] for t in turn["json"]["tools"]}
        _billed_as_codex_reports(daemon, account, events, 400, 1600)

        # tool_prices = {}: refused, and what the refusal tells Codex's user to set works
        (tmp_path / "codex-home").rename(tmp_path / "codex-home-1")
        with pytest.raises(AssertionError, match="unpriced_feature|not priced"):
            run_codex(codex_cli, daemon, secret, "team-gpt-no-tools", f"hello {marker}", tmp_path)
        (tmp_path / "codex-home").rename(tmp_path / "codex-home-2")
        events, _ = run_codex(codex_cli, daemon, secret, "team-gpt-no-tools", f"hello again {marker}", tmp_path,
                              settings='web_search = "disabled"\n')
        assert [e for e in events if e["type"] == "turn.completed"]
        turns = sim.requests(f"hello again {marker}")
        assert turns and not any("web_search" in {t["type"] for t in turn["json"].get("tools", [])} for turn in turns)
        assert not sim.requests(f"hello {marker}")  # the refused turn never reached the provider
    finally:
        daemon.stop()


# --- compaction (issue 36) -------------------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt-4.1-mini", "claude-haiku-4-5"])
def test_codex_completes_a_session_that_crosses_its_compaction_limit(codex_cli, gateway, sim, funded, tmp_path, model):
    """Codex with its own OpenAI provider pointed at the gateway compacts remotely: past
    ``model_auto_compact_token_limit`` it sends a ``compaction_trigger`` request and needs exactly
    one ``compaction`` item back, then goes on with that item in place of the history. The
    command's 3,000-line output pushes the turn over the limit; the file is gone when Codex runs
    the command again after compacting, so the turn then ends.

    On gpt-4.1-mini the trigger and the item pass through (the simulator compacts as OpenAI
    does); on claude-haiku-4-5 the gateway compacts with the model, and its summary reaches the
    model in the requests after."""
    from gatewayd.formats.compaction import COMPACTION_PROMPT, SUMMARY_HEADING

    account, _, secret = funded
    marker = f"codex-compact-{uuid.uuid4().hex[:8]}"
    args = json.dumps({"cmd": "cat big.txt && rm big.txt", "login": False})
    prompt = f"Count the lines please ({marker}) [[sim:tool=exec_command]] [[sim:args={args}]]"
    (tmp_path / "work").mkdir(parents=True, exist_ok=True)
    (tmp_path / "work" / "big.txt").write_text("".join(f"{n}\n" for n in range(1, 3001)))
    events, work = run_codex(codex_cli, gateway, secret, model, prompt, tmp_path, compact_at=4000)

    assert not (work / "big.txt").exists()
    [answer] = [e["item"]["text"] for e in events if e["type"] == "item.completed"
                and e["item"]["type"] == "agent_message"]
    assert answer.startswith("Tool result received: ")
    first, summarising, after, last = sim.requests(marker)  # oldest first
    if model == "gpt-4.1-mini":
        assert summarising["path"] == "/v1/responses" and summarising["json"]["input"][-1] == {
            "type": "compaction_trigger"}
        [item] = [i for i in after["json"]["input"] if i.get("type") == "compaction"]
        assert item["encrypted_content"].startswith("sim-compaction:")  # the provider's own, passed back
    else:
        assert summarising["path"] == "/v1/messages"
        assert COMPACTION_PROMPT in json.dumps(summarising["json"]["messages"][-1])
        for turn in (after, last):
            assert SUMMARY_HEADING in json.dumps(turn["json"]["messages"])
    rows = gateway.admin.usage(account["id"])
    assert [(r["endpoint"], r["status"]) for r in rows] == [("responses", "ok")] * 4
    assert gateway.admin.balance(account["id"])["held_nano"] == 0
