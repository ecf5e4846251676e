"""The MCP gateway in real daemons: two gatewayd processes on one PostgreSQL database, each running
the same stdio MCP server (the SDK's FastMCP, tests/mcp/servers.py), the SDK's client over
real HTTP. A session opened on one instance is valid on the other (its id is signed with the
store's shared secret); a key's MCP list changed on one applies on the other (the change
feed carries the new column); every call is a usage row and ``gatewayctl audit`` holds."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from gatewayd.mcp import protocol as p
from tests import pg
from tests.faults import gatewayctl_audit
from tests.live import Daemon, postgres_ready, unique_email

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not postgres_ready(), reason="no PostgreSQL on 127.0.0.1:5432 (.ci/run starts it)"),
]
ROOT = Path(__file__).resolve().parent.parent
MCP = f"""
[[mcp_servers]]
name = "local"
command = {json.dumps(sys.executable)}
args = ["-m", "tests.mcp.servers", "local"]
cwd = {json.dumps(str(ROOT))}
price_per_call = 0.25
tool_prices = {{ echo = 0 }}
"""


@pytest.fixture(scope="module")
def pair(sim, tmp_path_factory):
    name, url = pg.create_database()
    env = {"GATEWAY_DATABASE_URL": url}
    a = Daemon(tmp_path_factory.mktemp("mcp-a"), sim.url, extra=MCP, env=env)
    b = Daemon(tmp_path_factory.mktemp("mcp-b"), sim.url, extra=MCP, env=env)
    yield a, b
    for d in (a, b):
        d.stop()
    pg.drop_database(name)


def call(daemon: Daemon, secret: str, session: str, name: str, arguments: dict) -> dict:
    answer = httpx.post(daemon.url + "/mcp", timeout=60, content=orjson.dumps(p.request_doc(
        7, "tools/call", {"name": name, "arguments": arguments})), headers={
        "authorization": f"Bearer {secret}", "content-type": "application/json", "accept": "application/json",
        "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"})
    assert answer.status_code == 200, answer.text
    return answer.json()


def eventually(check, what: str, bound: float = 10.0) -> None:
    deadline = time.monotonic() + bound
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


async def test_a_session_made_on_one_instance_calls_tools_on_the_other(pair):
    a, b = pair
    account = a.admin.account(unique_email("mcp"))
    key = a.admin.key(account["id"], mcp=["local"])
    secret = key["secret"]
    async with httpx.AsyncClient(headers={"authorization": f"Bearer {secret}"}, timeout=60) as http, \
            streamable_http_client(a.url + "/mcp", http_client=http) as (read, write, session_id), \
            ClientSession(read, write) as session:
        await session.initialize()
        assert sorted(t.name for t in (await session.list_tools()).tools) == [
            "local__add", "local__echo", "local__progress", "local__shout"]
        assert (await session.call_tool("local__add", {"a": 1, "b": 2})).structuredContent == {"result": 3}
        sid = session_id()
        assert sid
        # the same session on the other instance (which never saw it): valid, and its tools work there
        eventually(lambda: "result" in call(b, secret, sid, "local__add", {"a": 5, "b": 5}),
                   "the key and the session work on the other instance")
        assert call(b, secret, sid, "local__echo", {"text": "b"})["result"]["content"][0]["text"] == "b"
        # the list narrowed on A reaches B through the change feed: add is refused there, echo still works
        a.admin.call("PATCH", f"/keys/{key['id']}", {"mcp": ["local:echo"]})
        eventually(lambda: call(b, secret, sid, "local__add", {"a": 1, "b": 1}).get("error", {}).get("code")
                   == p.INVALID_PARAMS, "the narrowed list applies on the other instance")
        # a DELETE on B ends the session on A too (the store's list of ended sessions)
        headers = {"authorization": f"Bearer {secret}", "mcp-session-id": sid}
        assert (await http.delete(b.url + "/mcp", headers={"mcp-session-id": sid})).status_code == 200
        eventually(lambda: httpx.post(a.url + "/mcp", content=orjson.dumps(p.request_doc(1, "ping")), timeout=30,
                                      headers={**headers, "content-type": "application/json"}).status_code == 404,
                   "the session ended on B is over on A")
    rows = a.admin.usage(account["id"])
    assert sorted((r["model"], r["cost_nano"]) for r in rows) == [
        ("local:add", 250_000_000), ("local:add", 250_000_000), ("local:echo", 0)]
    assert a.admin.balance(account["id"])["balance_nano"] == 10 * 10**9 - 500_000_000
    for d in (a, b):
        code, report = gatewayctl_audit(d.socket)
        assert code == 0 and report["ok"] is True, report
