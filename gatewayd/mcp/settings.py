"""``[[mcp_servers]]``: the MCP servers the gateway offers its keys (docs/mcp.md).

Read with the rest of the file, so a mistake is the same one-line ``ConfigError`` as any
other key, and a reload (SIGHUP, ``gatewayctl reload``) that adds, removes or changes a
server takes effect without touching the others (``gatewayd.mcp.gateway``).

A server is reached over Streamable HTTP (``url``) or run by the gateway over stdio
(``command``, ``args``, ``env``); its credentials are a header whose value comes from the
environment, or OAuth client credentials (a token fetched from ``token_url`` and renewed
before it expires). Prices are USD a call, exact to the nano-dollar, one for the server
and any per tool (``tool_prices``; 0 makes a tool free).
"""

from __future__ import annotations

import os
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping

import attrs

from gatewayd.config_tables import ConfigError, Section
from gatewayd.mcp.access import TOOL_PATTERN, valid_server_name
from gatewayd.money import MAX_PAID_NANO, MoneyError, usd_to_nano

KEYS = frozenset({"name", "url", "command", "args", "env", "env_from", "cwd", "auth", "tools", "price_per_call",
                  "tool_prices", "connect_timeout_s", "timeout_s"})
AUTH_KEYS = {
    "header": frozenset({"type", "header", "value_env", "scheme"}),
    "oauth_client_credentials": frozenset({"type", "token_url", "client_id", "client_id_env", "client_secret_env",
                                           "scope", "audience", "resource"}),
}
# what a stdio server inherits from the daemon's environment: enough to find and run a
# program, never the daemon's secrets (provider keys); the rest is named in env / env_from
INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "SYSTEMROOT")


@attrs.frozen
class HeaderAuth:
    header: str
    value: str = attrs.field(repr=False)  # the whole header value (scheme included)


@attrs.frozen
class OAuthClientCredentials:
    token_url: str
    client_id: str
    client_secret: str = attrs.field(repr=False)
    scope: str | None = None
    audience: str | None = None
    resource: str | None = None


@attrs.frozen
class McpServer:
    """One ``[[mcp_servers]]`` entry, validated."""

    name: str
    url: str | None = None  # Streamable HTTP endpoint
    command: str | None = None  # stdio: the program, its arguments, environment and directory
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict, hash=False, repr=False)
    cwd: str | None = None
    auth: HeaderAuth | OAuthClientCredentials | None = None
    tools: tuple[str, ...] | None = None  # allow list (names or globs); None: every tool
    price_per_call_nano: int = 0
    tool_prices_nano: Mapping[str, int] = attrs.field(factory=dict, hash=False)
    connect_timeout_s: float = 10.0
    timeout_s: float = 300.0  # one request to the server, answer included (a tool call may be slow)

    @property
    def transport(self) -> str:
        return "http" if self.url is not None else "stdio"

    def price_nano(self, tool: str) -> int:
        """The price of one call of ``tool`` (0: free)."""
        return self.tool_prices_nano.get(tool, self.price_per_call_nano)


def _usd(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{where}: must be a price in USD (a number)")
    try:
        nano = usd_to_nano(Decimal(str(value)))
    except (MoneyError, InvalidOperation) as e:
        raise ConfigError(f"{where}: {e}") from None
    if nano < 0 or nano > MAX_PAID_NANO:
        raise ConfigError(f"{where}: must be between 0 and {MAX_PAID_NANO // 10**9} USD")
    return nano


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: must be a list of strings")
    return tuple(value)


def _string_table(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f"{where}: must be a table of strings")
    return dict(value)


def _env_value(env: Mapping[str, str], name: str, where: str) -> str:
    value = env.get(name)
    if not value:
        raise ConfigError(f"{where}: the environment variable {name} is not set")
    return value


def _auth(raw: Any, where: str, env: Mapping[str, str]) -> HeaderAuth | OAuthClientCredentials:
    s = Section(raw, where)
    kind = s.str("type", "header", choices=tuple(AUTH_KEYS))
    s.unknown(AUTH_KEYS[kind])
    if kind == "header":
        header = s.str("header", "Authorization")
        value = _env_value(env, s.str("value_env"), f"{where}.value_env")
        scheme = s.table.get("scheme", "Bearer" if header.lower() == "authorization" else "")
        if not isinstance(scheme, str):
            raise ConfigError(f"{where}.scheme: must be a string")
        return HeaderAuth(header=header, value=f"{scheme} {value}" if scheme else value)
    token_url = s.str("token_url")
    if not token_url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}.token_url: must start with http:// or https://")
    client_id = s.str("client_id", None)
    if client_id is None:
        client_id = _env_value(env, s.str("client_id_env"), f"{where}.client_id_env")
    return OAuthClientCredentials(
        token_url=token_url, client_id=client_id,
        client_secret=_env_value(env, s.str("client_secret_env"), f"{where}.client_secret_env"),
        scope=s.str("scope", None), audience=s.str("audience", None), resource=s.str("resource", None))


def _server(table: Any, where: str, env: Mapping[str, str]) -> McpServer:
    s = Section(table, where)
    s.unknown(KEYS)
    name = s.str("name")
    if not valid_server_name(name):
        raise ConfigError(f"{where}.name: {name!r} must be letters, digits, - and _ (at most 63, no '__': "
                          "the aggregate endpoint names tools server__tool)")
    url, command = s.str("url", None), s.str("command", None)
    if (url is None) == (command is None):
        raise ConfigError(f"{where}: give url (a Streamable HTTP server) or command (a stdio server), not both")
    if url is not None and not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}.url: must start with http:// or https://")
    stdio_only = [k for k in ("args", "env", "env_from", "cwd") if k in s.table]
    if url is not None and stdio_only:
        raise ConfigError(f"{where}.{stdio_only[0]}: only for a stdio server (command)")
    child_env: dict[str, str] = {}
    if command is not None:
        child_env = {k: env[k] for k in INHERITED_ENV if k in env}
        child_env.update(_string_table(s.table.get("env", {}), f"{where}.env"))
        for child, source in _string_table(s.table.get("env_from", {}), f"{where}.env_from").items():
            child_env[child] = _env_value(env, source, f"{where}.env_from.{child}")
    tools = None
    if "tools" in s.table:
        tools = _strings(s.table["tools"], f"{where}.tools")
        bad = [t for t in tools if not TOOL_PATTERN.match(t)]
        if bad or not tools:
            raise ConfigError(f"{where}.tools: must list tool names or globs (got {bad[0] if bad else 'none'!r})")
    prices = s.table.get("tool_prices", {})
    if not isinstance(prices, dict):
        raise ConfigError(f"{where}.tool_prices: must be a table of tool name = USD a call")
    return McpServer(
        name=name, url=url, command=command,
        args=_strings(s.table.get("args", []), f"{where}.args"),
        env=child_env, cwd=s.str("cwd", None),
        auth=_auth(s.table["auth"], f"{where}.auth", env) if "auth" in s.table else None,
        tools=tools,
        price_per_call_nano=_usd(s.table.get("price_per_call", 0), f"{where}.price_per_call"),
        tool_prices_nano={t: _usd(p, f"{where}.tool_prices.{t}") for t, p in prices.items()},
        connect_timeout_s=float(s.number("connect_timeout_s", 10.0, minimum=0.001)),
        timeout_s=float(s.number("timeout_s", 300.0, minimum=0.001)),
    )


def read_servers(raw: Any, env: Mapping[str, str] | None = None) -> dict[str, McpServer]:
    """``[[mcp_servers]]`` -> the servers by name (empty without the section)."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise ConfigError("mcp_servers: must be an array of tables ([[mcp_servers]])")
    env = os.environ if env is None else env
    servers: dict[str, McpServer] = {}
    for i, table in enumerate(raw):
        server = _server(table, f"mcp_servers[{i}]", env)
        if server.name in servers:
            raise ConfigError(f"mcp_servers[{i}].name: duplicate MCP server {server.name!r}")
        servers[server.name] = server
    return servers
