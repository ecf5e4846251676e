"""Listing and calling tools for one caller: access, links, concurrency and money.

The order of a ``tools/call``, in one place (:meth:`Tools.call_tool`):

    resolve the name -> access (server list, key list, group list: a tool outside is the
    same -32602 as a tool that does not exist, and nothing is sent upstream) -> requests in
    flight (the key's and account's fair share, shared with model requests) -> hold (the
    call's exact price, on the same balance, spend limit and budget as model requests,
    through the same tab) -> the upstream call -> settle (charge, release, usage row)

A call is charged when the server answered it with a result (``isError`` results too: the
tool ran) or when the client left after the call reached the server (it may have run); a
JSON-RPC error from the server, or a server unreachable, timed out or broken, charges
nothing. Free tools (no price) take a zero hold and write their usage row all the same,
so every call is logged and counted.

A call is priced as the catalogue prices a provider's hosted tools
(``gatewayd.billing.pricing``: ``tool_prices``, nano-dollars a call, times the group's
ratio): the tool is a catalogue entry of its own for the tab, named ``server:tool``.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Awaitable, Callable

import httpx
import trio

from gatewayd import trace
from gatewayd.access import Caller
from gatewayd.billing.ledger import Ledger
from gatewayd.billing.pricing import Bill
from gatewayd.billing.tab import Outcome, store_failed_while_settling
from gatewayd.catalogue import Model
from gatewayd.concurrency import InFlight
from gatewayd.config import Config, Group
from gatewayd.errors import GatewayError
from gatewayd.formats.usage import Usage
from gatewayd.mcp import access, protocol as p
from gatewayd.mcp.settings import McpServer, OAuthClientCredentials
from gatewayd.mcp.upstream import HttpLink, Link, OnNotification, StdioLink, TokenSource, UpstreamFailure, \
    UpstreamRpcError
from gatewayd.money import apply_ratio
from gatewayd.store.base import StoreUnavailable

log = logging.getLogger("gatewayd.mcp")

CALL = "mcp_call"  # the tool-price name a call is billed under: the usage row's line ``tool:mcp_call``
CALL_USAGE = Usage(tool_calls=((CALL, 1),))
MAX_LINKS = 10_000  # upstream HTTP sessions held on this instance (the least recently used goes first)
MAX_PAGES = 50  # tools/list pages followed per server


def tool_entry(server: McpServer, tool: str, price_nano: int) -> Model:
    """The tab's catalogue entry for one tool: nothing but its price a call."""
    return Model(id=f"{server.name}:{tool}", routes=(), kind="mcp", family="other", input_price=None,
                 output_price=None, cached_input_price=None, cache_write_price=None, max_output_tokens=0,
                 rate_limit=None, tool_prices={CALL: price_nano})


def refused(error: GatewayError, request_id: Any) -> p.RpcError:
    """A gateway refusal (balance, key limit, concurrency, store) as a JSON-RPC error; ``data``
    carries the HTTP status and code the model endpoints would answer."""
    data: dict[str, Any] = {"status": error.status, "code": error.code}
    if "Retry-After" in error.headers or "retry-after" in error.headers:
        data["retry_after"] = error.headers.get("Retry-After") or error.headers.get("retry-after")
    return p.RpcError(p.REFUSED, error.message, id=request_id, data=data)


def _settled(usage: Usage, outcome: Outcome, bill: Bill, store_s: float) -> None:
    """The request's log line says how the call ended and what it was charged."""
    t = trace.get()
    if t is not None:
        t.usage_status = outcome.value
        t.cost_nano = bill.total_nano


async def _close_quietly(link: Link) -> None:
    """Close a link in the background: whatever goes wrong is logged, never taken to the
    nursery that every stdio server of the gateway runs in."""
    try:
        await link.aclose()
    except Exception as e:  # noqa: BLE001 - a goodbye that failed; the link is dropped all the same
        log.warning("closing the link to MCP server %s failed: %s", link.server.name, type(e).__name__,
                    exc_info=e, extra={"fields": {"mcp_server": link.server.name}})


class Tools:
    """The upstream links of this instance and what a caller may do with them."""

    def __init__(self, config: Config, ledger: Ledger, in_flight: InFlight, *,
                 http: httpx.AsyncClient, on_call: Callable[[str, str], None] | None = None) -> None:
        self.config = config
        self.ledger = ledger
        self.in_flight = in_flight
        self.http = http
        self.nursery: trio.Nursery | None = None  # set by the gateway's run(): stdio processes live there
        self.http_links: OrderedDict[tuple[str, str], HttpLink] = OrderedDict()
        self.stdio_links: dict[str, StdioLink] = {}
        self.tokens: dict[str, TokenSource] = {}
        self.on_call = on_call  # (server, outcome): the metrics

    # -- access ------------------------------------------------------------------------

    def may_use(self, caller: Caller, group: Group, server: McpServer, tool: str) -> bool:
        return (access.tool_in_server_list(server.tools, tool)
                and access.allows(access.rules(caller.key.mcp), server.name, tool)
                and access.allows(access.rules(group.mcp), server.name, tool))

    def servers_for(self, caller: Caller, group: Group) -> list[McpServer]:
        """The servers some tool of which the caller may use, in the config's order."""
        key_rules, group_rules = access.rules(caller.key.mcp), access.rules(group.mcp)
        return [s for s in self.config.mcp_servers.values()
                if access.allows_server(key_rules, s.name) and access.allows_server(group_rules, s.name)]

    # -- links -------------------------------------------------------------------------

    def link(self, session_id: str, server: McpServer) -> Link:
        if server.transport == "stdio":
            found = self.stdio_links.get(server.name)
            if found is None:
                if self.nursery is None:
                    raise UpstreamFailure("stdio MCP servers run only in a started gateway")
                found = self.stdio_links[server.name] = StdioLink(server, self.nursery)
            return found
        key = (session_id, server.name)
        link = self.http_links.get(key)
        if link is None:
            tokens = None
            if isinstance(server.auth, OAuthClientCredentials):
                tokens = self.tokens.get(server.name)
                if tokens is None:
                    tokens = self.tokens[server.name] = TokenSource(server.auth, self.http, server.timeout_s)
            link = self.http_links[key] = HttpLink(server, self.http, tokens)
            while len(self.http_links) > MAX_LINKS:
                _, old = self.http_links.popitem(last=False)
                self._close_later(old)
        else:
            self.http_links.move_to_end(key)
        return link

    def _close_later(self, link: Link) -> None:
        if self.nursery is not None:
            self.nursery.start_soon(_close_quietly, link)

    def end_session(self, session_id: str) -> None:
        """The client ended its session (DELETE): its upstream sessions end too."""
        for key in [k for k in self.http_links if k[0] == session_id]:
            self._close_later(self.http_links.pop(key))

    def reconfigure(self, config: Config) -> list[str]:
        """A reload: links to servers removed or changed are closed; every other link, and the
        sessions using it, stay. Returns the names of the servers whose links were closed."""
        old, self.config = self.config.mcp_servers, config
        gone = [name for name, server in old.items() if config.mcp_servers.get(name) != server]
        for name in gone:
            for key in [k for k in self.http_links if k[1] == name]:
                self._close_later(self.http_links.pop(key))
            stdio = self.stdio_links.pop(name, None)
            if stdio is not None:
                self._close_later(stdio)
            self.tokens.pop(name, None)
        return gone

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            for link in list(self.stdio_links.values()):
                await link.aclose()
            self.stdio_links.clear()
            self.http_links.clear()

    # -- tools/list ------------------------------------------------------------------------

    async def list_tools(self, caller: Caller, group: Group, session_id: str, scope: str, request_id: Any) -> list[Any]:
        """Every tool the caller may use at ``scope`` (a server, or ``*``: all, named server__tool).
        On the aggregate endpoint a server that fails is left out (and logged), so one broken
        server does not hide the others' tools; on a server's own endpoint it is the error."""
        servers = self.servers_for(caller, group)
        if scope != "*":
            servers = [s for s in servers if s.name == scope]
        found: dict[str, list[Any]] = {}
        failures: dict[str, str] = {}

        async def fetch(server: McpServer) -> None:
            try:
                found[server.name] = await self._all_tools(session_id, server)
            except (UpstreamFailure, UpstreamRpcError) as e:
                failures[server.name] = str(e)
                log.warning("MCP server %s could not list its tools: %s", server.name, e,
                            extra={"fields": {"mcp_server": server.name}})

        async with trio.open_nursery() as nursery:
            for server in servers:
                nursery.start_soon(fetch, server)
        if scope != "*" and failures:
            raise p.RpcError(p.UPSTREAM_FAILED, f"the MCP server {scope} could not list its tools: "
                                                f"{failures[scope]}", id=request_id)
        out: list[Any] = []
        for server in servers:
            for tool in found.get(server.name, ()):
                if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                    continue
                if not self.may_use(caller, group, server, tool["name"]):
                    continue
                out.append(tool if scope != "*" else {**tool, "name": p.qualified(server.name, tool["name"])})
        return out

    async def _all_tools(self, session_id: str, server: McpServer) -> list[Any]:
        link = self.link(session_id, server)
        tools: list[Any] = []
        cursor = None
        for _ in range(MAX_PAGES):
            result = await link.request("tools/list", {"cursor": cursor} if cursor else {})
            if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
                raise UpstreamFailure("the MCP server's tools/list answer has no tools list")
            tools.extend(result["tools"])
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        return tools

    # -- tools/call --------------------------------------------------------------------------

    def resolve(self, caller: Caller, group: Group, scope: str, name: str,
                request_id: Any) -> tuple[McpServer, str]:
        """The server and tool a call names, if the caller may use it; else -32602 Unknown tool."""
        if scope == "*":
            split = p.split_qualified(name)
            if split is None:
                raise p.unknown_tool(name, request_id)
            server_name, tool = split
        else:
            server_name, tool = scope, name
        server = self.config.mcp_servers.get(server_name)
        if server is None or not self.may_use(caller, group, server, tool):
            raise p.unknown_tool(name, request_id)
        return server, tool

    async def call_tool(self, caller: Caller, group: Group, session_id: str, scope: str, request: p.Request,
                   request_id: str, on_notification: OnNotification | None) -> dict[str, Any]:
        """One ``tools/call``, in the module doc's order; the JSON-RPC response to send."""
        name, arguments = p.tool_call_target(request.params, request.id)
        server, tool = self.resolve(caller, group, scope, name, request.id)
        t = trace.get()
        if t is not None:
            t.model = f"{server.name}:{tool}"
            t.provider = server.name
        settings = self.config.server
        try:
            ticket = self.in_flight.enter(caller.account, caller.key, account_default=settings.max_concurrent_per_account,
                                          key_default=settings.max_concurrent_per_key)
        except GatewayError as e:
            raise refused(e, request.id) from None
        try:
            price = server.price_nano(tool)
            entry = tool_entry(server, tool, price)
            try:
                tab_opening = self.ledger.open_tab(
                    caller.account, caller.key, apply_ratio(price, group.price_ratio), request_id=request_id,
                    model=entry, endpoint="mcp", stream=False, price_ratio=group.price_ratio, input_estimate=0,
                    on_settled=_settled)
                return await self._run(tab_opening, server, tool, session_id, request, arguments, on_notification)
            except GatewayError as e:  # the hold refused (403 balance or key limit, 503 store, 400 too much)
                raise refused(e, request.id) from None
        finally:
            ticket.leave()

    async def _run(self, tab_opening: Any, server: McpServer, tool: str, session_id: str, request: p.Request,
                   arguments: dict[str, Any], on_notification: OnNotification | None) -> dict[str, Any]:
        params = {**request.params, "name": tool, "arguments": arguments}
        outcome = "ok"
        async with tab_opening as tab:
            tab.hold.provider = server.name
            tab.hold.attempts = 1
            try:
                try:
                    result = await self.link(session_id, server).request("tools/call", params, on_notification,
                                                                         on_sent=tab.mark_sent)
                    if not isinstance(result, dict):
                        raise UpstreamFailure("the MCP server's tools/call answer is not an object")
                except UpstreamRpcError as e:
                    outcome = "upstream_error"
                    await tab.release(Outcome.UPSTREAM_ERROR, 200)
                    return p.error_doc(request.id, e.code, e.message, e.data)
                except UpstreamFailure as e:
                    outcome = "upstream_failed"
                    await tab.release(Outcome.UPSTREAM_BROKEN if tab.sent else Outcome.UPSTREAM_UNREACHABLE, 200)
                    return p.error_doc(request.id, p.UPSTREAM_FAILED, f"{e}; nothing was charged",
                                       {"server": server.name})
                except trio.Cancelled:
                    outcome = "client_disconnected"
                    if tab.sent:  # the server got the call and may have run it: charged, as a model's input is
                        await tab.settle(CALL_USAGE, Outcome.CLIENT_DISCONNECTED, 499)
                    raise
                await tab.settle(CALL_USAGE, Outcome.OK, 200)
                return p.result_doc(request.id, result)
            except StoreUnavailable:
                outcome = "store_unavailable"
                store_failed_while_settling(tab)
                return p.error_doc(request.id, p.REFUSED, "the gateway's database is unavailable right now; "
                                   "nothing was charged, retry shortly", {"status": 503, "code": "store_unavailable"})
            finally:
                if self.on_call is not None:
                    self.on_call(server.name, outcome)


Answer = Callable[[OnNotification | None], Awaitable[dict[str, Any]]]
