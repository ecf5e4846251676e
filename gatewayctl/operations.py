"""``gatewayctl audit``, ``reload`` and ``routes``: the daemon's own state."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.console import Console

from gatewayctl import render
from gatewayctl.client import AdminError
from gatewayctl.common import app, data, JsonOpt, session, SocketOpt
from gatewayd.control_chars import escape_control_characters


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
