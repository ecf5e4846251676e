"""The usage log page (filters, pages, the 30-day chart) and its CSV export.

Filters arrive as query arguments so a filtered view is a link one can bookmark and
the CSV export takes exactly the same ones. A key filter naming another account's key
is a 404, the same as a key that does not exist.
"""

from __future__ import annotations

import csv
import datetime as dt
import io

from quart import Blueprint, Response, request

from gatewayd.billing import breakdown
from gatewayd.console import queries
from gatewayd.console.charts import daily_spend_svg
from gatewayd.console.formatting import local_iso, local_today
from gatewayd.console.queries import UsageFilter
from gatewayd.console.web import Console, not_found, page, signed_in
from gatewayd.money import nano_to_usd_str
from gatewayd.records import Account

CSV_HEADER = (
    "time", "request_id", "key_id", "key_name", "model", "endpoint", "stream", "status", "http_status",
    "input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens", "cost_usd", "cost_nano", "duration_ms",
    "provider", "attempts", *breakdown.CSV_COLUMNS,
)


class FilterError(ValueError):
    pass


# Dates a filter may name: the day after the last one and the zone's offset must still be a
# date Python can hold (9999-12-31 + 1 day is not), and no usage is older than 1970.
FIRST_DATE, LAST_DATE = dt.date(1970, 1, 1), dt.date(9998, 12, 31)


def _date(name: str, label: str) -> dt.date | None:
    text = request.args.get(name, "").strip()
    if not text:
        return None
    try:
        day = dt.date.fromisoformat(text)
    except ValueError:
        raise FilterError(f"{label} must be a date YYYY-MM-DD (got {text!r})") from None
    if not FIRST_DATE <= day <= LAST_DATE:
        raise FilterError(f"{label} must be a date between {FIRST_DATE} and {LAST_DATE} (got {text})")
    return day


def read_filter(console: Console, account: Account) -> UsageFilter:
    """The query arguments as a filter; raises FilterError for a bad date, 404 for a foreign key."""
    key_id = request.args.get("key", "").strip() or None
    if key_id is not None:
        key = console.directory.keys.get(key_id)
        if key is None or key.account_id != account.id:
            raise not_found("This key")
    model = request.args.get("model", "").strip()[:200] or None
    date_from, date_to = _date("from", "From"), _date("to", "To")
    if date_from and date_to and date_from > date_to:
        raise FilterError("the From date is after the To date")
    return UsageFilter(key_id=key_id, model=model, date_from=date_from, date_to=date_to)


def _safe_cell(text: str) -> str:
    """Key names are typed by people: keep a spreadsheet from reading one as a formula."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def register(bp: Blueprint, console: Console) -> None:
    directory = console.directory

    def key_names(account: Account) -> dict[str, str]:
        return {k.id: k.name for k in directory.keys_by_account.get(account.id, [])}

    @bp.get("/usage")
    async def usage():
        account = signed_in()
        error = None
        try:
            flt = read_filter(console, account)
        except FilterError as e:
            error, flt = str(e), UsageFilter()
        try:
            page_no = int(request.args.get("page", "1"))
        except ValueError:
            page_no = 1
        result = await queries.usage_page(console.store, account.id, account.timezone, flt, page_no)
        days, spend = await queries.daily_spend(console.store, account.id, account.timezone)
        chart, series = daily_spend_svg(days, spend)
        used = await queries.models_used(console.store, account.id)
        model_options = sorted(set(console.config.models) | set(used))
        keys = sorted(directory.keys_by_account.get(account.id, []), key=lambda k: (k.status == "deleted", k.name))
        return await page(
            console, "usage.html", 400 if error else 200, nav="usage", result=result, flt=flt, error=error,
            names=key_names(account), keys=keys, model_options=model_options, chart=chart, series=series,
            chart_total=sum(s.total_nano for s in series), args=flt.query_args(),
        )

    @bp.get("/usage.csv")
    async def usage_csv():
        account = signed_in()
        try:
            flt = read_filter(console, account)
        except FilterError as e:
            return Response(str(e) + "\n", status=400, content_type="text/plain; charset=utf-8")
        names = key_names(account)
        timezone = account.timezone

        async def body():
            out = io.StringIO()
            writer = csv.writer(out)
            writer.writerow(CSV_HEADER)
            async for batch in queries.usage_batches(console.store, account.id, timezone, flt):
                for r in batch:
                    writer.writerow((
                        local_iso(r["created_at"], timezone), r["request_id"], r["key_id"],
                        _safe_cell(names.get(r["key_id"], "")), r["model"], r["endpoint"],
                        "true" if r["stream"] else "false", r["status"], r["http_status"], r["input_tokens"],
                        r["output_tokens"], r["cached_tokens"], r["cache_write_tokens"],
                        nano_to_usd_str(r["cost_nano"]), r["cost_nano"], r["duration_ms"],
                        _safe_cell(r["provider"] or ""), r["attempts"],
                        *(_safe_cell(c) if isinstance(c, str) else c
                          for c in breakdown.csv_cells(r["hold_nano"], r["breakdown"])),
                    ))
                yield out.getvalue().encode()
                out.seek(0)
                out.truncate()
            if out.tell():
                yield out.getvalue().encode()

        filename = f"usage-{local_today(timezone).isoformat()}.csv"
        response = Response(body(), content_type="text/csv; charset=utf-8",
                            headers={"Content-Disposition": f'attachment; filename="{filename}"'})
        response.timeout = None
        return response
