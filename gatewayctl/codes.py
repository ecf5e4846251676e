"""``gatewayctl codes``: redemption codes, prepaid amounts account holders redeem in the console.

``codes create --amount USD --count N [--expires DATE] [--note T]`` prints the new codes once
(the daemon keeps only their hashes: a lost code is revoked and made anew). ``codes list``
shows every code's status: unused, redeemed (by whom, when), revoked or expired.
``codes revoke CODE_ID`` withdraws an unused code.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from gatewayctl import render
from gatewayctl.client import segment
from gatewayctl.common import JsonOpt, SocketOpt, app, data, parse_date, parse_payment, session
from gatewayctl.render import Field
from gatewayd.control_chars import escape_control_characters

codes_app = typer.Typer(no_args_is_help=True)
app.add_typer(codes_app, name="codes")

CREATED_COLUMNS = (Field("id", "id"), Field("code", "code"), Field("amount_nano", "amount", render.usd),
                   Field("expires_at", "expires", render.text("never")), Field("note", "note"))
LIST_COLUMNS = (Field("id", "id"), Field("hint", "ends in"), Field("amount_nano", "amount", render.usd),
                Field("state", "status"), Field("expires_at", "expires", render.text("never")),
                Field("note", "note"), Field("created_at", "created"))
CODE = (Field("id", "id"), Field("amount_nano", "amount", render.usd), Field("state", "status"),
        Field("expires_at", "expires", render.text("never")), Field("note", "note"))


def state(code: dict[str, Any]) -> str:
    """The status as a person reads it: who redeemed the code and when, or when it was revoked."""
    status = code.get("status")
    if status == "redeemed":
        return f"redeemed by {code.get('redeemed_by_email') or code.get('redeemed_by')} at {code.get('redeemed_at')}"
    if status == "revoked":
        return f"revoked at {code.get('revoked_at')}"
    return str(status)


@codes_app.callback()
def _codes_group(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """Redemption codes: create (printed once), list, revoke."""


@codes_app.command("create")
def codes_create(
    amount: Annotated[int, typer.Option("--amount", metavar="USD", help="What each code credits, in US dollars.",
                                        parser=parse_payment)],
    count: Annotated[int, typer.Option("--count", metavar="N", min=1, max=1000, help="How many codes.")] = 1,
    expires: Annotated[Optional[str], typer.Option(
        "--expires", metavar="YYYY-MM-DD", parser=parse_date,
        help="Last day the codes can be redeemed (through the end of that day, UTC).")] = None,
    note: Annotated[Optional[str], typer.Option("--note", metavar="TEXT",
                                                help="Kept with each code and its payments.")] = None,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Create redemption codes and print them, this once: only their hashes are kept."""
    s = session(socket, json_output)
    body: dict[str, Any] = {"amount_nano": amount, "count": count}
    if expires is not None:
        body["expires_at"] = expires
    if note is not None:
        body["note"] = note
    made = data(s.api.post("/admin/v1/codes", body))

    def human(c: Console) -> None:
        render.show_list(c, made, CREATED_COLUMNS, empty="No codes.", title=f"{len(made)} new codes")
        c.print("Copy them now: gatewayd keeps only their hashes and cannot show them again.", markup=False)

    s.emit(made, human)


@codes_app.command("list")
def codes_list(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """List every code: amount, status (unused, redeemed by whom and when, revoked, expired), note."""
    s = session(socket, json_output)
    listed = data(s.api.get("/admin/v1/codes"))
    rows = [{**code, "state": escape_control_characters(state(code))} for code in listed]
    s.emit(listed, lambda c: render.show_list(c, rows, LIST_COLUMNS, empty="No codes."))


@codes_app.command("revoke")
def codes_revoke(
    code_id: Annotated[str, typer.Argument(metavar="CODE_ID", help="The code's id (codes list).")],
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Withdraw an unused code: it can no longer be redeemed."""
    s = session(socket, json_output)
    code = s.api.post(f"/admin/v1/codes/{segment(code_id)}/revoke", {})
    s.emit(code, lambda c: render.show_object(c, {**code, "state": state(code)}, CODE, "Code revoked",
                                              extras=False))
