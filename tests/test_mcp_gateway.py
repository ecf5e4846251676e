"""The MCP gateway in-process (tests/mcp/harness.py): the official MCP Python SDK's client against
/mcp and /mcp/{server}, real FastMCP servers upstream, the real relay, ledger and SQLite file.

What is checked: the SDK connects unchanged (initialize, tools/list, tools/call, progress over
SSE); tools outside a key's or group's list are neither listed nor sent upstream; a priced
call holds its exact price and settles it into a usage row (server, tool, duration, cost) on
the model requests' balance, key limit and audit; free calls are counted too; sessions are
valid on another instance; a lost upstream session is re-made unseen; a reload keeps the
other servers' sessions; hostile input gets the protocol's errors, never a 500.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, AsyncIterator

import attrs
import httpx
import orjson
import pytest
import trio
from prometheus_client import CollectorRegistry
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

from gatewayd.config import load_config
from gatewayd.mcp import protocol as p
from gatewayd.mcp.gateway import McpGateway
from gatewayd.reload import Reloader
from tests.mcp.harness import SECRET, McpHarness, servers_toml
from tests.mcp.servers import make_server

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


@pytest.fixture(autouse=True)
def _quiet():
    # the SDK logs every HTTP request and its GET-stream retries (our 405) at INFO
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("mcp").setLevel(logging.ERROR)


@contextlib.asynccontextmanager
async def sdk(h: McpHarness, secret: str, path: str = "/mcp") -> AsyncIterator[ClientSession]:
    """The SDK's client, unchanged: its Streamable HTTP transport over an httpx client with the key."""
    async with h.client(secret) as http, \
            streamable_http_client(f"http://gateway.test{path}", http_client=http) as (read, write, _), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def rpc(http: httpx.AsyncClient, path: str, doc: Any, session: str | None = None,
              **headers: str) -> httpx.Response:
    extra = {**HEADERS, **({"mcp-session-id": session} if session else {}), **headers}
    body = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    return await http.post(path, content=body, headers=extra)


async def initialize(http: httpx.AsyncClient, path: str = "/mcp") -> str:
    answer = await rpc(http, path, p.request_doc(1, "initialize", INIT))
    assert answer.status_code == 200, answer.text
    return answer.headers["mcp-session-id"]


async def audit(h: McpHarness) -> dict:
    """What ``gatewayctl audit`` reports (the admin API's call)."""
    directory = h.gateway.directory
    return await h.gateway.store.audit(directory.accounts.values(), directory.keys.values())


def sse_messages(text: str) -> list[dict]:
    return [orjson.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]


async def test_the_sdk_lists_and_calls_tools_and_each_priced_call_is_held_and_settled_exactly(tmp_path):
    h = McpHarness(tmp_path)
    async with h.running():
        account, secret = await h.gateway.funded_key(10)
        before = h.gateway.directory.accounts[account].balance_nano
        async with sdk(h, secret) as session:
            names = sorted(t.name for t in (await session.list_tools()).tools)
            # files offers only its allow list (read_file, add, progress): write_file, echo and shout are not there
            assert names == ["calc__add", "calc__echo", "calc__progress", "calc__shout", "files__add",
                             "files__progress", "files__read_file"]
            result = await session.call_tool("calc__add", {"a": 2, "b": 3})
            assert result.structuredContent == {"result": 5} and not result.isError
            seen = []

            async def progress(done: float, total: float | None, message: str | None) -> None:
                seen.append(done)

            result = await session.call_tool("calc__progress", {"steps": 3},
                                             progress_callback=progress)
            assert seen == [1, 2, 3] and result.content[0].text == "done after 3 steps"  # SSE: progress, then the answer
            failed = await session.call_tool("calc__shout", {"text": "x", "fail": True})
            assert failed.isError  # the tool ran and said so: charged like any answer
            assert (await session.call_tool("calc__echo", {"text": "free"})).content[0].text == "free"
        rows = await h.gateway.usage(account)
        assert [(r["model"], r["provider"], r["endpoint"], r["status"], r["cost_nano"], r["hold_nano"]) for r in rows] == [
            ("calc:add", "calc", "mcp", "ok", 2_000_000, 2_000_000),
            ("calc:progress", "calc", "mcp", "ok", 2_000_000, 2_000_000),
            ("calc:shout", "calc", "mcp", "ok", 2_000_000, 2_000_000),
            ("calc:echo", "calc", "mcp", "ok", 0, 0),  # free: counted and logged all the same
        ]
        assert rows[0]["breakdown"]["lines"] == [{"dimension": "tool:mcp_call", "quantity": 1,
                                                  "unit_nano": 2_000_000, "nano": 2_000_000}]
        assert all(r["duration_ms"] >= 0 for r in rows)
        assert h.gateway.directory.accounts[account].balance_nano == before - 6_000_000
        assert h.gateway.ledger.open_holds == 0
        assert h.mcp.calls.labels("calc", "ok")._value.get() == 4  # gateway_mcp_calls_total on /metrics
        # the client's key never travels upstream: the servers see the gateway, with its own credentials
        assert h.transport.requests and not any(secret[3:] in str(r.headers) for r in h.transport.requests)
        report = await audit(h)
        assert report["ok"] is True, report


async def test_a_servers_own_endpoint_speaks_its_tool_names_and_refuses_another_servers(tmp_path):
    h = McpHarness(tmp_path)
    async with h.running():
        _, secret = await h.gateway.funded_key(10)
        async with sdk(h, secret, "/mcp/files") as session:
            assert sorted(t.name for t in (await session.list_tools()).tools) == ["add", "progress", "read_file"]
            assert (await session.call_tool("read_file", {"path": "a"})).content[0].text == "contents of a"
            for name in ("calc__add", "write_file", "echo"):  # another server's, outside the allow list, unknown here
                with pytest.raises(McpError) as refused:
                    await session.call_tool(name, {"a": 1, "b": 2, "text": "x", "path": "p"})
                assert refused.value.error.code == p.INVALID_PARAMS
                assert refused.value.error.message == f"Unknown tool: {name}"
        assert [c[0] for c in h.upstreams["files"].calls] == ["read_file"]  # nothing else reached the server
        assert h.upstreams["calc"].calls == []


async def test_a_keys_mcp_list_and_its_groups_list_decide_what_is_listed_and_called(tmp_path):
    toml = servers_toml() + '\n[[groups]]\nname = "partners"\nmcp = ["calc", "files"]\n' \
        '\n[[groups]]\nname = "tight"\nmcp = ["calc:echo"]\n'
    h = McpHarness(tmp_path, toml=toml)
    async with h.running():
        account_id, _ = await h.gateway.funded_key(10)
        account = h.gateway.directory.accounts[account_id]
        await h.gateway.directory.set_groups(account, ["default", "tight"])
        key, secret = await h.gateway.directory.create_key(account, name="narrow", mcp=["calc:add", "calc:e*", "files"])
        assert key.mcp == ("calc:add", "calc:e*", "files")
        async with sdk(h, secret) as session:
            assert sorted(t.name for t in (await session.list_tools()).tools) == [
                "calc__add", "calc__echo", "files__add", "files__progress", "files__read_file"]
            with pytest.raises(McpError, match="Unknown tool: calc__shout"):
                await session.call_tool("calc__shout", {"text": "x"})
        # pinned to a group whose list allows only calc:echo: the key's list and the group's both apply
        await h.gateway.directory.update_key(key, {"group": "tight"})
        async with sdk(h, secret) as session:
            assert [t.name for t in (await session.list_tools()).tools] == ["calc__echo"]
            with pytest.raises(McpError, match="Unknown tool: calc__add"):
                await session.call_tool("calc__add", {"a": 1, "b": 1})
        # a server the key may not use at all is refused at its endpoint, before any session
        await h.gateway.directory.update_key(key, {"group": None, "mcp": ["calc"]})
        async with h.client(secret) as http:
            refused = await rpc(http, "/mcp/files", p.request_doc(1, "initialize", INIT))
            assert refused.status_code == 403 and refused.json()["error"]["code"] == p.REFUSED
        assert h.upstreams["calc"].calls == [] and h.upstreams["files"].calls == []
        # the list is checked when set: a server that is not configured is refused
        from gatewayd.directory import DirectoryError

        with pytest.raises(DirectoryError, match="no MCP server 'nope'"):
            await h.gateway.directory.update_key(key, {"mcp": ["nope"]})


async def test_no_balance_a_spent_key_or_budget_refuses_a_priced_call_before_it_is_sent(tmp_path):
    h = McpHarness(tmp_path)
    async with h.running():
        account_id = (await h.gateway.directory.create_account("poor@example.com")).id
        account = h.gateway.directory.accounts[account_id]
        _, secret = await h.gateway.directory.create_key(account, name="k")
        async with sdk(h, secret) as session:
            with pytest.raises(McpError) as refused:
                await session.call_tool("calc__add", {"a": 1, "b": 1})
            assert refused.value.error.code == p.REFUSED
            assert refused.value.error.data == {"status": 403, "code": "insufficient_user_quota"}
            # a free tool needs no balance
            assert (await session.call_tool("calc__echo", {"text": "hi"})).content[0].text == "hi"
        await h.gateway.directory.pay(account, 10**9)
        key, limited = await h.gateway.directory.create_key(account, name="limited", spend_limit_nano=3_000_000)
        async with sdk(h, limited) as session:
            await session.call_tool("calc__add", {"a": 1, "b": 1})  # 0.002 of 0.003
            with pytest.raises(McpError) as refused:
                await session.call_tool("calc__add", {"a": 1, "b": 1})
            assert refused.value.error.data["code"] == "pre_consume_token_quota_failed"
        # a periodic budget is held against as a model request's is
        _, budgeted = await h.gateway.directory.create_key(account, name="budget", budget_nano=3_000_000,
                                                           budget_period="day")
        async with sdk(h, budgeted) as session:
            await session.call_tool("calc__add", {"a": 2, "b": 2})
            with pytest.raises(McpError) as refused:
                await session.call_tool("calc__add", {"a": 2, "b": 2})
            assert refused.value.error.data["code"] == "pre_consume_token_quota_failed"
        assert [c[0] for c in h.upstreams["calc"].calls] == ["echo", "add", "add"]
        rows = await h.gateway.usage(account_id)
        assert [(r["model"], r["cost_nano"]) for r in rows] == [("calc:echo", 0), ("calc:add", 2_000_000),
                                                                 ("calc:add", 2_000_000)]
        assert key.spent_nano == 2_000_000
        assert (await audit(h))["ok"] is True


async def test_a_session_is_valid_on_another_instance_until_it_ends_and_a_lost_upstream_session_is_made_again(tmp_path):
    h = McpHarness(tmp_path)
    async with h.running():
        _, secret = await h.gateway.funded_key(10)
        async with h.client(secret) as http:
            session = await initialize(http)
            first = await rpc(http, "/mcp", p.request_doc(2, "tools/call", {"name": "calc__add",
                                                                             "arguments": {"a": 1, "b": 2}}), session)
            assert sse_messages(first.text)[-1]["result"]["structuredContent"] == {"result": 3}
            # another instance (its own memory: no links, no sessions) sharing the store's secret
            other = McpGateway(h.api, SECRET, http=httpx.AsyncClient(transport=h.transport),
                               registry=CollectorRegistry())
            async with trio.open_nursery() as nursery:
                await nursery.start(other.run)
                h.api.mcp = other
                answer = await rpc(http, "/mcp", p.request_doc(3, "tools/list", {}), session,
                                   **{"mcp-protocol-version": "2025-11-25"})
                assert answer.status_code == 200 and len(answer.json()["result"]["tools"]) == 7
                nursery.cancel_scope.cancel()
            h.api.mcp = h.mcp
            # the upstream server restarts and forgets every session: the gateway makes a new one unseen
            calc = h.upstreams["calc"] = make_server("calc")
            h.transport.transports[9001] = httpx.ASGITransport(app=calc.streamable_http_app())
            async with calc.session_manager.run():
                again = await rpc(http, "/mcp", p.request_doc(4, "tools/call", {"name": "calc__add",
                                                                                 "arguments": {"a": 2, "b": 2}}), session)
                assert sse_messages(again.text)[-1]["result"]["structuredContent"] == {"result": 4}
                link = h.mcp.tools.http_links[(session, "calc")]
                assert link.initializations == 2 and calc.calls == [("add", {"a": 2, "b": 2})]
                # ended (DELETE) here: over on every instance, through the store's list of ended sessions
                assert (await http.delete("/mcp", headers={"mcp-session-id": session})).status_code == 200
            third = McpGateway(h.api, SECRET, http=httpx.AsyncClient(transport=h.transport),
                               registry=CollectorRegistry())
            h.api.mcp = third
            gone = await rpc(http, "/mcp", p.request_doc(5, "ping"), session)
            assert gone.status_code == 404
            h.api.mcp = h.mcp


async def test_a_reload_adds_and_removes_servers_and_keeps_the_other_sessions(tmp_path):
    h = McpHarness(tmp_path)
    async with h.running():
        _, secret = await h.gateway.funded_key(10)
        async with sdk(h, secret) as session:
            await session.call_tool("calc__add", {"a": 1, "b": 1})
            links = dict(h.mcp.tools.http_links)
            calc_link = next(link for (sid, name), link in links.items() if name == "calc")
            # files leaves, a third server comes
            (tmp_path / "gatewayd.toml").write_text((tmp_path / "gatewayd.toml").read_text().replace(
                'name = "files"\nurl = "http://127.0.0.1:9002/mcp"', 'name = "more"\nurl = "http://127.0.0.1:9002/mcp"'))
            reloader = Reloader(lambda: load_config(tmp_path / "gatewayd.toml"), lambda c: c,
                                [h.gateway.relay, h.gateway.directory, h.mcp])  # as the daemon's SIGHUP does
            assert reloader.reload("test")["ok"] is True
            assert sorted(t.name for t in (await session.list_tools()).tools) == [
                "calc__add", "calc__echo", "calc__progress", "calc__shout", "more__add", "more__progress",
                "more__read_file"]
            assert (await session.call_tool("calc__add", {"a": 2, "b": 2})).structuredContent == {"result": 4}
            with pytest.raises(McpError, match="Unknown tool: files__read_file"):
                await session.call_tool("files__read_file", {"path": "x"})
            # the calc session went on in the same upstream session: never dropped, never re-made
            assert [link for (sid, name), link in h.mcp.tools.http_links.items() if name == "calc"] == [calc_link]
            assert calc_link.initializations == 1


async def test_hostile_input_gets_the_protocols_errors_never_a_500(tmp_path, caplog):
    h = McpHarness(tmp_path)
    async with h.running():
        account_id, secret = await h.gateway.funded_key(10)
        _, other_secret = await h.gateway.funded_key(10)
        async with h.client(secret) as http, h.client(other_secret) as other:
            session = await initialize(http)
            cases = [
                (await rpc(http, "/mcp", b"{not json", session), 400, p.PARSE_ERROR),
                (await rpc(http, "/mcp", [p.request_doc(1, "ping")], session), 400, p.INVALID_REQUEST),
                (await rpc(http, "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "x"}, session),
                 400, p.INVALID_PARAMS),
                (await rpc(http, "/mcp", p.request_doc(1, "tools/list"), None), 400, p.INVALID_REQUEST),  # no session
                (await rpc(http, "/mcp", p.request_doc(1, "tools/list"), "g1.forged.sig"), 404, p.INVALID_REQUEST),
                (await rpc(other, "/mcp", p.request_doc(1, "tools/list"), session), 404, p.INVALID_REQUEST),  # not its
                (await rpc(http, "/mcp/calc", p.request_doc(1, "tools/list"), session), 404, p.INVALID_REQUEST),
                (await rpc(http, "/mcp", p.request_doc(1, "tools/list"), session, **{"mcp-protocol-version": "1.0"}),
                 400, p.INVALID_REQUEST),
                (await rpc(http, "/mcp", p.request_doc(1, "ping"), session, **{"content-type": "text/plain"}),
                 415, p.INVALID_REQUEST),
                (await http.get("/mcp", headers={"mcp-session-id": session}), 405, p.INVALID_REQUEST),
                (await rpc(http, "/mcp/nosuch", p.request_doc(1, "initialize", INIT)), 404, p.INVALID_REQUEST),
                (await rpc(http, "/mcp/calc/deeper", p.request_doc(1, "initialize", INIT)), 404, p.INVALID_REQUEST),
                (await http.post("/mcp", content=orjson.dumps(p.request_doc(1, "initialize", INIT)),
                                 headers={**HEADERS, "authorization": "Bearer sk-wrong"}), 401, p.REFUSED),
                (await rpc(http, "/mcp", p.request_doc(1, "initialize", {}), None), 400, p.INVALID_PARAMS),
                # a browser page of another origin (DNS rebinding): the transport's 403
                (await rpc(http, "/mcp", p.request_doc(1, "initialize", INIT), None, origin="http://evil.example"),
                 403, p.INVALID_REQUEST),
            ]
            for answer, status, code in cases:
                assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text
            assert cases[12][0].headers["www-authenticate"].startswith("Bearer")
            same_origin = await rpc(http, "/mcp", p.request_doc(1, "initialize", INIT), None,
                                    origin="http://gateway.test")
            assert same_origin.status_code == 200
            # an oversized message: refused from its declared length, before it is read
            big = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"x" * (17 << 20) + b'"}}'
            assert (await rpc(http, "/mcp", big, session)).status_code == 413

            async def chunked():  # no Content-Length: read through the API routes' reader, then refused
                for i in range(0, len(big), 1 << 20):
                    yield big[i:i + (1 << 20)]

            unsized = await http.post("/mcp", content=chunked(), headers={**HEADERS, "mcp-session-id": session})
            assert unsized.status_code == 413 and unsized.json()["error"]["code"] == p.INVALID_REQUEST
            # well-formed but unknown: JSON-RPC's -32601 (not the SDK server's -32602), with the request's id
            unknown = await rpc(http, "/mcp", p.request_doc("u", "resources/list"), session)
            assert unknown.status_code == 200
            assert unknown.json() == p.error_doc("u", p.METHOD_NOT_FOUND, "Method not found: resources/list")
            assert (await rpc(http, "/mcp", p.request_doc(9, "ping"), session)).json() == p.result_doc(9, {})
            for note in (p.notification_doc("notifications/initialized"), {"jsonrpc": "2.0", "id": 5, "result": {}}):
                assert (await rpc(http, "/mcp", note, session)).status_code == 202
            # a DELETE ends the session: it is unknown afterwards
            assert (await http.delete("/mcp", headers={"mcp-session-id": session})).status_code == 200
            assert (await rpc(http, "/mcp", p.request_doc(1, "ping"), session)).status_code == 404
        assert h.upstreams["calc"].calls == [] and await h.gateway.usage(account_id) == []
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_flood_meets_the_accounts_concurrency_cap_and_nothing_is_charged_for_it(tmp_path):
    h = McpHarness(tmp_path, toml="max_concurrent_per_account = 1\n" + servers_toml())
    release = trio.Event()
    calc = h.upstreams["calc"]

    @calc.tool()
    async def wait() -> str:
        """Wait for the test."""
        await release.wait()
        return "waited"

    async with h.running():
        account_id, secret = await h.gateway.funded_key(10)
        async with h.client(secret) as http:
            session = await initialize(http)
            answers: list[httpx.Response] = []

            async def slow() -> None:
                answers.append(await rpc(http, "/mcp", p.request_doc(1, "tools/call", {"name": "calc__wait"}), session))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(slow)
                while not h.gateway.relay.in_flight.by_account:
                    await trio.sleep(0.01)
                flooded = [await rpc(http, "/mcp", p.request_doc(i, "tools/call", {"name": "calc__add",
                                                                                  "arguments": {"a": 1, "b": 1}}),
                                     session, accept="application/json") for i in range(5)]
                release.set()
            for answer in flooded:
                error = answer.json()["error"]
                assert error["code"] == p.REFUSED and error["data"]["status"] == 429
                assert error["data"]["code"] == "concurrency_limit_exceeded" and error["data"]["retry_after"] == "1"
            assert sse_messages(answers[0].text)[-1]["result"]["content"][0]["text"] == "waited"
        assert [r["model"] for r in await h.gateway.usage(account_id)] == ["calc:wait"]
        assert calc.calls == []  # no flooded call reached the server (the test's own tool records none)


async def test_an_unreachable_server_is_the_gateways_error_and_charges_nothing(tmp_path):
    h = McpHarness(tmp_path, toml=servers_toml() + '\n[[mcp_servers]]\nname = "down"\nurl = "http://127.0.0.1:9009/mcp"'
                                                   '\nprice_per_call = 1\ntimeout_s = 5\n')
    async with h.running():
        account_id, secret = await h.gateway.funded_key(10)
        async with sdk(h, secret) as session:
            # the aggregate list leaves the broken server out and still lists the others
            assert len((await session.list_tools()).tools) == 7
            with pytest.raises(McpError) as failed:
                await session.call_tool("down__anything", {})
            assert failed.value.error.code == p.UPSTREAM_FAILED and "nothing was charged" in failed.value.error.message
        rows = await h.gateway.usage(account_id)
        assert [(r["model"], r["status"], r["cost_nano"], r["hold_nano"]) for r in rows] == [
            ("down:anything", "upstream_unreachable", 0, 1_000_000_000)]
        assert h.gateway.directory.accounts[account_id].balance_nano == 10 * 10**9


async def test_a_client_gone_during_a_call_the_server_got_pays_for_it(tmp_path):
    h = McpHarness(tmp_path)
    started, release = trio.Event(), trio.Event()

    @h.upstreams["calc"].tool()
    async def wait() -> str:
        """Wait for the test."""
        started.set()
        await release.wait()
        return "late"

    async with h.running():
        account_id, secret = await h.gateway.funded_key(10)
        async with h.client(secret) as http:
            session = await initialize(http)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rpc, http, "/mcp", p.request_doc(1, "tools/call", {"name": "calc__wait"}), session)
                await started.wait()
                nursery.cancel_scope.cancel()  # the client leaves while the tool runs
            release.set()
        with trio.fail_after(5):
            while not await h.gateway.usage(account_id):
                await trio.sleep(0.01)
        rows = await h.gateway.usage(account_id)
        assert [(r["model"], r["status"], r["cost_nano"]) for r in rows] == [
            ("calc:wait", "client_disconnected", 2_000_000)]
        assert h.gateway.ledger.open_holds == 0


def test_the_key_record_carries_its_mcp_list():
    from gatewayd.records import Key

    key = Key(id="k", account_id="a", name="n", secret_hash="h", secret_hint="x", status="enabled",
              spend_limit_nano=None, spent_nano=0, expires_on=None, models=None, allow_ips=None, group=None,
              created_at="t", last_used_at=None, mcp=("calc",))
    assert key.public(0)["mcp"] == ["calc"] and attrs.evolve(key, mcp=None).public(0)["mcp"] is None


class Guarded(httpx.AsyncBaseTransport):
    """In front of the harness's upstreams: an OAuth token endpoint (``/token`` on port 9100) and a
    check of every MCP request's credentials against what the server accepts now."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.issued = 0
        self.accepted_token = "tok-2"  # the first token issued is already revoked: the gateway must renew once
        self.forms: list[dict] = []
        self.seen: list[tuple[int, str | None]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.port == 9100:
            self.issued += 1
            self.forms.append(dict(httpx.QueryParams((await request.aread()).decode())))
            return httpx.Response(200, json={"access_token": f"tok-{self.issued}", "expires_in": 3600,
                                             "token_type": "Bearer"})
        auth = request.headers.get("authorization")
        self.seen.append((request.url.port or 80, auth))
        wanted = {9001: f"Bearer {self.accepted_token}", 9002: "Token files-secret"}[request.url.port or 80]
        if auth != wanted:
            return httpx.Response(401, json={"error": "invalid_token"})
        return await self.inner.handle_async_request(request)


async def test_upstream_credentials_from_the_environment_and_oauth_client_credentials(tmp_path, monkeypatch):
    monkeypatch.setenv("CALC_CLIENT_SECRET", "s3cret")
    monkeypatch.setenv("FILES_TOKEN", "files-secret")
    toml = """
[[mcp_servers]]
name = "calc"
url = "http://127.0.0.1:9001/mcp"
[mcp_servers.auth]
type = "oauth_client_credentials"
token_url = "http://127.0.0.1:9100/token"
client_id = "gatewayd"
client_secret_env = "CALC_CLIENT_SECRET"
scope = "tools"

[[mcp_servers]]
name = "files"
url = "http://127.0.0.1:9002/mcp"
auth = { type = "header", header = "Authorization", scheme = "Token", value_env = "FILES_TOKEN" }
"""
    h = McpHarness(tmp_path, toml=toml)
    guard = Guarded(h.transport)
    h.mcp.http = h.mcp.tools.http = httpx.AsyncClient(transport=guard)
    async with h.running():
        _, secret = await h.gateway.funded_key(10)
        async with sdk(h, secret) as session:
            assert (await session.call_tool("calc__add", {"a": 1, "b": 1})).structuredContent == {"result": 2}
            assert (await session.call_tool("files__read_file", {"path": "p"})).content[0].text == "contents of p"
            assert (await session.call_tool("calc__add", {"a": 2, "b": 2})).structuredContent == {"result": 4}
        # one token refused (401), renewed once, then kept: two tokens fetched in all
        assert guard.issued == 2
        assert guard.forms[0] == {"grant_type": "client_credentials", "client_id": "gatewayd",
                                  "client_secret": "s3cret", "scope": "tools"}
        assert (9001, "Bearer tok-1") in guard.seen and guard.seen[-1] in ((9001, "Bearer tok-2"),
                                                                           (9002, "Token files-secret"))
        assert {auth for port, auth in guard.seen if port == 9002} == {"Token files-secret"}


async def test_a_call_the_client_cancels_ends_unanswered_and_the_server_is_told(tmp_path):
    h = McpHarness(tmp_path)
    started, cancelled = trio.Event(), trio.Event()

    @h.upstreams["calc"].tool()
    async def wait() -> str:
        """Wait until cancelled."""
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    async with h.running():
        account_id, secret = await h.gateway.funded_key(10)
        async with h.client(secret) as http:
            session = await initialize(http)
            answers: list[httpx.Response] = []

            async def call(accept: str) -> None:
                answers.append(await rpc(http, "/mcp", p.request_doc(f"c-{accept}", "tools/call", {"name": "calc__wait"}),
                                         session, accept=accept))

            for accept in ("application/json, text/event-stream", "application/json"):
                started = trio.Event()
                cancelled = trio.Event()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(call, accept)
                    with trio.fail_after(10):
                        await started.wait()
                    note = p.notification_doc("notifications/cancelled", {"requestId": f"c-{accept}"})
                    assert (await rpc(http, "/mcp", note, session)).status_code == 202
                with trio.fail_after(10):
                    await cancelled.wait()  # the server was told, and stopped the tool
            streamed, plain = answers
            assert streamed.status_code == 200 and sse_messages(streamed.text) == []  # no answer: the stream ends
            assert plain.json()["error"]["code"] == p.REQUEST_CANCELLED
        rows = await h.gateway.usage(account_id)
        assert [(r["model"], r["status"], r["cost_nano"]) for r in rows] == [
            ("calc:wait", "client_disconnected", 2_000_000)] * 2  # it reached the server: charged, as a call left


async def test_a_server_slower_than_its_timeout_is_the_gateways_error_and_charges_nothing(tmp_path):
    h = McpHarness(tmp_path, toml=servers_toml().replace('tool_prices = { echo = 0 }',
                                                         'tool_prices = { echo = 0 }\ntimeout_s = 0.3'))

    @h.upstreams["calc"].tool()
    async def wait() -> str:
        """Never answers in time."""
        await trio.sleep_forever()
        return "never"

    async with h.running():
        account_id, secret = await h.gateway.funded_key(10)
        async with sdk(h, secret) as session:
            with pytest.raises(McpError) as failed:
                await session.call_tool("calc__wait", {})
            assert failed.value.error.code == p.UPSTREAM_FAILED and "within 0.3 s" in failed.value.error.message
            # the server answers its other tools as before
            assert (await session.call_tool("calc__add", {"a": 1, "b": 1})).structuredContent == {"result": 2}
        rows = await h.gateway.usage(account_id)
        assert [(r["model"], r["status"], r["cost_nano"]) for r in rows] == [
            ("calc:wait", "upstream_broken", 0), ("calc:add", "ok", 2_000_000)]


async def test_a_stateless_upstream_server_answering_json_is_served_the_same(tmp_path):
    h = McpHarness(tmp_path, json_response=True, stateless=True)
    async with h.running():
        _, secret = await h.gateway.funded_key(10)
        async with sdk(h, secret, "/mcp/calc") as session:
            assert len((await session.list_tools()).tools) == 4
            assert (await session.call_tool("add", {"a": 3, "b": 4})).structuredContent == {"result": 7}
            [link] = [link for (sid, name), link in h.mcp.tools.http_links.items() if name == "calc"]
            assert link.session_id is None and link.initializations == 1  # no upstream session id to keep
        assert not h.mcp.tools.http_links  # the client's DELETE ended its upstream sessions too
