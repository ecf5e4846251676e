"""``gatewayctl key ...``: API keys: create, inspect, limit, disable, revoke."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from gatewayctl import render
from gatewayctl.fair_share import MaxConcurrentOpt, NoMaxConcurrentOpt, max_concurrent_field
from gatewayctl.key_budget import BudgetOpt, BudgetPeriodOpt, NoBudgetOpt, budget_fields
from gatewayctl.common import (
    account_path, AccountArg, app, data, exclusive, force_option, JsonOpt, key_path, KeyArg, nothing_to_change, parse_date,
    parse_ip_network, parse_name, parse_usd, session, SocketOpt, split_names,
)


key_app = typer.Typer(no_args_is_help=True)  # help: the group callback's docstring
app.add_typer(key_app, name="key")


@key_app.callback()
def _key_group(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """API keys: create, inspect, limit, disable, revoke."""


ModelsOpt = Annotated[
    Optional[str],
    typer.Option("--models", metavar="M1,M2", help="Only these models (comma-separated)."),
]
McpOpt = Annotated[
    Optional[str],
    typer.Option("--mcp", metavar="S1,S2:TOOL",
                 help="Only these MCP servers and server:tool patterns (comma-separated; tool globs like get_*)."),
]
AllowIpOpt = Annotated[
    Optional[list[str]],
    typer.Option("--allow-ip", metavar="CIDR", parser=parse_ip_network,
                 help="Only from this address or network; repeat for more."),
]
GroupOpt = Annotated[Optional[str], typer.Option("--group", metavar="G", parser=parse_name,
                                                 help="Price group the key uses.")]
SpendLimitOpt = Annotated[
    Optional[int],
    typer.Option("--spend-limit", metavar="USD", parser=parse_usd,
                 help="Stop the key after it has spent this much."),
]
ForceOpt = Annotated[bool, force_option("Set an --expires day that has passed already")]
ExpiresOpt = Annotated[
    Optional[str],
    typer.Option("--expires", metavar="YYYY-MM-DD", parser=parse_date,
                 help="Last day the key works (end of day, account time zone); a day already past is refused "
                 "unless --force."),
]


@key_app.command("create")
def key_create(
    account: AccountArg,
    name: Annotated[str, typer.Option("--name", metavar="N", help="Key name.", parser=parse_name)],
    spend_limit: SpendLimitOpt = None,
    expires: ExpiresOpt = None,
    models: ModelsOpt = None,
    allow_ip: AllowIpOpt = None,
    group: GroupOpt = None,
    max_concurrent: MaxConcurrentOpt = None,
    budget: BudgetOpt = None,
    budget_period: BudgetPeriodOpt = None,
    mcp: McpOpt = None,
    force: ForceOpt = False,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Create a key for an account and print its secret (shown this once)."""
    body: dict[str, Any] = {"name": name}
    budget_fields(body, budget, budget_period)
    if spend_limit is not None:
        body["spend_limit_nano"] = spend_limit
    if expires is not None:
        body["expires_on"] = expires
    if models is not None:
        body["models"] = split_names(models, "'--models'", allow_empty=False)
    if mcp is not None:
        body["mcp"] = split_names(mcp, "'--mcp'", allow_empty=False)
    if allow_ip:
        body["allow_ips"] = allow_ip
    if group is not None:
        body["group"] = group
    max_concurrent_field(body, max_concurrent)
    if force:
        body["force"] = True  # an --expires already past, set anyway
    s = session(socket, json_output)
    key = s.api.post(account_path(account, "keys"), body)

    def human(c: Console) -> None:
        render.show_object(c, key, render.KEY, "Key created")
        render.show_secret(c, str(key.get("secret", "")))

    s.emit(key, human)


@key_app.command("list")
def key_list(account: AccountArg, socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """List an account's keys."""
    s = session(socket, json_output)
    keys = data(s.api.get(account_path(account, "keys")))
    s.emit(keys, lambda c: render.show_list(c, keys, render.KEY_COLUMNS, empty="No keys."))


@key_app.command("show")
def key_show(key: KeyArg, socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """Show one key."""
    s = session(socket, json_output)
    found = s.api.get(key_path(key))
    s.emit(found, lambda c: render.show_object(c, found, render.KEY))


@key_app.command("update")
def key_update(
    key: KeyArg,
    name: Annotated[Optional[str], typer.Option("--name", metavar="N", help="New name.",
                                                parser=parse_name)] = None,
    spend_limit: SpendLimitOpt = None,
    no_spend_limit: Annotated[bool, typer.Option("--no-spend-limit",
                                                 help="Remove the spend limit.")] = False,
    expires: ExpiresOpt = None,
    no_expiry: Annotated[bool, typer.Option("--no-expiry", help="Never expire.")] = False,
    models: ModelsOpt = None,
    all_models: Annotated[bool, typer.Option("--all-models", help="Allow every model.")] = False,
    allow_ip: AllowIpOpt = None,
    any_ip: Annotated[bool, typer.Option("--any-ip", help="Allow any address.")] = False,
    group: GroupOpt = None,
    no_group: Annotated[bool, typer.Option("--no-group", help="Use no group.")] = False,
    max_concurrent: MaxConcurrentOpt = None,
    no_max_concurrent: NoMaxConcurrentOpt = False,
    budget: BudgetOpt = None,
    budget_period: BudgetPeriodOpt = None,
    no_budget: NoBudgetOpt = False,
    mcp: McpOpt = None,
    all_mcp: Annotated[bool, typer.Option("--all-mcp", help="Allow every MCP server.")] = False,
    force: ForceOpt = False,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Change a key. Only the settings given change; the rest stay as they are."""
    exclusive({"--spend-limit": spend_limit is not None, "--no-spend-limit": no_spend_limit})
    exclusive({"--expires": expires is not None, "--no-expiry": no_expiry})
    exclusive({"--models": models is not None, "--all-models": all_models})
    exclusive({"--allow-ip": bool(allow_ip), "--any-ip": any_ip})
    exclusive({"--mcp": mcp is not None, "--all-mcp": all_mcp})
    exclusive({"--group": group is not None, "--no-group": no_group})
    exclusive({"--max-concurrent": max_concurrent is not None, "--no-max-concurrent": no_max_concurrent})
    body: dict[str, Any] = {}
    if name is not None:
        body["name"] = name
    if spend_limit is not None or no_spend_limit:
        body["spend_limit_nano"] = spend_limit
    if expires is not None or no_expiry:
        body["expires_on"] = expires
    if models is not None:
        body["models"] = split_names(models, "'--models'", allow_empty=False)
    elif all_models:
        body["models"] = None
    if mcp is not None:
        body["mcp"] = split_names(mcp, "'--mcp'", allow_empty=False)
    elif all_mcp:
        body["mcp"] = None
    if allow_ip or any_ip:
        body["allow_ips"] = allow_ip or None
    if group is not None or no_group:
        body["group"] = group
    max_concurrent_field(body, max_concurrent, no_max_concurrent)
    budget_fields(body, budget, budget_period, no_budget)
    if not body:
        raise nothing_to_change()
    if force:
        body["force"] = True  # an --expires already past, set anyway
    s = session(socket, json_output)
    updated = s.api.patch(key_path(key), body)
    s.emit(updated, lambda c: render.show_object(c, updated, render.KEY, "Key updated"))


def _key_state_command(action: str, summary: str) -> None:
    """``key disable|enable|revoke KEY``: the same call to a different endpoint."""

    def command(key: KeyArg, socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
        s = session(socket, json_output)
        changed = s.api.post(key_path(key, action))
        s.emit(changed, lambda c: render.show_object(c, changed, render.KEY))

    command.__doc__ = summary
    command.__name__ = f"key_{action}"
    key_app.command(action)(command)


_key_state_command("disable", "Stop a key from working until it is enabled again.")
_key_state_command("enable", "Let a disabled key work again.")
_key_state_command("revoke", "Delete a key for good. It cannot be enabled again.")
