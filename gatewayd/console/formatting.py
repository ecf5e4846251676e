"""How the console writes money, times and counts for people.

Money has one format everywhere in the console: US dollars to 6 decimal places (a
millionth of a dollar, ``format_usd``: exact, no floats), since a request can cost
$0.000052 and a balance must add up to the digit. On the pages the digits past the cents
are drawn lighter (``usd_html``), so $10.500000 still reads as ten dollars fifty at a
glance. Times are stored as UTC ISO strings and shown in the account's time zone.
"""

from __future__ import annotations

import datetime as dt
import math
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable
from zoneinfo import ZoneInfo

from markupsafe import Markup, escape

from gatewayd.billing import breakdown
from gatewayd.money import format_usd


def usd(nano: int | None) -> str:
    """'$10.500000': for text (tooltips, messages, CSV-like places)."""
    return format_usd(nano)


def usd_html(nano: int | None) -> Markup:
    """The same figure for a page: the sub-cent digits in a lighter span."""
    text = format_usd(nano)
    if "." not in text:
        return Markup(escape(text))
    whole, frac = text.split(".")
    return Markup(f'{escape(whole)}.{escape(frac[:2])}<span class="subcent">{escape(frac[2:])}</span>')


def at_ratio(nano: int | None, ratio: Fraction = Fraction(1)) -> Markup:
    """An amount after a group's price ratio, rounded up to the nano-dollar as the hold rounds."""
    if nano is None:
        return Markup("—")
    return usd_html(math.ceil(nano * ratio))


def per_million(nano_per_token: int | None, ratio: Fraction = Fraction(1)) -> Markup:
    """A price per token as dollars per 1,000,000 tokens (the providers' unit), after a group's ratio."""
    return at_ratio(None if nano_per_token is None else nano_per_token * 1_000_000, ratio)


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def parse_utc(iso: str) -> dt.datetime:
    """'2026-11-21T20:59:04.123Z' -> an aware UTC datetime."""
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))


def to_utc_iso(moment: dt.datetime) -> str:
    """The store's own format, so string comparison in SQL orders instants correctly."""
    return moment.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def local_time(iso: str | None, timezone: str, with_seconds: bool = True) -> str:
    if not iso:
        return ""
    moment = parse_utc(iso).astimezone(zone(timezone))
    return moment.strftime("%Y-%m-%d %H:%M:%S" if with_seconds else "%Y-%m-%d %H:%M")


def local_iso(iso: str, timezone: str) -> str:
    """For CSV: the local time with its UTC offset, unambiguous for spreadsheets and scripts."""
    return parse_utc(iso).astimezone(zone(timezone)).isoformat(timespec="seconds")


def local_today(timezone: str, now: dt.datetime | None = None) -> dt.date:
    return (now or dt.datetime.now(dt.timezone.utc)).astimezone(zone(timezone)).date()


def day_start_utc(day: dt.date, timezone: str) -> str:
    """Midnight at the start of ``day`` in the account's zone, as a stored-format UTC string."""
    return to_utc_iso(dt.datetime.combine(day, dt.time(0), tzinfo=zone(timezone)))


def zone_label(timezone: str) -> str:
    """'Europe/Paris (UTC+01:00)' for page footers and column headers."""
    offset = dt.datetime.now(zone(timezone)).strftime("%z")
    return f"{timezone} (UTC{offset[:3]}:{offset[3:]})" if offset else timezone


def tokens(count: int | None) -> str:
    return "" if count is None else f"{count:,}"


def breakdown_title(row) -> str:
    """A usage row's charge line by line, for the cost cell's tooltip: the lines add up to the
    cost shown; then what was held. Rows settled before breakdowns were kept say so."""
    if row["breakdown"] is None:
        lines = ["no breakdown recorded (settled before gatewayd kept one)"]
    else:
        lines = breakdown.describe(row["breakdown"]) or ["nothing billed"]
    if row["hold_nano"] is not None:
        lines.append(f"held {usd(row['hold_nano'])}")
    return "\n".join(lines)


FILTERS: dict[str, Callable[..., Any]] = {
    "usd": usd_html, "usd_text": usd, "per_million": per_million, "at_ratio": at_ratio, "local_time": local_time, "tokens": tokens, "breakdown_title": breakdown_title,
}
