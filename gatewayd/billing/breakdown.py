"""A usage row's breakdown as people and spreadsheets read it: CSV cells and short summaries.

The breakdown is the stored form of :meth:`gatewayd.billing.pricing.Bill.doc`:
``{"lines": [{"dimension", "quantity", "unit_nano", "nano"}], "tier", "long_context"}``,
its lines adding up to the row's ``cost_nano``. Rows settled before it was recorded have
none (None), and every function here says so instead of inventing zeros. Pure functions
of plain data, shared by ``gatewayctl usage`` (table and CSV) and the console (page and
CSV), so both show the same thing.
"""

from __future__ import annotations

from typing import Any


# The token dimensions of pricing.bill, in the order of a bill; tool fees are "tool:<name>".
TOKEN_DIMENSIONS = ("input", "cached_input", "cache_write_5m", "cache_write_1h", "output", "audio_input",
                    "audio_output", "image_output")
# Dimensions an ordinary text request has: the compact summary leaves them out.
PLAIN_DIMENSIONS = frozenset({"input", "cached_input", "output"})
TOOL_PREFIX = "tool:"

# The CSV export's breakdown columns (after the usage row's own): the hold, one column of
# nano-dollars per token dimension, all tool fees together (``tools_nano``) with the calls
# that made them (``tool_calls``: ``web_search=3 file_search=1``), and the rates used.
# Every cell is empty on a row without a breakdown; a dimension the row did not bill is 0.
CSV_COLUMNS = ("hold_nano", *(f"{d}_nano" for d in TOKEN_DIMENSIONS), "tools_nano", "tool_calls", "tier",
               "long_context")


def exact_usd(nano: int) -> str:
    """Dollars to the nano, shown with at least 6 decimals and more only where they are not
    zero (token rates are fractions of a micro-dollar): 240 -> ``$0.00000024``,
    30_000_000 -> ``$0.030000``. The lines of a bill add up to its cost as shown."""
    sign = "-" if nano < 0 else ""
    whole, frac = divmod(abs(nano), 1_000_000_000)
    digits = f"{frac:09d}".rstrip("0").ljust(6, "0")
    return f"{sign}${whole}.{digits}"


def lines(breakdown: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The breakdown's lines that are well-formed (a dimension and integer quantity and nano)."""
    if not isinstance(breakdown, dict) or not isinstance(breakdown.get("lines"), list):
        return []
    return [line for line in breakdown["lines"] if isinstance(line, dict) and isinstance(line.get("dimension"), str)
            and isinstance(line.get("nano"), int) and isinstance(line.get("quantity"), int)]


def csv_cells(hold_nano: int | None, breakdown: dict[str, Any] | None) -> list[Any]:
    """The :data:`CSV_COLUMNS` cells of one row (booleans as ``true``/``false``)."""
    hold = "" if hold_nano is None else hold_nano
    if not isinstance(breakdown, dict):
        return [hold, *([""] * (len(CSV_COLUMNS) - 1))]
    by_dimension = dict.fromkeys(TOKEN_DIMENSIONS, 0)
    tools_nano, calls = 0, []
    for line in lines(breakdown):
        dimension = line["dimension"]
        if dimension.startswith(TOOL_PREFIX):
            tools_nano += line["nano"]
            calls.append(f"{dimension[len(TOOL_PREFIX):]}={line['quantity']}")
        elif dimension in by_dimension:
            by_dimension[dimension] += line["nano"]
    return [hold, *by_dimension.values(), tools_nano, " ".join(calls), breakdown.get("tier") or "",
            "true" if breakdown.get("long_context") else "false"]


def _label(dimension: str) -> str:
    if dimension.startswith(TOOL_PREFIX):
        return dimension[len(TOOL_PREFIX):]
    return dimension.replace("_", " ")


def summary(breakdown: dict[str, Any] | None) -> str:
    """One short line of what is unusual in the charge: every dimension besides plain input,
    cached input and output (``web_search x3 $0.030000``), then the tier and long context.
    Empty for a plain text request, ``-`` for a row without a breakdown."""
    if not isinstance(breakdown, dict):
        return "-"
    parts = [f"{_label(line['dimension'])} x{line['quantity']:,} {exact_usd(line['nano'])}"
             for line in lines(breakdown) if line["dimension"] not in PLAIN_DIMENSIONS]
    if breakdown.get("tier"):
        parts.append(f"tier {breakdown['tier']}")
    if breakdown.get("long_context"):
        parts.append("long context")
    return ", ".join(parts)


def describe(breakdown: dict[str, Any] | None) -> list[str]:
    """Every line, for a details view: ``output: 1,200 x $0.000015 = $0.018000``."""
    out = []
    for line in lines(breakdown):
        unit = line.get("unit_nano")
        unit_text = exact_usd(unit) if isinstance(unit, int) else "?"
        out.append(f"{_label(line['dimension'])}: {line['quantity']:,} x {unit_text} = {exact_usd(line['nano'])}")
    if isinstance(breakdown, dict):
        if breakdown.get("tier"):
            out.append(f"service tier {breakdown['tier']} rates")
        if breakdown.get("long_context"):
            out.append("long-context rates")
    return out
