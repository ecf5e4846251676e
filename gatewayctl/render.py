"""Tables for people. (Scripts use ``--json``, which never comes through here.)

Each kind of admin object has one list of :class:`Field` saying which of its JSON
fields to show, under what title, and how: money (``*_nano``) always goes through
:func:`gatewayd.money.format_usd`, and a null gets the word it means for that field
("none" for a spend limit, "all" for a model list, "any" for an IP list).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gatewayd.billing import breakdown
from gatewayd.control_chars import escape_control_characters
from gatewayd.money import format_usd


def usd(value: Any) -> str:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return format_usd(value)
    return str(value)  # not the contract's integer; show it rather than guess


def text(none: str = "-") -> Callable[[Any], str]:
    def fmt(value: Any) -> str:
        if value is None:
            return none
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, list | tuple):
            return ", ".join(str(item) for item in value) if value else "(none)"
        return str(value)

    return fmt


def cap(value: Any) -> str:
    """A ``max_concurrent``: null is the server's default, 0 no cap."""
    if value is None:
        return "server default"
    return "no cap" if value == 0 else str(value)


def usd_or(none: str) -> Callable[[Any], str]:
    return lambda value: none if value is None else usd(value)


def problems(value: Any) -> str:
    return "; ".join(str(p) for p in value) if value else ""


@attrs.frozen
class Field:
    key: str
    title: str
    fmt: Callable[[Any], str] = text()


ACCOUNT = (
    Field("id", "id"),
    Field("email", "email"),
    Field("name", "name"),
    Field("timezone", "timezone"),
    Field("balance_nano", "balance", usd),
    Field("held_nano", "held", usd),
    Field("total_paid_nano", "total paid", usd),
    Field("groups", "groups"),
    Field("embedding_models", "embedding models"),
    Field("max_concurrent", "max concurrent", cap),
    Field("alert_below_nano", "alert below", usd_or("none")),
    Field("created_at", "created"),
)
ACCOUNT_COLUMNS = tuple(f for f in ACCOUNT if f.key not in ("embedding_models", "max_concurrent", "alert_below_nano",
                                                            "created_at"))

KEY = (
    Field("id", "id"),
    Field("account_id", "account"),
    Field("name", "name"),
    Field("state", "state"),
    Field("spend_limit_nano", "spend limit", usd_or("none")),
    Field("spent_nano", "spent", usd),
    Field("expires_on", "expires", text("never")),
    Field("models", "models", text("all")),
    Field("mcp", "MCP tools", text("all")),
    Field("allow_ips", "allowed IPs", text("any")),
    Field("group", "group"),
    Field("max_concurrent", "max concurrent", cap),
    Field("budget_nano", "budget", usd_or("none")),
    Field("budget_period", "budget period", text("-")),
    Field("budget_period_spent_nano", "spent this period", usd_or("-")),
    Field("budget_left_nano", "budget left", usd_or("-")),
    Field("created_at", "created"),
    Field("last_used_at", "last used", text("never")),
)
KEY_COLUMNS = tuple(f for f in KEY if f.key not in ("account_id", "max_concurrent", "created_at", "budget_period", "mcp",
                                                    "budget_period_spent_nano"))

PAYMENT = (
    Field("id", "id"),
    Field("account_id", "account"),
    Field("amount_nano", "amount", usd),
    Field("source", "source"),
    Field("reference", "reference", text("-")),
    Field("note", "note"),
    Field("created_at", "created"),
)
PAYMENT_COLUMNS = tuple(f for f in PAYMENT if f.key != "account_id")

BALANCE = (
    Field("balance_nano", "balance", usd),
    Field("held_nano", "held", usd),
    Field("total_paid_nano", "total paid", usd),
)

USAGE_COLUMNS = (
    Field("created_at", "time"),
    Field("request_id", "request"),
    Field("key_id", "key"),
    Field("model", "model"),
    Field("endpoint", "endpoint"),
    Field("stream", "stream"),
    Field("status", "status"),
    Field("provider", "provider"),
    Field("attempts", "tries"),
    Field("input_tokens", "in"),
    Field("output_tokens", "out"),
    Field("cached_tokens", "cached"),
    Field("cache_write_tokens", "cache wr"),
    Field("cost_nano", "cost", usd),
    Field("hold_nano", "held", usd),
    Field("breakdown", "billed besides tokens", breakdown.summary),
)

_SUM_COLUMNS = (
    Field("requests", "requests"),
    Field("input_tokens", "in"),
    Field("output_tokens", "out"),
    Field("cached_tokens", "cached"),
    Field("cache_write_tokens", "cache wr"),
    Field("cost_nano", "cost", usd),
)
REPORT_MODEL_COLUMNS = (Field("model", "model"), *_SUM_COLUMNS)
REPORT_KEY_COLUMNS = (Field("key_id", "key"), Field("account_id", "account"), *_SUM_COLUMNS)

ROUTE_COLUMNS = (
    Field("model", "model"),
    Field("route", "route"),
    Field("protocol", "protocol"),
    Field("priority", "prio"),
    Field("weight", "weight"),
    Field("state", "state"),
    Field("cooling_for_s", "cooling s"),
    Field("requests", "requests"),
    Field("failures", "failures"),
    Field("latency_ms", "latency ms", text()),
    Field("last_error", "last error", text()),
)

AUDIT_ACCOUNT_COLUMNS = (
    Field("account_id", "account"),
    Field("email", "email"),
    Field("balance_nano", "balance", usd),
    Field("expected_balance_nano", "expected", usd),
    Field("lowest_allowed_balance_nano", "lowest allowed", usd),
    Field("held_nano", "held", usd),
    Field("open_holds_nano", "open holds", usd),
    Field("ok", "ok"),
    Field("problems", "problems", problems),
    Field("warnings", "warnings", problems),
)
AUDIT_KEY_COLUMNS = (
    Field("key_id", "key"),
    Field("spent_nano", "spent", usd),
    Field("spend_limit_nano", "spend limit", usd_or("none")),
    Field("highest_allowed_spent_nano", "highest allowed", usd_or("-")),
    Field("ok", "ok"),
    Field("problems", "problems", problems),
    Field("warnings", "warnings", problems),
)

_NUMERIC = {"input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens", "attempts", "priority",
            "weight", "cooling_for_s", "requests", "failures", "latency_ms"}
_STATE_STYLE = {
    "enabled": "green",
    "disabled": "yellow",
    "expired": "red",
    "used_up": "red",
    "deleted": "dim",
    "healthy": "green",
    "ready_to_probe": "yellow",
    "probing": "yellow",
    "cooling": "red",
}


def _cell(field: Field, obj: dict[str, Any]) -> Text:
    value = obj.get(field.key)
    style = _STATE_STYLE.get(str(value), "") if field.key == "state" else ""
    if field.key == "ok" and value is False:
        style = "bold red"
    # names come from the database: a terminal escape stored in one prints as its escape
    return Text(escape_control_characters(field.fmt(value)), style=style)


def _plain(title: str | None) -> Text | None:
    """Titles carry names from the database: never let rich read them as markup."""
    return None if title is None else Text(escape_control_characters(title), style="bold")


def _extra_fields(obj: dict[str, Any], known: Sequence[Field]) -> list[Field]:
    """Fields the server sent beyond the contract, so a newer daemon's additions still show.

    ``*_usd`` strings are skipped: they repeat a ``*_nano`` field already shown.
    """
    shown = {f.key for f in known}
    extra = []
    for key in obj:
        if key in shown or key == "secret" or key.endswith("_usd"):
            continue
        if key.endswith("_nano"):
            extra.append(Field(key, key.removesuffix("_nano"), usd))
        else:
            extra.append(Field(key, key))
    return extra


def show_object(
    console: Console,
    obj: dict[str, Any],
    fields: Sequence[Field],
    title: str | None = None,
    *,
    extras: bool = True,
) -> None:
    """One object as a two-column field/value table."""
    table = Table(box=box.SIMPLE, show_header=False, title=_plain(title), title_justify="left")
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for field in [*fields, *(_extra_fields(obj, fields) if extras else ())]:
        table.add_row(field.title, _cell(field, obj))
    console.print(table)


def show_list(
    console: Console,
    rows: Sequence[dict[str, Any]],
    columns: Sequence[Field],
    *,
    empty: str,
    title: str | None = None,
) -> None:
    """A list of objects as one row each, or a sentence when there are none.

    A cell is never folded or cut: a dollar amount split over two lines reads as a
    different amount. So a table too wide for the terminal is shown instead as one
    field/value block per row (like psql's expanded display). Into a pipe or file
    the table is printed at its full width, one line per row, for grep and less -S.
    """
    if not rows:
        console.print(empty)
        return
    table = Table(box=box.SIMPLE_HEAD, title=_plain(title), title_justify="left")
    for field in columns:
        numeric = field.key.endswith("_nano") or field.key in _NUMERIC
        table.add_column(field.title, justify="right" if numeric else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(_cell(field, row) for field in columns))
    needed = console.measure(table, options=console.options.update_width(100_000)).maximum
    if not console.is_terminal:
        width = console.width
        console.width = max(needed, width)
        try:
            console.print(table)
        finally:
            console.width = width
    elif needed <= console.width:
        console.print(table)
    else:
        for n, row in enumerate(rows, 1):
            heading = f"{title} {n}/{len(rows)}" if title else f"{n}/{len(rows)}"
            show_object(console, row, columns, heading, extras=False)


def show_secret(console: Console, secret: str) -> None:
    """The key's secret on a line of its own (never folded, so it copies whole) and the warning."""
    console.print(
        Panel(
            "[bold]This secret is shown once.[/] Store it now: gatewayd keeps only a hash "
            "and cannot show it again.",
            title="new key secret",
            title_align="left",
            border_style="yellow",
            expand=False,
        )
    )
    console.print(escape(secret), style="bold", soft_wrap=True, crop=False)


def show_audit(console: Console, report: dict[str, Any], *, show_all: bool) -> None:
    """Rows with problems or warnings (every row with ``show_all``), the ledger-wide
    problems, then a one-line verdict."""
    accounts = report.get("accounts") or []
    keys = report.get("keys") or []
    general = report.get("problems") or []
    bad_accounts = [a for a in accounts if not a.get("ok", False)]
    bad_keys = [k for k in keys if not k.get("ok", False)]
    warned = [r for r in (*accounts, *keys) if r.get("warnings")]
    for rows, columns, what in ((accounts, AUDIT_ACCOUNT_COLUMNS, "accounts"), (keys, AUDIT_KEY_COLUMNS, "keys")):
        listed = rows if show_all else [r for r in rows if not r.get("ok", False) or r.get("warnings")]
        if listed:
            show_list(console, listed, columns, empty="", title=what)
    for line in general:
        console.print(f"[bold red]problem[/]: {escape(escape_control_characters(str(line)))}")
    checked = f"{_count(len(accounts), 'account')} and {_count(len(keys), 'key')} checked"
    if report.get("ok"):
        note = f" {_count(len(warned), 'warning')} (listed above)." if warned else ""
        console.print(f"[bold green]audit ok[/]: {checked}, balances and spend limits hold.{note}")
    else:
        console.print(
            f"[bold red]audit FAILED[/]: {checked}; problems with "
            f"{_count(len(bad_accounts), 'account')} and {_count(len(bad_keys), 'key')}"
            + (f", and {_count(len(general), 'ledger-wide problem')}." if general else ".")
        )


def show_breakdowns(console: Console, rows: Sequence[dict[str, Any]], *, empty: str) -> None:
    """``usage --breakdown``: each row's charge, line by line (the lines add up to the cost)."""
    if not rows:
        console.print(empty)
        return
    for row in rows:
        head = Text(f"{row.get('created_at', '')}  {row.get('request_id', '')}  {row.get('model', '')}  "
                    f"cost {usd(row.get('cost_nano'))}  held {usd(row.get('hold_nano'))}", style="bold")
        console.print(head)
        described = breakdown.describe(row.get("breakdown"))
        if row.get("breakdown") is None:
            described = ["(no breakdown recorded: settled before gatewayd kept one)"]
        for line in described or ["(nothing billed)"]:
            console.print(Text(f"    {escape_control_characters(str(line))}"))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
