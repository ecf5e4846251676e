"""``gatewayctl admin-token``, ``audit-log`` and ``operator``: the operators themselves.

``admin-token create NAME --scope read|write|money|keys|admin ... [--expires DATE]
[--allow-ip CIDR]...`` prints a new admin token (``gwa-...``) once: the daemon keeps its hash
only. ``admin-token list`` shows every token (never a secret), ``admin-token revoke ID``
withdraws one at once, on every instance. ``audit-log`` pages through every admin call
(who, what, when, from where, before and after). ``operator password`` sets the password
that signs in to the operator console at ``/admin/``.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from gatewayctl import render
from gatewayctl.client import segment
from gatewayctl.common import (
    JsonOpt, SocketOpt, app, data, parse_date, parse_ip_network, parse_name, read_password, session,
)
from gatewayctl.render import Field

SCOPES = ("read", "write", "money", "keys", "admin")

token_app = typer.Typer(no_args_is_help=True)
app.add_typer(token_app, name="admin-token")
operator_app = typer.Typer(no_args_is_help=True)
app.add_typer(operator_app, name="operator")

TOKEN = (Field("id", "id"), Field("name", "name"), Field("scopes", "scopes"), Field("state", "state"),
         Field("expires_at", "expires", render.text("never")), Field("allow_ips", "allowed from", render.text("any")),
         Field("created_at", "created"), Field("created_by", "created by"),
         Field("last_used_at", "last used", render.text("never")))
TOKEN_LIST = (Field("id", "id"), Field("name", "name"), Field("scopes", "scopes"), Field("state", "state"),
              Field("hint", "ends in"), Field("expires_at", "expires", render.text("never")),
              Field("last_used_at", "last used", render.text("never")))
AUDIT = (Field("id", "#"), Field("at", "when"), Field("actor_name", "who"), Field("via", "via"),
         Field("address", "from", render.text("-")), Field("method", "method"), Field("path", "path"),
         Field("status", "status"), Field("target", "target", render.text("-")))


def parse_scope(value: str) -> str:
    if value not in SCOPES:
        raise typer.BadParameter(f"{value!r} is not a scope ({', '.join(SCOPES)})")
    return value


@token_app.callback()
def _token_group(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """Admin tokens for the admin API over HTTP (and gatewayctl --url): create, list, revoke."""


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(metavar="NAME", help="What the token is for (e.g. ci, billing).",
                                        parser=parse_name)],
    scope: Annotated[list[str], typer.Option(
        "--scope", metavar="SCOPE", parser=parse_scope,
        help="read (every GET), write (accounts, groups, prices, reload), keys (any account's API keys), "
             "money (payments, adjustments, codes), admin (tokens, operator password, and all the rest). "
             "Repeat for several.")],
    expires: Annotated[Optional[str], typer.Option(
        "--expires", metavar="YYYY-MM-DD", parser=parse_date,
        help="Last day the token works (through the end of that day, UTC).")] = None,
    allow_ip: Annotated[Optional[list[str]], typer.Option(
        "--allow-ip", metavar="CIDR", parser=parse_ip_network,
        help="Only from this address or network; repeat for several (default: any).")] = None,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Create an admin token and print it, this once: only its hash is kept."""
    s = session(socket, json_output)
    body: dict[str, Any] = {"name": name, "scopes": list(dict.fromkeys(scope))}
    if expires is not None:
        body["expires_at"] = expires
    if allow_ip:
        body["allow_ips"] = allow_ip
    made = s.api.post("/admin/v1/admin-tokens", body)

    def human(c: Console) -> None:
        render.show_object(c, _shown(made), TOKEN, "Admin token created", extras=False)
        c.print(Panel("[bold]This token is shown once.[/] Store it now: gatewayd keeps only a hash and cannot "
                      "show it again. Send it as Authorization: Bearer, or GATEWAYCTL_TOKEN for gatewayctl --url.",
                      title="new admin token", title_align="left", border_style="yellow", expand=False))
        c.print(escape(str(made.get("token", ""))), style="bold", soft_wrap=True, crop=False)

    s.emit(made, human)


@token_app.command("list")
def token_list(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """List admin tokens: name, scopes, state (active, revoked, expired), last use. Never a secret."""
    s = session(socket, json_output)
    listed = data(s.api.get("/admin/v1/admin-tokens"))
    s.emit(listed, lambda c: render.show_list(c, [_shown(t) for t in listed], TOKEN_LIST, empty="No admin tokens."))


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(metavar="TOKEN_ID", help="The token's id (adm_..., admin-token list).")],
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Revoke an admin token: refused from its next call on, by every instance."""
    s = session(socket, json_output)
    revoked = s.api.post(f"/admin/v1/admin-tokens/{segment(token_id)}/revoke", {})
    s.emit(revoked, lambda c: render.show_object(c, _shown(revoked), TOKEN, "Admin token revoked", extras=False))


def _shown(token: dict[str, Any]) -> dict[str, Any]:
    return {**token, "scopes": ", ".join(token.get("scopes") or []),
            "allow_ips": ", ".join(token["allow_ips"]) if token.get("allow_ips") else None}


@app.command("audit-log")
def audit_log(
    actor: Annotated[Optional[str], typer.Option("--actor", metavar="ID",
                                                 help="Only this caller: a token id, socket or operator.")] = None,
    target: Annotated[Optional[str], typer.Option(
        "--target", metavar="KIND:ID", help="Only calls on this: account:ID, key:ID, prices:MODEL, code:ID, ...")] = None,
    changes: Annotated[bool, typer.Option("--changes", help="Only changes (leave out reads).")] = False,
    since: Annotated[Optional[str], typer.Option("--since", metavar="YYYY-MM-DD", parser=parse_date,
                                                 help="From this day (UTC).")] = None,
    until: Annotated[Optional[str], typer.Option("--until", metavar="YYYY-MM-DD", parser=parse_date,
                                                 help="Through this day (UTC).")] = None,
    limit: Annotated[int, typer.Option("--limit", metavar="N", min=1, max=1000, help="Entries to show.")] = 50,
    before: Annotated[Optional[int], typer.Option("--before", metavar="ID", min=1,
                                                  help="Page on: entries older than this #.")] = None,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Every admin call, newest first: who (token or socket), when, from where, what, and for a
    change the target's state before and after (shown with --json)."""
    s = session(socket, json_output)
    params = {"actor": actor, "target": target, "changes": "true" if changes else None, "since": since,
              "until": until, "limit": limit, "before": before}
    page = s.api.get("/admin/v1/audit-log", params={k: v for k, v in params.items() if v is not None})
    rows = data(page)

    def human(c: Console) -> None:
        render.show_list(c, rows, AUDIT, empty="No admin calls recorded.")
        if page.get("next_before"):
            c.print(f"Older entries: gatewayctl audit-log --before {page['next_before']}", markup=False)

    s.emit(rows, human)


@operator_app.callback()
def _operator_group(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """The operator's console sign-in (/admin/)."""


@operator_app.command("password")
def operator_password(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """Set the operator console's password (at least 12 characters): read from stdin, or prompted
    twice (hidden) on a terminal. Signing in with it gives every scope."""
    s = session(socket, json_output)
    done = s.api.put("/admin/v1/operator/password", {"password": read_password("stdin")})
    s.emit(done, lambda c: c.print("Operator password set: sign in at /admin/ on any instance.", markup=False))
