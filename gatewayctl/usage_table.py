"""``gatewayctl usage``'s table: one line per request that fits 100 columns.

The generic list (``render.show_list``) prints every field of a usage row, some 200
columns, and on a terminal narrower than that falls back to a block of fields per row: 50
requests became ~850 lines. Here the row keeps what an operator scans for (when, which key
by name, model, status, tokens, cost); the rest is in ``--json``, ``--csv``, ``--jsonl`` and
``--breakdown``. Numbers are never cut: the text columns (key, model, status) give way,
ending in an ellipsis, so the whole line fits ``WIDTH`` (or a narrower terminal, as far as the
numbers allow).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gatewayd.billing import breakdown
from gatewayd.control_chars import escape_control_characters
from gatewayd.money import format_usd

WIDTH = 100  # the widest the table gets, whatever the terminal (into a pipe too)
GAP = 2  # spaces between columns
EXTRA = "*"  # marks a cost with more in it than plain tokens: tools, a tier, long context


def _when(created_at: Any) -> str:
    """``2026-11-04T10:00:00.000Z`` -> ``11-04 10:00:00`` (UTC; the footer gives the years)."""
    text = str(created_at or "")
    return f"{text[5:10]} {text[11:19]}" if len(text) >= 19 else text


def _tokens(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "-"


def _cost(row: dict[str, Any]) -> str:
    extra = breakdown.summary(row.get("breakdown")) not in ("", "-")
    value = row.get("cost_nano")
    shown = format_usd(value) if isinstance(value, int) and not isinstance(value, bool) else str(value)
    return shown + (EXTRA if extra else "")


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def cells(row: dict[str, Any], key_names: dict[str, str]) -> dict[str, str]:
    key_id = str(row.get("key_id") or "-")
    return {
        "time (UTC)": _when(row.get("created_at")),
        "key": key_names.get(key_id, key_id),
        "model": str(row.get("model") or "-"),
        "status": str(row.get("status") or "-"),
        "in": _tokens(row.get("input_tokens")),
        "out": _tokens(row.get("output_tokens")),
        "cached": _tokens(row.get("cached_tokens")),
        "cost": _cost(row),
    }


TEXT_COLUMNS = ("key", "model", "status")  # these give way, in this order of priority to keep
NUMERIC = ("in", "out", "cached", "cost")
MIN_TEXT = {"key": 6, "model": 10, "status": 6}


def _line(widths: dict[str, int]) -> int:
    """The printed line's length: each column, its right padding, the box's divider between."""
    return sum(widths.values()) + (GAP - 1) * len(widths) + (len(widths) - 1)


def _widths(table_rows: Sequence[dict[str, str]], width: int) -> dict[str, int]:
    """Each column's width: the fixed ones as they are, the text ones shrunk, widest first,
    until the line fits ``width``."""
    columns = list(table_rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in table_rows)) for c in columns}
    excess = _line(widths) - width
    while excess > 0:
        shrinkable = [c for c in TEXT_COLUMNS if widths[c] > MIN_TEXT[c]]
        if not shrinkable:
            break  # numbers alone wider than WIDTH: shown whole (never a cut amount)
        widest = max(shrinkable, key=lambda c: widths[c])
        widths[widest] -= 1
        excess -= 1
    return widths


def show_usage(console: Console, rows: Sequence[dict[str, Any]], key_names: dict[str, str], *,
               limit: int) -> None:
    if not rows:
        console.print("No usage.")
        return
    table_rows = [cells(row, key_names) for row in rows]
    # a terminal narrower than WIDTH: narrower still (into a pipe: WIDTH, whatever COLUMNS says)
    widths = _widths(table_rows, min(WIDTH, console.width) if console.is_terminal else WIDTH)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, GAP - 1, 0, 0))
    for column, width in widths.items():
        table.add_column(column, justify="right" if column in NUMERIC else "left", no_wrap=True, width=width)
    for cell in table_rows:
        # names come from the database: a terminal escape stored in one prints as its escape
        table.add_row(*(Text(escape_control_characters(_fit(cell[c], widths[c]))) for c in widths))
    saved = console.width
    console.width = _line(widths)  # the table's own width: rich neither folds nor stretches it
    try:
        console.print(table)
    finally:
        console.width = saved
    first, last = str(rows[-1].get("created_at", ""))[:10], str(rows[0].get("created_at", ""))[:10]
    total = sum(r["cost_nano"] for r in rows if isinstance(r.get("cost_nano"), int))
    notes = [f"{len(rows)} request{'s' if len(rows) != 1 else ''}, {first} to {last}, newest first; "
             f"cost {format_usd(total)}."]
    if any(c["cost"].endswith(EXTRA) for c in table_rows):
        notes.append(f"{EXTRA} billed besides tokens (tools, tier, long context): --breakdown shows each line.")
    if len(rows) >= limit:
        notes.append(f"The newest {limit} shown: --limit N for more, --csv or --jsonl for every row.")
    for note in notes:
        console.print(note, markup=False, highlight=False, soft_wrap=True)
