"""A stdio MCP server the gateway runs (``command`` in ``[[mcp_servers]]``): the official SDK's
FastMCP as a process (tests/mcp/servers.py), the SDK's client at /mcp. One process serves every
session; one that exits is started again at the next call, unseen by the client; a reload that
removes the server stops its process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from gatewayd.config import load_config
from tests.mcp.harness import McpHarness, servers_toml
from tests.test_mcp_gateway import sdk

ROOT = Path(__file__).resolve().parent.parent


def stdio_toml() -> str:
    return servers_toml() + f"""
[[mcp_servers]]
name = "local"
command = {json.dumps(sys.executable)}
args = ["-m", "tests.mcp.servers", "local"]
cwd = {json.dumps(str(ROOT))}
env = {{ PYTHONUNBUFFERED = "1" }}
tool_prices = {{ add = 0.5 }}
"""


@pytest.mark.slow
async def test_a_stdio_server_is_run_shared_restarted_and_stopped(tmp_path):
    h = McpHarness(tmp_path, toml=stdio_toml())
    async with h.running():
        account_id, secret = await h.gateway.funded_key(10)
        async with sdk(h, secret, "/mcp/local") as first, sdk(h, secret) as second:
            assert sorted(t.name for t in (await first.list_tools()).tools) == ["add", "echo", "progress", "shout"]
            assert "local__add" in {t.name for t in (await second.list_tools()).tools}
            seen = []

            async def progress(done: float, total: float | None, message: str | None) -> None:
                seen.append(done)

            done = await first.call_tool("progress", {"steps": 2}, progress_callback=progress)
            assert done.content[0].text == "done after 2 steps" and seen == [1, 2]
            assert (await second.call_tool("local__add", {"a": 20, "b": 22})).structuredContent == {"result": 42}
            link = h.mcp.tools.stdio_links["local"]
            assert link.starts == 1  # one process for both sessions
            link.process.kill()  # the server dies: the next call starts it again, the client sees nothing
            await link.process.wait()
            with trio.fail_after(10):
                assert (await first.call_tool("add", {"a": 1, "b": 2})).structuredContent == {"result": 3}
            assert link.starts == 2
            # a reload without the server stops its process and refuses its tools
            process = link.process
            (tmp_path / "gatewayd.toml").write_text((tmp_path / "gatewayd.toml").read_text().split(
                "[[mcp_servers]]\nname = \"local\"")[0])
            h.mcp.config = load_config(tmp_path / "gatewayd.toml")
            with trio.fail_after(10):
                await process.wait()
            assert "local__add" not in {t.name for t in (await second.list_tools()).tools}
        rows = await h.gateway.usage(account_id)
        assert [(r["model"], r["provider"], r["cost_nano"]) for r in rows] == [
            ("local:progress", "local", 0), ("local:add", "local", 500_000_000), ("local:add", "local", 500_000_000)]
