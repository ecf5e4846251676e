"""Which MCP tools a caller may use: the key's list, its group's list and the server's own.

An access list is a list of entries, each either a server's name (every tool the server
offers) or ``server:pattern``, where the pattern is a tool name or a shell-style glob
(``github:get_*``). A key's list (``Key.mcp``, set with ``gatewayctl key create/update
--mcp`` or the console) and a group's (``[[groups]] mcp``) both apply: a tool is usable
only when every list present allows it, and the server's own ``tools`` allow list
(``[[mcp_servers]] tools``) lets it through. No list (None) allows every server.

Pure functions over plain values: the gateway (``gatewayd.mcp.gateway``) asks them before
a tool is listed or called, so a tool outside is neither shown nor sent upstream.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Iterable

import attrs

SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")  # no "__": the aggregate endpoint's separator
TOOL_PATTERN = re.compile(r"^[A-Za-z0-9_.*?\[\]/-]{1,128}$")
MAX_ENTRIES = 200


class AccessListError(ValueError):
    """An access list entry that is not ``server`` or ``server:pattern``."""


def valid_server_name(name: str) -> bool:
    return bool(SERVER_NAME.match(name)) and "__" not in name


@attrs.frozen
class Rule:
    server: str
    tool_glob: str  # "*": every tool of the server

    def allows(self, server: str, tool: str) -> bool:
        return server == self.server and (self.tool_glob == "*" or fnmatch.fnmatchcase(tool, self.tool_glob))


def parse_entry(entry: object) -> Rule:
    if not isinstance(entry, str) or not entry.strip():
        raise AccessListError("an MCP access entry must be a non-empty string (server or server:tool)")
    server, colon, tool = entry.strip().partition(":")
    if not valid_server_name(server):
        raise AccessListError(f"{entry!r}: {server!r} is not an MCP server name (letters, digits, - and _, "
                              "no '__')")
    if colon and not TOOL_PATTERN.match(tool):
        raise AccessListError(f"{entry!r}: the tool part must be a tool name or a glob such as get_*")
    return Rule(server, tool if colon else "*")


def parse_list(entries: object) -> tuple[str, ...]:
    """A list as stored: each entry checked and normalised, duplicates dropped, order kept."""
    if not isinstance(entries, (list, tuple)) or not entries:
        raise AccessListError("mcp must be a non-empty list of servers or server:tool patterns "
                              "(or null for every server)")
    if len(entries) > MAX_ENTRIES:
        raise AccessListError(f"mcp has {len(entries)} entries; at most {MAX_ENTRIES} are allowed")
    out: list[str] = []
    for entry in entries:
        rule = parse_entry(entry)
        text = rule.server if rule.tool_glob == "*" else f"{rule.server}:{rule.tool_glob}"
        if text not in out:
            out.append(text)
    return tuple(out)


def rules(entries: Iterable[str] | None) -> tuple[Rule, ...] | None:
    return None if entries is None else tuple(parse_entry(e) for e in entries)


def allows(rule_list: tuple[Rule, ...] | None, server: str, tool: str) -> bool:
    return rule_list is None or any(r.allows(server, tool) for r in rule_list)


def allows_server(rule_list: tuple[Rule, ...] | None, server: str) -> bool:
    """Some tool of ``server`` may be allowed (what decides whether the server is offered at all)."""
    return rule_list is None or any(r.server == server for r in rule_list)


def tool_in_server_list(allowed_tools: tuple[str, ...] | None, tool: str) -> bool:
    """The server's own ``tools`` allow list (names or globs; None: every tool it offers)."""
    return allowed_tools is None or any(fnmatch.fnmatchcase(tool, p) for p in allowed_tools)
