"""Daily spend per model as a stacked bar chart, drawn on the server as SVG.

No JavaScript and no chart library: the page stays a plain document, works with the
strict Content-Security-Policy, and the numbers in each bar's tooltip are the exact
``format_usd`` figures. Colours come from presentation attributes (not ``style``),
which that policy allows.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from html import escape

import attrs

from gatewayd.console.formatting import usd
from gatewayd.money import NANO_PER_USD

PALETTE = ("#4f46e5", "#0ea5e9", "#10b981", "#f59e0b", "#ef4444", "#8b5cf6", "#14b8a6", "#ec4899")
OTHER_COLOUR = "#94a3b8"
WIDTH, HEIGHT = 760, 280
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 12, 28


@attrs.frozen
class Series:
    label: str
    colour: str
    by_day: dict[dt.date, int]
    total_nano: int


def series(spend: dict[str, dict[dt.date, int]]) -> list[Series]:
    """Biggest spenders first; past the palette, the rest share one 'other' series."""
    ranked = sorted(spend.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    out = [Series(model, PALETTE[i], days, sum(days.values())) for i, (model, days) in enumerate(ranked[:len(PALETTE)])]
    rest = ranked[len(PALETTE):]
    if rest:
        merged: dict[dt.date, int] = {}
        for _, days in rest:
            for day, cost in days.items():
                merged[day] = merged.get(day, 0) + cost
        out.append(Series(f"{len(rest)} other models", OTHER_COLOUR, merged, sum(merged.values())))
    return out


def nice_ceiling(nano: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten (in nano-dollars) at or above ``nano``."""
    if nano <= 0:
        return NANO_PER_USD // 100  # an empty chart still shows a $0.01 scale
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= nano:
                return step * factor
        step *= 10


def _axis_label(nano: int) -> str:
    value = Decimal(nano) / NANO_PER_USD
    return f"${value.normalize():f}" if value < 1 else f"${value:,.2f}"


def daily_spend_svg(days: list[dt.date], spend: dict[str, dict[dt.date, int]]) -> tuple[str, list[Series]]:
    """The chart's SVG markup and its series (the page draws the legend from them)."""
    drawn = series(spend)
    totals = [sum(s.by_day.get(day, 0) for s in drawn) for day in days]
    top = nice_ceiling(max(totals, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(1, len(days))
    bar_w = max(2.0, slot * 0.7)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" xmlns="http://www.w3.org/2000/svg"'
        f' aria-label="Daily spend per model, last {len(days)} days">'
    ]
    for i in range(5):  # grid lines and dollar labels at 0, 1/4 ... 4/4 of the scale
        value = top * i // 4
        y = TOP + plot_h - plot_h * i / 4
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e2e8f0"/>')
        parts.append(f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="#64748b">'
                     f'{escape(_axis_label(value))}</text>')
    for index, day in enumerate(days):
        x = LEFT + slot * index + (slot - bar_w) / 2
        y = TOP + plot_h
        for s in drawn:
            cost = s.by_day.get(day, 0)
            if not cost:
                continue
            h = plot_h * cost / top
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{max(h, 0.5):.1f}" fill="{s.colour}">'
                f'<title>{escape(day.isoformat())} · {escape(s.label)}: {escape(usd(cost))}</title></rect>'
            )
        if index % 5 == 0 or index == len(days) - 1:
            parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle" font-size="11"'
                         f' fill="#64748b">{escape(day.strftime("%b %d"))}</text>')
    parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h}" y2="{TOP + plot_h}" stroke="#94a3b8"/>')
    parts.append("</svg>")
    return "".join(parts), drawn
