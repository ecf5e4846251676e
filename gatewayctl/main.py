"""gatewayctl: the operator's command line for a running gatewayd.

Every command is one or two calls to the admin API on gatewayd's Unix socket.
Each prints a rich table for people, or with ``--json`` exactly one JSON
document on stdout for scripts: the API's object, or for a list the ``data``
array itself. ``--socket`` and ``--json`` go before the command or after it
(``gatewayctl --json key list ACCOUNT`` and ``gatewayctl key list ACCOUNT
--json``), as kubectl and docker users type them; given in both places, the
one after the command wins.

Exit status: 0 done; 1 the daemon could not be reached, refused the request,
or (``audit``) found a problem; 2 the command line itself was wrong, including
a dollar amount, date or IP network that does not parse (and a price list
that ``prices import`` cannot read).

Money on the command line is US dollars as decimal text (``10.50``); it is
converted exactly to integer nano-dollars before it is sent.
"""

from __future__ import annotations

import csv
import datetime
import ipaddress
import json
import re
import sys
import zoneinfo
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Optional

import attrs
import typer
from typer.core import TyperGroup
from rich.console import Console

from gatewayctl import render
from gatewayctl.client import AdminClient, AdminError, resolve_socket, segment
from gatewayctl.alert_options import AlertBelowOpt, NoAlertBelowOpt, alert_below_field
from gatewayctl.fair_share import MaxConcurrentOpt, NoMaxConcurrentOpt, max_concurrent_field
from gatewayctl.key_budget import BudgetOpt, BudgetPeriodOpt, NoBudgetOpt, budget_fields
from gatewayd.billing import breakdown
from gatewayd.control_chars import escape_control_characters
from gatewayd.money import MoneyError, format_usd, usd_to_nano

# --- Parsing the command line ------------------------------------------------------------
# Each parser turns one argument into what the API wants, or raises BadParameter
# (exit 2, "Invalid value for '--option': <why>").


def parse_usd(value: str) -> int:
    """A dollar amount of zero or more, as exact nano-dollars."""
    try:
        nano = usd_to_nano(value)
    except MoneyError as exc:
        raise typer.BadParameter(f"{exc} (give US dollars, e.g. 10.50)") from None
    if nano < 0:
        raise typer.BadParameter(f"{value!r} is negative")
    return nano


def parse_payment(value: str) -> int:
    """A dollar amount above zero: a payment of nothing is a typo."""
    nano = parse_usd(value)
    if nano == 0:
        raise typer.BadParameter(f"{value!r}: a payment must be more than zero")
    return nano


def parse_date(value: str) -> str:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        raise typer.BadParameter(f"{value!r} is not a date in YYYY-MM-DD form")
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a calendar date") from None
    return value


def parse_ip_network(value: str) -> str:
    """An IP address or CIDR network; sent as typed (the daemon normalises and checks again)."""
    entry = value.strip()
    try:
        ipaddress.ip_network(entry, strict=False)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not an IP address or CIDR network (e.g. 203.0.113.7 or 10.0.0.0/8)"
        ) from None
    return entry


def parse_timezone(value: str) -> str:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise typer.BadParameter(
            f"{value!r} is not an IANA time zone (e.g. Europe/Berlin, UTC)"
        ) from None
    return value


def parse_name(value: str) -> str:
    if not value.strip():
        raise typer.BadParameter("must not be empty")
    return value


def split_names(value: str, option: str, *, allow_empty: bool) -> list[str]:
    """'a, b,a' -> ['a', 'b']: comma-separated, trimmed, first occurrence kept."""
    names = list(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    if not names and not allow_empty:
        raise typer.BadParameter("give at least one name, comma-separated", param_hint=option)
    return names


def exclusive(given: dict[str, bool]) -> None:
    """Refuse a pair like --spend-limit/--no-spend-limit given together."""
    names = [name for name, present in given.items() if present]
    if len(names) > 1:
        raise typer.BadParameter("these cannot be used together", param_hint=names)


def nothing_to_change() -> typer.BadParameter:
    return typer.BadParameter("nothing to change: give at least one option (see --help)")


def read_password(param_hint: str) -> str:
    """The new password: prompted twice, hidden, on a terminal; else all of stdin."""
    if sys.stdin.isatty():
        return typer.prompt("New password", hide_input=True, confirmation_prompt=True)
    password = sys.stdin.read().removesuffix("\n").removesuffix("\r")
    if not password:
        raise typer.BadParameter("no password on standard input (pipe it in, one line)",
                                 param_hint=param_hint)
    if "\n" in password or "\r" in password:
        raise typer.BadParameter("the password on standard input must be a single line",
                                 param_hint=param_hint)
    return password


# --- Options every command accepts ------------------------------------------------------

_GLOBALS = "gatewayctl.globals"  # key in the context's meta, which the whole command chain shares


def _carried(ctx: typer.Context, name: str, value: Any, given: bool) -> Any:
    """An option accepted before the command and after it: the last one given wins.

    ``gatewayctl``, ``gatewayctl account`` / ``key`` and every command declare ``--socket``
    and ``--json``; each occurrence is remembered in the context chain's shared ``meta``,
    so the command sees the last one given, wherever it was typed.
    """
    seen = ctx.meta.setdefault(_GLOBALS, {})
    if given:
        seen[name] = value
    return seen.get(name, value)


def _socket_option(ctx: typer.Context, value: Optional[str]) -> Optional[str]:
    return _carried(ctx, "socket", value, value is not None)


def _json_option(ctx: typer.Context, value: bool) -> bool:
    return _carried(ctx, "json", value, value)


SocketOpt = Annotated[
    Optional[str],
    typer.Option(
        "--socket",
        metavar="PATH",
        help="gatewayd's admin socket (default: $GATEWAY_ADMIN_SOCKET, else var/admin.sock).",
        show_default=False,
        callback=_socket_option,
    ),
]
JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="Print one JSON document on stdout instead of a table.",
                 callback=_json_option),
]
AccountArg = Annotated[str, typer.Argument(metavar="ACCOUNT", help="Account id or email.")]
KeyArg = Annotated[str, typer.Argument(metavar="KEY", help="Key id.")]


@attrs.frozen
class Session:
    """What a command needs: the admin client, and whether to print JSON or tables."""

    api: AdminClient
    as_json: bool

    def emit(self, document: Any, human: Callable[[Console], None]) -> None:
        if self.as_json:
            typer.echo(json.dumps(document, indent=2, ensure_ascii=False))
        else:
            human(Console(highlight=False))


def session(socket: str | None, as_json: bool) -> Session:
    return Session(api=AdminClient(resolve_socket(socket)), as_json=as_json)


def data(document: Any) -> list[dict[str, Any]]:
    """The ``data`` list of a list answer."""
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise AdminError("gatewayd answered a list request without a 'data' list")
    return document["data"]


def account_path(account: str, *rest: str) -> str:
    return "/".join(["/admin/v1/accounts", segment(account), *rest])


def key_path(key: str, *rest: str) -> str:
    return "/".join(["/admin/v1/keys", segment(key), *rest])


# --- The application --------------------------------------------------------------------


class _Group(TyperGroup):
    """Root group: turns an AdminError from any command into one line on stderr and exit 1."""

    def invoke(self, ctx: Any) -> Any:  # a click Context (typer's vendored click has no public name for it)
        try:
            return super().invoke(ctx)
        except AdminError as exc:
            typer.echo(f"gatewayctl: {escape_control_characters(str(exc))}", err=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_Group,
    name="gatewayctl",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # locals may hold a password or a secret
)
account_app = typer.Typer(no_args_is_help=True)  # help: the group callbacks' docstrings
key_app = typer.Typer(no_args_is_help=True)
app.add_typer(account_app, name="account")
app.add_typer(key_app, name="key")


@app.callback()
def _root(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """Operate a running gatewayd over its admin socket: accounts, payments, keys, usage.

    --socket and --json may come before the command or after it.
    """


@account_app.callback()
def _account_group(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """Accounts, their payments, groups and embedding models."""


@key_app.callback()
def _key_group(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """API keys: create, inspect, limit, disable, revoke."""


# --- account ----------------------------------------------------------------------------


@account_app.command("create")
def account_create(
    email: Annotated[str, typer.Argument(help="Login email of the new account.")],
    name: Annotated[Optional[str], typer.Option(help="Display name.", parser=parse_name)] = None,
    timezone: Annotated[
        Optional[str],
        typer.Option(metavar="Area/City", help="IANA time zone; key expiry dates use it.",
                     parser=parse_timezone),
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read a console password from stdin.")
    ] = False,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Create an account."""
    s = session(socket, json_output)
    body: dict[str, Any] = {"email": email}
    if name is not None:
        body["name"] = name
    if timezone is not None:
        body["timezone"] = timezone
    if password_stdin:
        body["password"] = read_password("--password-stdin")
    account = s.api.post("/admin/v1/accounts", body)
    s.emit(account, lambda c: render.show_object(c, account, render.ACCOUNT, "Account created"))


@account_app.command("list")
def account_list(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """List all accounts."""
    s = session(socket, json_output)
    accounts = data(s.api.get("/admin/v1/accounts"))
    s.emit(accounts, lambda c: render.show_list(
        c, accounts, render.ACCOUNT_COLUMNS, empty="No accounts."))


@account_app.command("show")
def account_show(account: AccountArg, socket: SocketOpt = None, json_output: JsonOpt = False
                 ) -> None:
    """Show one account."""
    s = session(socket, json_output)
    found = s.api.get(account_path(account))
    s.emit(found, lambda c: render.show_object(c, found, render.ACCOUNT))


@account_app.command("update")
def account_update(
    account: AccountArg,
    name: Annotated[Optional[str], typer.Option(help="New display name.", parser=parse_name)
                    ] = None,
    timezone: Annotated[
        Optional[str],
        typer.Option(metavar="Area/City", help="New IANA time zone.", parser=parse_timezone),
    ] = None,
    max_concurrent: MaxConcurrentOpt = None,
    no_max_concurrent: NoMaxConcurrentOpt = False,
    alert_below: AlertBelowOpt = None,
    no_alert_below: NoAlertBelowOpt = False,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Change an account's name, time zone, cap on requests in flight or low-balance alert."""
    exclusive({"--max-concurrent": max_concurrent is not None, "--no-max-concurrent": no_max_concurrent})
    body: dict[str, Any] = {}
    if name is not None:
        body["name"] = name
    if timezone is not None:
        body["timezone"] = timezone
    max_concurrent_field(body, max_concurrent, no_max_concurrent)
    alert_below_field(body, alert_below, no_alert_below)
    if not body:
        raise nothing_to_change()
    s = session(socket, json_output)
    updated = s.api.patch(account_path(account), body)
    s.emit(updated, lambda c: render.show_object(c, updated, render.ACCOUNT, "Account updated"))


@account_app.command("password")
def account_password(account: AccountArg, socket: SocketOpt = None,
                     json_output: JsonOpt = False) -> None:
    """Set the console password: read from stdin, or prompted twice (hidden) on a terminal."""
    s = session(socket, json_output)
    updated = s.api.put(account_path(account, "password"), {"password": read_password("stdin")})
    done = escape_control_characters(f"Password set for {updated.get('email', account)}.")
    s.emit(updated, lambda c: c.print(done, markup=False))


@account_app.command("pay")
def account_pay(
    account: AccountArg,
    amount: Annotated[
        int, typer.Argument(metavar="AMOUNT_USD", help="US dollars, e.g. 10.50.",
                            parser=parse_payment)
    ],
    note: Annotated[Optional[str], typer.Option(metavar="TEXT", help="Kept with the payment.")
                    ] = None,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Record a payment: adds to the balance and to the total paid."""
    s = session(socket, json_output)
    body: dict[str, Any] = {"amount_nano": amount}
    if note is not None:
        body["note"] = note
    answer = s.api.post(account_path(account, "payments"), body)

    def human(c: Console) -> None:
        paid = answer.get("account") or {}
        render.show_object(c, answer.get("payment") or {}, render.PAYMENT, "Payment recorded")
        c.print(escape_control_characters(f"{paid.get('email', account)}: balance "
                                          f"{format_usd(paid.get('balance_nano'))}, "
                                          f"total paid {format_usd(paid.get('total_paid_nano'))}"), markup=False)

    s.emit(answer, human)


@account_app.command("payments")
def account_payments(account: AccountArg, socket: SocketOpt = None,
                     json_output: JsonOpt = False) -> None:
    """List an account's payments."""
    s = session(socket, json_output)
    payments = data(s.api.get(account_path(account, "payments")))
    s.emit(payments, lambda c: render.show_list(
        c, payments, render.PAYMENT_COLUMNS, empty="No payments."))


@account_app.command("groups")
def account_groups(
    account: AccountArg,
    groups: Annotated[
        str, typer.Argument(metavar="G1,G2", help='Groups the account may use; "" clears.')
    ],
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Set the groups an account may use (replaces the list)."""
    names = split_names(groups, "G1,G2", allow_empty=True)
    s = session(socket, json_output)
    updated = s.api.put(account_path(account, "groups"), {"groups": names})
    s.emit(updated, lambda c: render.show_object(c, updated, render.ACCOUNT, "Groups set"))


@account_app.command("embeddings")
def account_embeddings(
    account: AccountArg,
    model: Annotated[str, typer.Argument(help="Embedding model id.")],
    enable: Annotated[
        bool, typer.Option("--enable/--disable", help="Allow or stop the model for this account.")
    ],
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Turn one embedding model on or off for an account."""
    s = session(socket, json_output)
    updated = s.api.put(account_path(account, "embeddings", segment(model)), {"enabled": enable})
    title = f"Embedding model {model} {'enabled' if enable else 'disabled'}"
    s.emit(updated, lambda c: render.show_object(c, updated, render.ACCOUNT, title))


# --- key --------------------------------------------------------------------------------

ModelsOpt = Annotated[
    Optional[str],
    typer.Option("--models", metavar="M1,M2", help="Only these models (comma-separated)."),
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
ExpiresOpt = Annotated[
    Optional[str],
    typer.Option("--expires", metavar="YYYY-MM-DD", parser=parse_date,
                 help="Last day the key works (end of day, account time zone)."),
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
    if allow_ip:
        body["allow_ips"] = allow_ip
    if group is not None:
        body["group"] = group
    max_concurrent_field(body, max_concurrent)
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
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Change a key. Only the settings given change; the rest stay as they are."""
    exclusive({"--spend-limit": spend_limit is not None, "--no-spend-limit": no_spend_limit})
    exclusive({"--expires": expires is not None, "--no-expiry": no_expiry})
    exclusive({"--models": models is not None, "--all-models": all_models})
    exclusive({"--allow-ip": bool(allow_ip), "--any-ip": any_ip})
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
    if allow_ip or any_ip:
        body["allow_ips"] = allow_ip or None
    if group is not None or no_group:
        body["group"] = group
    max_concurrent_field(body, max_concurrent, no_max_concurrent)
    budget_fields(body, budget, budget_period, no_budget)
    if not body:
        raise nothing_to_change()
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


# --- balance, usage, audit -------------------------------------------------------------


@app.command("balance")
def balance(account: AccountArg, socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """Show an account's balance, held amount and total paid."""
    s = session(socket, json_output)
    answer = s.api.get(account_path(account, "balance"))
    title = f"Balance of {account}"
    s.emit(answer, lambda c: render.show_object(c, answer, render.BALANCE, title))


USAGE_PAGE = 1000  # rows per admin call when exporting: memory stays flat whatever the range

USAGE_FIELDS = (
    "request_id", "created_at", "key_id", "model", "endpoint", "stream", "status", "http_status", "input_tokens",
    "output_tokens", "cached_tokens", "cache_write_tokens", "cost_nano", "duration_ms", "provider", "attempts",
)

DateOpt = Annotated[Optional[str], typer.Option(metavar="YYYY-MM-DD", parser=parse_date)]


def usage_rows(api: AdminClient, path: str, params: dict[str, Any], limit: int | None) -> Iterator[dict]:
    """Every matching row, newest first, fetched a page at a time (``next_before`` cursor)."""
    sent = 0
    before = None
    while True:
        page = {**params, "limit": USAGE_PAGE if limit is None else min(USAGE_PAGE, limit - sent)}
        if before is not None:
            page["before"] = before
        answer = api.get(path, params=page)
        for row in data(answer):
            yield row
            sent += 1
        before = answer.get("next_before")
        if before is None or (limit is not None and sent >= limit):
            return


def range_params(since: str | None, until: str | None) -> dict[str, str]:
    if since and until and since > until:
        raise typer.BadParameter(f"--since {since} is after --until {until}")
    return {k: v for k, v in (("since", since), ("until", until)) if v}


def csv_cell(value: Any) -> Any:
    """A CSV cell as the JSONL export and the console's CSV write it: booleans ``true``/``false``
    (Python's csv module would write ``True``/``False``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


@app.command("usage")
def usage(
    account: AccountArg,
    key: Annotated[Optional[str], typer.Option("--key", metavar="KEY",
                                               help="Only this key's requests.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", metavar="MODEL", help="Only this model.")] = None,
    status: Annotated[Optional[str], typer.Option("--status", metavar="STATUS",
                                                  help="Only this usage status (ok, upstream_error, ...).")] = None,
    since: DateOpt = None,
    until: DateOpt = None,
    limit: Annotated[Optional[int], typer.Option("--limit", metavar="N", min=1,
                                                 help="At most N requests, newest first (default 50; "
                                                 "with --csv/--jsonl: all in the range).")] = None,
    csv_output: Annotated[bool, typer.Option("--csv", help="Write CSV rows (with a header) as they arrive.")
                          ] = False,
    jsonl: Annotated[bool, typer.Option("--jsonl", help="Write one JSON object a line as they arrive.")] = False,
    show_breakdown: Annotated[bool, typer.Option("--breakdown", help="Show each request's charge line by line "
                                                 "(tokens by rate, tool calls, tier).")] = False,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """An account's requests: model, tokens and cost of each, newest first.

    --since and --until are days in the account's time zone, both included. --csv and
    --jsonl export any range page by page without holding it in memory. Each row carries
    what was held for it (hold_nano) and what its cost is made of (breakdown: lines of
    dimension, quantity, unit_nano and nano, adding up to cost_nano, with the tier and
    long_context). The CSV has them as hold_nano, one <dimension>_nano column per token
    dimension, tools_nano, tool_calls, tier and long_context."""
    exclusive({"--csv": csv_output, "--jsonl": jsonl, "--json": json_output, "--breakdown": show_breakdown})
    s = session(socket, json_output)
    params: dict[str, Any] = range_params(since, until)
    for name, value in (("key", key), ("model", model), ("status", status)):
        if value is not None:
            params[name] = value
    path = account_path(account, "usage")
    if csv_output or jsonl:
        out = sys.stdout
        writer = csv.writer(out, lineterminator="\n") if csv_output else None
        if writer is not None:
            writer.writerow([*USAGE_FIELDS, "cost_usd", *breakdown.CSV_COLUMNS])
        for row in usage_rows(s.api, path, params, limit):
            if writer is not None:
                writer.writerow([*(csv_cell(row.get(f)) for f in USAGE_FIELDS),
                                 format_usd(row.get("cost_nano")).lstrip("$"),
                                 *breakdown.csv_cells(row.get("hold_nano"), row.get("breakdown"))])
            else:
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
        out.flush()
        return
    rows = list(usage_rows(s.api, path, params, limit or 50))
    if show_breakdown:
        s.emit(rows, lambda c: render.show_breakdowns(c, rows, empty="No usage."))
        return
    s.emit(rows, lambda c: render.show_list(c, rows, render.USAGE_COLUMNS, empty="No usage."))


@app.command("report")
def report(
    account: Annotated[Optional[str], typer.Argument(metavar="[ACCOUNT]",
                                                     help="Account id or email; all accounts when left out.")
                       ] = None,
    since: DateOpt = None,
    until: DateOpt = None,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Requests, tokens and cost summed per model and per key over a range.

    Days are in the account's time zone (UTC for all accounts), both included."""
    s = session(socket, json_output)
    params: dict[str, Any] = range_params(since, until)
    if account:
        params["account"] = account
    answer = s.api.get("/admin/v1/report", params=params)
    if not isinstance(answer, dict):
        raise AdminError("gatewayd answered the report with something that is not an object")

    def human(c: Console) -> None:
        span = f"{since or 'the start'} to {until or 'now'}"
        who = account or "all accounts"
        render.show_list(c, answer.get("by_model") or [], render.REPORT_MODEL_COLUMNS, empty="No usage.",
                         title=f"Per model, {who}, {span}")
        render.show_list(c, answer.get("by_key") or [], render.REPORT_KEY_COLUMNS, empty="No usage.",
                         title="Per key")
        total = answer.get("total") or {}
        c.print(f"Total: {total.get('requests', 0)} requests, {total.get('input_tokens', 0)} input and "
                f"{total.get('output_tokens', 0)} output tokens, {format_usd(total.get('cost_nano'))}", markup=False)

    s.emit(answer, human)


@app.command("audit")
def audit(
    show_all: Annotated[bool, typer.Option("--all", help="List every account and key, "
                                           "not only those with problems.")] = False,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Check the money invariants; exit status 1 if any fails.

    For every account: balance == payments - charges - open holds, and the stored balance
    equals the one in memory; for every key: what it has spent equals the sum of its usage
    rows; every request has one usage row. The hold rule: no request was charged more than
    its hold x (1 + the hold tolerance), each one beyond it named; no balance below, and no
    key's spend above, what that rule allows (lowest_allowed_balance_nano,
    highest_allowed_spent_nano). Warnings (exit status 0): an account below zero or a key
    over its limit, within what the rule allows.
    """
    s = session(socket, json_output)
    report = s.api.get("/admin/v1/audit")
    if not isinstance(report, dict):
        raise AdminError("gatewayd answered the audit with something that is not an object")
    s.emit(report, lambda c: render.show_audit(c, report, show_all=show_all))
    if report.get("ok") is not True:
        raise typer.Exit(1)


@app.command("reload")
def reload(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """Re-read gatewayd's config file (as SIGHUP does). A bad file is refused with the start-up
    error line (exit 1) and the config in force stays."""
    s = session(socket, json_output)
    try:
        answer = s.api.post("/admin/v1/reload")
    except AdminError as exc:
        message = escape_control_characters(str(exc))
        typer.echo(message if message.startswith("gatewayd: ") else f"gatewayctl: {message}", err=True)
        raise typer.Exit(1) from None

    def human(c: Console) -> None:
        c.print(f"Config reloaded: {answer.get('providers')} providers, {answer.get('models')} models, "
                f"{answer.get('groups')} groups.", markup=False)
        for what in ("added", "removed", "changed"):
            if answer.get(what):
                c.print(f"  models {what}: {', '.join(answer[what])}", markup=False)
        if answer.get("restart_needed"):
            c.print(f"  not applied until a restart: {', '.join(answer['restart_needed'])}", markup=False)

    s.emit(answer, human)


@app.command("routes")
def routes(
    model: Annotated[Optional[str], typer.Option("--model", metavar="MODEL", help="Only this model's routes.")] = None,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Every model's routes with their state, recent errors (--json) and latency (the moving
    average of the time to the first byte: a stream's first event, a non-streaming answer's
    status line).

    A route that fails routing.failures_to_cool times in a row is "cooling" for
    routing.cooldown_s (after a 429 or 5xx with Retry-After: that long, up to max_cooldown_s);
    then it is "ready_to_probe" and the next request tries it ("probing"): success makes it
    "healthy", failure cools it again for twice as long. Health is what this gatewayd process
    has seen since it started: with several instances or workers, the one that answered."""
    s = session(socket, json_output)
    rows = data(s.api.get("/admin/v1/routes"))
    if model is not None:
        rows = [r for r in rows if r.get("model") == model]
    s.emit(rows, lambda c: render.show_list(c, rows, render.ROUTE_COLUMNS, empty="No routes."))


from gatewayctl import prices as _prices  # noqa: E402,F401  registers `gatewayctl prices` on the app
from gatewayctl import codes as _codes  # noqa: E402,F401  registers `gatewayctl codes` on the app


def main() -> None:
    app(prog_name="gatewayctl")
