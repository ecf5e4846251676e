"""``gatewayctl balance``, ``usage`` and ``report``: what an account has and what it spent."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from gatewayctl import render, usage_table
from gatewayctl.client import AdminClient, AdminError
from gatewayctl.common import account_path, AccountArg, app, data, exclusive, JsonOpt, parse_date, session, SocketOpt
from gatewayd.billing import breakdown
from gatewayd.money import format_usd


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
    key: Annotated[Optional[str], typer.Option("--key", metavar="NAME|ID",
                                               help="Only this key's requests (its name or id).")] = None,
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

    The table fits 100 columns (time, key name, model, status, tokens, cost); --json, --csv
    and --jsonl give every field, --breakdown each request's charge line by line.

    --since and --until are days in the account's time zone, both included. --csv and
    --jsonl export any range page by page without holding it in memory. Each row carries
    what was held for it (hold_nano) and what its cost is made of (breakdown: lines of
    dimension, quantity, unit_nano and nano, adding up to cost_nano, with the tier and
    long_context). The CSV has them as hold_nano, one <dimension>_nano column per token
    dimension, tools_nano, tool_calls, tier and long_context."""
    exclusive({"--csv": csv_output, "--jsonl": jsonl, "--json": json_output, "--breakdown": show_breakdown})
    s = session(socket, json_output)
    params: dict[str, Any] = range_params(since, until)
    for name, value in (("model", model), ("status", status)):
        if value is not None:
            params[name] = value
    path = account_path(account, "usage")
    names: dict[str, str] = {}
    if key is not None or not (csv_output or jsonl or json_output or show_breakdown):
        names = key_names(s.api, account)
    if key is not None:
        params["key"] = key_id(key, names, account)
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
    s.emit(rows, lambda c: usage_table.show_usage(c, rows, names, limit=limit or 50))


def key_names(api: AdminClient, account: str) -> dict[str, str]:
    """The account's keys, id -> name (revoked ones too: their rows stay in the usage log)."""
    return {k["id"]: str(k.get("name", k["id"])) for k in data(api.get(account_path(account, "keys")))}


def key_id(given: str, names: dict[str, str], account: str) -> str:
    """``--key``: a key id of the account, or the name of exactly one of its keys."""
    if given in names:
        return given
    matching = [kid for kid, name in names.items() if name == given]
    if len(matching) == 1:
        return matching[0]
    if matching:
        raise AdminError(f"{len(matching)} keys of {account} are named {given!r}: give one of their ids "
                         f"({', '.join(sorted(matching))})")
    return given  # not a name of this account's: the daemon says whether the id exists


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
