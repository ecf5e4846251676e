"""What every admin answer shares: JSON with dollars beside nano-dollars, and the time bounds
the usage, report and audit-log queries take."""

from __future__ import annotations

import datetime
import zoneinfo
from typing import Any

import orjson
from quart import Response, request

from gatewayd.directory import DirectoryError
from gatewayd.money import nano_to_usd_str

JSON = "application/json"

# The stored times' range: a bound outside it (the end of 9999-12-31, the start of 0001-01-01
# in a zone east of UTC) is clamped to it, which selects the same rows.
EARLIEST = "0001-01-01T00:00:00.000Z"
LATEST = "9999-12-31T23:59:59.999Z"
MAX_ROW_ID = 2**63 - 1  # the stores' 64-bit row ids: a larger ``before`` pages from the newest row


def instant(value: str | None, timezone: str, name: str, *, end_of_day: bool = False) -> str | None:
    """``YYYY-MM-DD`` in ``timezone`` (``until``: the end of that day, inclusive) or an ISO 8601
    timestamp with an offset, as the stored UTC text it is compared with."""
    if value is None or value == "":
        return None
    try:
        if len(value) == 10:
            day = datetime.date.fromisoformat(value)
            if end_of_day:
                if day == datetime.date.max:
                    return LATEST
                day += datetime.timedelta(days=1)
            moment = datetime.datetime.combine(day, datetime.time(), zoneinfo.ZoneInfo(timezone))
        else:
            moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            if moment.tzinfo is None:
                raise ValueError("no offset")
    except ValueError:
        raise DirectoryError(f"{name} must be a date YYYY-MM-DD or an ISO 8601 time with an offset (got {value!r})"
                             ) from None
    try:
        utc = moment.astimezone(datetime.timezone.utc)
    except OverflowError:  # before year 1 or after year 9999 once in UTC
        return EARLIEST if moment.year == 1 else LATEST
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def usd_beside(doc: Any) -> Any:
    """Every ``X_nano`` field (an integer or null) with ``X_usd`` beside it (the exact decimal
    string, or null), unless the document has its own ``X_usd`` (the prices say USD per 1M
    tokens): scripts read the integers, people the dollars. A usage row's ``breakdown`` is
    the stored bill, shown as stored."""
    if isinstance(doc, dict):
        out = {}
        for name, value in doc.items():
            out[name] = value if name == "breakdown" else usd_beside(value)
            if name.endswith("_nano") and (value is None or (isinstance(value, int) and not isinstance(value, bool))):
                usd = name[:-5] + "_usd"
                if usd not in doc:
                    out[usd] = nano_to_usd_str(value)
        return out
    if isinstance(doc, list):
        return [usd_beside(v) for v in doc]
    return doc


def json_response(doc: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(usd_beside(doc)), status=status, content_type=JSON)




def int_arg(name: str, default: Any, low: int, high: int | None) -> Any:
    """A whole-number query argument of the request: ``default`` when absent, at least ``low``
    (else the admin API's 400), at most ``high`` (clamped: a larger page asks for all there is)."""
    value = request.args.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise DirectoryError(f"{name} must be a whole number") from None
    if number < low:
        raise DirectoryError(f"{name} must be at least {low}")
    return number if high is None else min(number, high)
