"""Key expiry and key state with a frozen clock: pure functions, no daemon.

A key's expiry date means "the end of that day in the account holder's local time"
(spec, API key). ``records.expiry_instant`` turns (date, IANA zone) into a Unix
instant and ``Key.state(now)`` derives expired / used-up from it, so both are tested
here at the exact boundary with zones on both sides of UTC: Pacific/Kiritimati
(UTC+14, no DST) and Pacific/Pago_Pago (UTC-11, no DST) -- 25 hours apart for the
same calendar date.
"""

from __future__ import annotations

import datetime as dt

import pytest

from gatewayd.records import Key, expiry_instant

UTC = dt.timezone.utc
DAY = dt.date(2026, 3, 10)


def utc(*args) -> float:
    return dt.datetime(*args, tzinfo=UTC).timestamp()


def key(expires_on=None, timezone="UTC", *, status="enabled", limit=None, spent=0) -> Key:
    k = Key(
        id="key_test", account_id="acct_test", name="t", secret_hash="h", secret_hint="sk-...", status=status,
        spend_limit_nano=limit, spent_nano=spent, expires_on=expires_on, models=None, allow_ips=None, group=None,
        created_at="2026-01-01T00:00:00.000Z", last_used_at=None,
    )
    k.expires_at = expiry_instant(expires_on, timezone)
    return k


@pytest.mark.parametrize(
    "zone, end_of_day_utc",
    [
        # 2026-03-11 00:00 at UTC+14 is 2026-03-10 10:00 UTC
        ("Pacific/Kiritimati", utc(2026, 3, 10, 10, 0)),
        # 2026-03-11 00:00 at UTC-11 is 2026-03-11 11:00 UTC
        ("Pacific/Pago_Pago", utc(2026, 3, 11, 11, 0)),
        ("UTC", utc(2026, 3, 11, 0, 0)),
        # a zone with DST: 2026-03-29 is the spring-forward day in Paris (UTC+1 -> UTC+2);
        # the end of 2026-03-10 is still at UTC+1
        ("Europe/Paris", utc(2026, 3, 10, 23, 0)),
    ],
)
def test_expiry_instant_is_next_local_midnight(zone, end_of_day_utc):
    assert expiry_instant(DAY, zone) == end_of_day_utc


def test_expiry_instant_across_a_dst_change():
    """The end of the day before spring-forward in Paris is midnight at UTC+2 (a 23-hour day ends it)."""
    assert expiry_instant(dt.date(2026, 3, 28), "Europe/Paris") == utc(2026, 3, 28, 23, 0)
    assert expiry_instant(dt.date(2026, 3, 29), "Europe/Paris") == utc(2026, 3, 29, 22, 0)


def test_no_expiry_date_means_no_instant():
    assert expiry_instant(None, "Pacific/Kiritimati") is None
    assert key(None).state(utc(2999, 1, 1)) == "enabled"


@pytest.mark.parametrize(
    "zone, now, state",
    [
        ("Pacific/Kiritimati", utc(2026, 3, 10, 9, 59, 59), "enabled"),  # 23:59:59 local on the day
        ("Pacific/Kiritimati", utc(2026, 3, 10, 10, 0, 0), "expired"),  # 00:00:00 local, the next day
        ("Pacific/Kiritimati", utc(2026, 3, 10, 10, 0, 1), "expired"),
        ("Pacific/Pago_Pago", utc(2026, 3, 11, 10, 59, 59), "enabled"),  # UTC already on the 11th: still the 10th there
        ("Pacific/Pago_Pago", utc(2026, 3, 11, 11, 0, 0), "expired"),
        ("Pacific/Pago_Pago", utc(2026, 3, 11, 11, 0, 1), "expired"),
    ],
    ids=["kiritimati-before", "kiritimati-at", "kiritimati-after", "pago-before", "pago-at", "pago-after"],
)
def test_state_at_the_boundary(zone, now, state):
    assert key(DAY, zone).state(now) == state


def test_same_instant_same_date_differs_by_zone():
    """At 2026-03-10 12:00 UTC a key expiring on the 10th is over at UTC+14 and alive at UTC-11."""
    now = utc(2026, 3, 10, 12, 0)
    assert key(DAY, "Pacific/Kiritimati").state(now) == "expired"
    assert key(DAY, "Pacific/Pago_Pago").state(now) == "enabled"
    assert key(DAY, "UTC").state(now) == "enabled"


@pytest.mark.parametrize(
    "fields, state",
    [
        ({}, "enabled"),
        ({"status": "disabled"}, "disabled"),
        ({"status": "deleted"}, "deleted"),
        ({"limit": 100, "spent": 99}, "enabled"),
        ({"limit": 100, "spent": 100}, "used_up"),
        ({"limit": 100, "spent": 101}, "used_up"),  # an estimate error may overshoot by a little
        ({"limit": 0}, "used_up"),
        ({"expires_on": dt.date(2026, 3, 9)}, "expired"),
        # precedence when several apply: stored status first, then expiry, then the limit
        ({"expires_on": dt.date(2026, 3, 9), "limit": 1, "spent": 1}, "expired"),
        ({"status": "disabled", "expires_on": dt.date(2026, 3, 9)}, "disabled"),
        ({"status": "deleted", "limit": 1, "spent": 1}, "deleted"),
    ],
    ids=lambda v: "-".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else str(v),
)
def test_state_table(fields, state):
    expires_on = fields.pop("expires_on", None)
    assert key(expires_on, **fields).state(utc(2026, 3, 10, 12, 0)) == state


def test_state_is_derived_not_stored():
    """Editing the date or the limit changes the state with no transition step in between."""
    now = utc(2026, 3, 10, 12, 0)
    k = key(dt.date(2026, 3, 9), limit=10, spent=10)
    assert k.state(now) == "expired"
    k.expires_on, k.expires_at = None, None
    assert k.state(now) == "used_up"
    k.spend_limit_nano = 11
    assert k.state(now) == "enabled"
    k.spend_limit_nano = None
    assert k.state(now) == "enabled"


@pytest.mark.parametrize("zone", ["Pacific/Kiritimati", "Pacific/Pago_Pago", "UTC"])
def test_extreme_dates_do_not_overflow(zone):
    """9999-12-31 has no next day to take midnight of: its end is never reached (it was an OverflowError)."""
    assert expiry_instant(dt.date.max, zone) == float("inf")
    assert key(dt.date.max, zone).state(utc(9999, 12, 31, 23, 59)) == "enabled"
    assert key(dt.date.min, zone).state(utc(1970, 1, 1)) == "expired"
