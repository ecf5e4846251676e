"""What every ``gatewayctl`` command shares: argument parsers, the ``--socket``/``--json``
options accepted before or after the command, the admin session, and the root application
the command modules (``accounts``, ``keys``, ``usage``, ``operations``, ``prices``) register on.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import re
import sys
import zoneinfo
from collections.abc import Callable
from urllib.parse import urlsplit
from typing import Annotated, Any, Optional

import attrs
import typer
from typer.core import TyperGroup
from rich.console import Console

from gatewayctl.client import AdminClient, AdminError, resolve_socket, segment
from gatewayd.control_chars import escape_control_characters
from gatewayd.money import MoneyError, usd_to_nano


# --- Parsing the command line ------------------------------------------------------------
# Each parser turns one argument into what the API wants, or raises BadParameter
# (exit 2, "Invalid value for '--option': <why>").


def help_type(label: str) -> Callable[[Callable[[str], Any]], Callable[[str], Any]]:
    """Marks a parser with what ``--help`` shows as an argument's type (``AMOUNT_USD <decimal>``):
    typer would show the type the parser returns (nano-dollars: ``<int>``), which is not what
    the operator types."""

    def mark(parser: Callable[[str], Any]) -> Callable[[str], Any]:
        parser.help_type = label  # type: ignore[attr-defined]
        return parser

    return mark


@help_type("decimal")
def parse_usd(value: str) -> int:
    """A dollar amount of zero or more, as exact nano-dollars."""
    try:
        nano = usd_to_nano(value)
    except MoneyError as exc:
        raise typer.BadParameter(f"{exc} (give US dollars, e.g. 10.50)") from None
    if nano < 0:
        raise typer.BadParameter(f"{value!r} is negative")
    return nano


@help_type("decimal")
def parse_payment(value: str) -> int:
    """A dollar amount above zero: a payment of nothing is a typo."""
    nano = parse_usd(value)
    if nano == 0:
        raise typer.BadParameter(f"{value!r}: a payment must be more than zero")
    return nano


@help_type("YYYY-MM-DD")
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


def force_option(what: str) -> Any:
    """``--force``: do what the daemon refuses by default as a likely mistake (``what``)."""
    return typer.Option("--force", help=f"{what} (refused without it, as a likely mistake).")


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


@attrs.frozen
class Remote:
    """``--url`` / ``--token`` / ``--cacert`` (or GATEWAYCTL_URL, GATEWAYCTL_TOKEN, GATEWAYCTL_CACERT):
    the admin API of a gateway elsewhere, over HTTPS with an admin token."""

    url: str | None = None
    token: str | None = None
    cacert: str | None = None


_remote = Remote()  # set by the root callback, which runs first on every invocation


def check_url(value: str) -> str:
    """An https:// base address; plain http only to this host (a token must not cross a network
    in clear)."""
    parsed = urlsplit(value)
    if parsed.scheme not in ("https", "http") or not parsed.hostname:
        raise typer.BadParameter(f"{value!r} is not an https:// address (e.g. https://gateway.example.com:8443)",
                                 param_hint="--url")
    if parsed.path not in ("", "/") or parsed.query:
        raise typer.BadParameter("give the gateway's base address only, no path (gatewayctl adds /admin/v1/...)",
                                 param_hint="--url")
    if parsed.scheme == "http" and parsed.hostname not in ("localhost", "127.0.0.1", "::1"):
        raise typer.BadParameter("plain http:// is only for this host: an admin token must not cross a network "
                                 "in clear; use https://", param_hint="--url")
    return value


def session(socket: str | None, as_json: bool) -> Session:
    """The admin client: the remote gateway when ``--url`` was given, else the local socket."""
    remote = _remote
    if remote.url is None:
        return Session(api=AdminClient(resolve_socket(socket)), as_json=as_json)
    if socket is not None:
        raise typer.BadParameter("give --url (a remote gateway) or --socket (this host's), not both",
                                 param_hint="--socket")
    if not remote.token:
        raise typer.BadParameter("a remote gateway needs an admin token: --token gwa-... or GATEWAYCTL_TOKEN",
                                 param_hint="--token")
    if not remote.token.startswith("gwa-"):
        raise typer.BadParameter("an admin token starts with gwa- (gatewayctl admin-token create); an API key "
                                 "(sk-) cannot operate the gateway", param_hint="--token")
    return Session(api=AdminClient(url=remote.url, token=remote.token, cacert=remote.cacert), as_json=as_json)


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


def _show_types_as_typed(command: Any) -> None:
    """``--help`` as the operator types: a flag (``--json``, ``--force``, ``--help``) shows no
    value, where typer shows ``<bool>`` as if it took one; an argument whose parser is marked
    with ``help_type`` shows that (``AMOUNT_USD <decimal>``), not the parsed type. Applied to
    the whole command tree once, on its first run."""
    # the help option is made on first use and kept: made here, it is fixed with the rest
    for param in [*command.params, command.get_help_option(TyperGroup.context_class(command))]:
        if param is None:
            continue
        if getattr(param, "is_flag", False) and not getattr(param, "count", False):
            param.metavar = ""  # typer shows an option's metavar, if any, in place of its type
            continue
        parser = getattr(getattr(getattr(param, "type_descriptor", None), "parameter_info", None), "parser", None)
        label = getattr(parser, "help_type", None)
        if label is not None and param.param_type_name == "argument":
            param.display_type_rich = lambda ctx, shown=f"<{label}>": shown
    for sub in getattr(command, "commands", {}).values():
        _show_types_as_typed(sub)


class _Group(TyperGroup):
    """Root group: turns an AdminError from any command into one line on stderr and exit 1, and
    shows flags and typed arguments in ``--help`` as they are typed (``_show_types_as_typed``)."""

    _types_shown = False

    def main(self, *args: Any, **kwargs: Any) -> Any:
        # here, not in __init__: typer adds the root's completion options after building the group
        if not self._types_shown:
            _show_types_as_typed(self)
            self._types_shown = True
        return super().main(*args, **kwargs)

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


def _print_version(value: bool) -> None:
    if value:
        from gatewayd.version import version

        typer.echo(f"gatewayctl {version()}")
        raise typer.Exit(0)


VersionOpt = Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print gatewayctl's version and exit.")]


@app.callback()
def _root(
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
    url: Annotated[Optional[str], typer.Option(
        "--url", envvar="GATEWAYCTL_URL", metavar="https://HOST:PORT", parser=check_url, show_default=False,
        help="Operate a remote gateway over HTTPS (its admin API) instead of this host's admin socket.")] = None,
    token: Annotated[Optional[str], typer.Option(
        "--token", envvar="GATEWAYCTL_TOKEN", metavar="gwa-...", show_default=False,
        help="The admin token for --url (better in GATEWAYCTL_TOKEN: a command line is visible to others).")] = None,
    cacert: Annotated[Optional[str], typer.Option(
        "--cacert", envvar="GATEWAYCTL_CACERT", metavar="FILE", show_default=False,
        help="PEM CA certificate(s) to verify the remote gateway with (a private CA); default: the system's.")] = None,
    version: VersionOpt = False,
) -> None:
    """Operate a running gatewayd over its admin socket, or a remote one with --url and an admin
    token: accounts, payments, keys, usage.

    --socket and --json may come before the command or after it; --url, --token and
    --cacert before it.
    """
    global _remote
    _remote = Remote(url, token, cacert)
