"""The MCP gateway in-process, with real FastMCP servers behind it (tests/mcp/servers.py).

The gateway is tests/inproc.py's (real config, SQLite file, directory, ledger, relay and
listener) with the MCP endpoints mounted as the daemon mounts them; its upstream HTTP
client reaches each FastMCP server's Streamable HTTP app through ``httpx.ASGITransport``
(one per port of ``http://127.0.0.1:PORT/mcp``); clients reach the gateway the same way.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import AsyncIterator

import httpx
import trio

from gatewayd.mcp.gateway import McpGateway
from tests.inproc import Gateway
from tests.mcp.servers import make_server

SECRET = b"test-secret-shared-by-every-instance"


class ByPort(httpx.AsyncBaseTransport):
    """``http://127.0.0.1:PORT/...`` -> the ASGI app serving that port."""

    def __init__(self, apps: dict[int, object]) -> None:
        self.transports = {port: httpx.ASGITransport(app=app) for port, app in apps.items()}  # type: ignore[arg-type]
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        transport = self.transports.get(request.url.port or 80)
        if transport is None:
            raise httpx.ConnectError("connection refused", request=request)
        return await transport.handle_async_request(request)


def servers_toml(extra: str = "") -> str:
    return f"""
[[mcp_servers]]
name = "calc"
url = "http://127.0.0.1:9001/mcp"
price_per_call = 0.002
tool_prices = {{ echo = 0 }}

[[mcp_servers]]
name = "files"
url = "http://127.0.0.1:9002/mcp"
tools = ["read_file", "add", "progress"]
{extra}
"""


class McpHarness:
    def __init__(self, tmp: Path, *, toml: str | None = None, json_response: bool = False,
                 stateless: bool = False) -> None:
        self.upstreams = {"calc": make_server("calc", json_response=json_response, stateless=stateless),
                          "files": make_server("files", json_response=True)}
        self.transport = ByPort({9001: self.upstreams["calc"].streamable_http_app(),
                                 9002: self.upstreams["files"].streamable_http_app()})
        self.gateway = Gateway(tmp, lambda r: httpx.Response(500), server=toml if toml is not None else servers_toml())
        self.api = self.gateway.app.api
        self.mcp = McpGateway(self.api, SECRET, http=httpx.AsyncClient(transport=self.transport))
        self.api.mcp = self.mcp

    def client(self, secret: str) -> httpx.AsyncClient:
        """An HTTP client for the gateway, as an MCP client configures one: the key as Bearer."""
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.gateway.app), base_url="http://gateway.test",
                                 headers={"authorization": f"Bearer {secret}"}, timeout=30)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator["McpHarness"]:
        async with contextlib.AsyncExitStack() as stack:
            for server in self.upstreams.values():
                await stack.enter_async_context(server.session_manager.run())
            async with trio.open_nursery() as nursery:
                await nursery.start(self.mcp.run)
                try:
                    yield self
                finally:
                    nursery.cancel_scope.cancel()
        await self.gateway.aclose()
