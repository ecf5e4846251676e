"""The console's pure parts: sessions, CSRF, the throttle, the key form, the chart, daily buckets."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction
import sqlite3

import pytest

from gatewayd.console.charts import daily_spend_svg, nice_ceiling, series
from gatewayd.console.forms import FormError, KeyForm, nano_to_plain_usd
from gatewayd.console.formatting import at_ratio, day_start_utc, local_time, per_million, usd, usd_html
from gatewayd.console.queries import UsageFilter, daily_spend
from gatewayd.console.session import MAX_AGE_S, REVEAL_TTL_S, Sessions, SignInThrottle
from gatewayd.store.sqlite import SQLiteStore


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_session_round_trip_forgery_expiry_and_sign_out(store):
    clock = Clock()
    sessions = Sessions(b"k" * 32, store, clock=clock)
    signed = sessions.signed_in("acct_1", "scrypt$hash")
    cookie = sessions.dump(signed)
    back = await sessions.read(cookie)
    assert (back.sid, back.account_id, back.fingerprint) == (signed.sid, "acct_1", signed.fingerprint)
    assert (await sessions.read(cookie[:-2] + "xx")).account_id is None  # tampered signature
    assert (await Sessions(b"other secret" * 3, store).read(cookie)).account_id is None  # another secret
    assert (await sessions.read("not a cookie")).account_id is None
    # CSRF tokens belong to one session
    other = sessions.new()
    assert sessions.csrf_valid(back, sessions.csrf_token(signed))
    assert not sessions.csrf_valid(back, sessions.csrf_token(other))
    assert not sessions.csrf_valid(back, "")
    # sign-out refuses the same cookie afterwards, on every instance sharing the store
    fresh = await sessions.end(back)
    assert fresh.account_id is None and fresh.sid != back.sid
    assert (await sessions.read(cookie)).account_id is None
    assert (await Sessions(b"k" * 32, store, clock=clock).read(cookie)).account_id is None


async def test_session_expires_after_max_age(monkeypatch, store):
    import itsdangerous.timed

    clock = Clock()
    sessions = Sessions(b"k" * 32, store, clock=clock)
    monkeypatch.setattr(itsdangerous.timed.time, "time", lambda: clock.now)
    cookie = sessions.dump(sessions.signed_in("acct_1", "h"))
    clock.now += MAX_AGE_S - 60
    assert (await sessions.read(cookie)).account_id == "acct_1"
    clock.now += 120
    assert (await sessions.read(cookie)).account_id is None


async def test_a_new_keys_secret_rides_in_the_cookie_encrypted_and_is_taken_once(store):
    import json

    from itsdangerous import URLSafeTimedSerializer

    clock = Clock()
    sessions = Sessions(b"k" * 32, store, clock=clock)
    session = sessions.signed_in("acct_1", "h")
    secret = "sk-" + "a1B2" * 12
    sessions.park_reveal(session, "key_1", secret)
    cookie = sessions.dump(session)
    _, data = URLSafeTimedSerializer(b"anyone").loads_unsafe(cookie)  # what the cookie says, unverified
    assert data["a"] == "acct_1" and data["r"][0] == "key_1"
    assert "a1B2" not in json.dumps(data)  # the secret is not readable from the cookie
    # another instance (same signing secret) reads it; the wrong key id gets nothing
    elsewhere = Sessions(b"k" * 32, store, clock=clock)
    back = await elsewhere.read(cookie)
    assert elsewhere.take_reveal(back, "key_2") is None
    assert elsewhere.take_reveal(back, "key_1") == secret
    assert back.dirty and elsewhere.take_reveal(back, "key_1") is None  # shown once
    assert (await elsewhere.read(elsewhere.dump(back))).reveal is None
    # a different signing secret cannot read it, and a parked secret expires
    assert (await Sessions(b"x" * 32, store, clock=clock).read(cookie)).reveal is None
    clock.now += REVEAL_TTL_S + 1
    late = await sessions.read(cookie)
    assert late.account_id == "acct_1" and sessions.take_reveal(late, "key_1") is None


async def test_throttle_takes_attempts_before_the_check_with_doubling_lockouts(store):
    clock = Clock(1_000_000)
    throttle = SignInThrottle(store, limit=5, window_s=900, lockout_s=900, clock=clock)
    for _ in range(5):  # the fifth attempt is still checked; it locks the email at this address
        assert await throttle.reserve("A@example.com", "10.0.0.1") is None
        clock.now += 10
    assert await throttle.reserve("a@example.com ", "10.0.0.1") == 900 - 10
    # another instance sharing the store sees the same lockout
    assert await SignInThrottle(store, clock=clock).reserve("a@example.com", "10.0.0.1") == 900 - 10
    assert await throttle.reserve("a@example.com", "10.0.0.2") is None  # the email elsewhere: its own count
    assert await throttle.reserve("b@example.com", "10.0.0.1") is None
    clock.now += 900  # the lockout ran out: five more, then twice as long
    for _ in range(5):
        assert await throttle.reserve("a@example.com", "10.0.0.1") is None
    assert await throttle.reserve("a@example.com", "10.0.0.1") == 1800
    clock.now += 1800
    await throttle.succeeded("a@example.com", "10.0.0.1")  # a success forgives the email's lockouts
    for _ in range(5):
        assert await throttle.reserve("a@example.com", "10.0.0.1") is None
    assert await throttle.reserve("a@example.com", "10.0.0.1") == 900


async def test_throttle_caps_one_address_trying_many_emails_and_one_email_from_many_addresses(store):
    clock = Clock(1_000_000)
    throttle = SignInThrottle(store, limit=5, account_limit=8, address_limit=20, lockout_s=900, clock=clock)
    for i in range(20):
        assert await throttle.reserve(f"user{i}@example.com", "10.0.0.9") is None
    assert await throttle.reserve("someone-else@example.com", "10.0.0.9") == 900
    assert await throttle.reserve("someone-else@example.com", "10.0.0.10") is None
    for i in range(8):  # one email guessed at from many addresses
        assert await throttle.reserve("victim@example.com", f"10.1.0.{i}") is None
    assert await throttle.reserve("victim@example.com", "10.1.0.99") == 900
    clock.now += 900
    assert await throttle.reserve("someone-else@example.com", "10.0.0.9") is None


async def test_concurrent_attempts_for_one_email_get_five_between_them(store):
    """The race of counting after the check: 20 at once, on a real SQLite file or PostgreSQL
    (four pool connections, real concurrent transactions); five are let through."""
    import trio

    throttle = SignInThrottle(store)
    outcomes = []

    async def attempt(i: int) -> None:
        outcomes.append(await throttle.reserve("race@example.com", "10.2.0.1"))

    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(attempt, i)
    assert outcomes.count(None) == 5 and all(w >= 1 for w in outcomes if w is not None), outcomes


class FakeForm(dict):
    def getlist(self, name):
        value = self.get(name, [])
        return value if isinstance(value, list) else [value]


def test_key_form_to_directory_fields():
    form = KeyForm.from_form(FakeForm(name=" prod ", spend_limit="$1,000.25", expires_on="2030-01-31",
                                      model_scope="selected", models=["gpt-4.1", "gpt-4.1", ""],
                                      allow_ips="10.0.0.0/8, 192.0.2.1\n\n::1", group="vip"))
    assert form.fields() == {
        "name": "prod", "spend_limit_nano": 1_000_250_000_000, "expires_on": "2030-01-31",
        "models": ["gpt-4.1"], "allow_ips": ["10.0.0.0/8", "192.0.2.1", "::1"], "group": "vip",
        "budget_nano": None, "budget_period": None,
    }
    empty = KeyForm.from_form(FakeForm(name="k", models=["gpt-4.1"]))  # boxes ticked but "every model" chosen
    assert empty.fields() == {"name": "k", "spend_limit_nano": None, "expires_on": None, "models": None,
                              "allow_ips": None, "group": None, "budget_nano": None, "budget_period": None}
    budgeted = KeyForm.from_form(FakeForm(name="k", budget="$12.5", budget_period="week"))
    assert (budgeted.fields()["budget_nano"], budgeted.fields()["budget_period"]) == (12_500_000_000, "week")
    for bad, field in (({"spend_limit": "abc"}, "spend_limit"), ({"spend_limit": "-1"}, "spend_limit"),
                       ({"spend_limit": "0.0000000001"}, "spend_limit"), ({"model_scope": "selected"}, "models"),
                       ({"budget": "x"}, "budget"), ({"budget": "-1"}, "budget"),
                       ({"budget": "1", "budget_period": "year"}, "budget")):
        with pytest.raises(FormError) as info:
            KeyForm.from_form(FakeForm(name="k", **bad)).fields()
        assert info.value.field == field
    assert nano_to_plain_usd(2_500_000_000) == "2.50" and nano_to_plain_usd(1_234_567) == "0.001234567"
    assert nano_to_plain_usd(None) == ""


def test_money_and_time_for_people():
    # one format everywhere: 6 decimals (the pages draw the digits past the cents lighter)
    assert usd(10_500_000_000) == "$10.500000" and usd(52_000) == "$0.000052" and usd(0) == "$0.000000"
    assert usd(-1_000_000_000) == "-$1.000000" and usd(None) == "-"
    assert usd_html(10_500_000_000) == '$10.50<span class="subcent">0000</span>'
    assert usd_html(-52_000) == '-$0.00<span class="subcent">0052</span>' and usd_html(None) == "-"
    assert per_million(400) == '$0.40<span class="subcent">0000</span>' and per_million(None) == "—"
    assert per_million(3000, Fraction(11, 10)) == '$3.30<span class="subcent">0000</span>'  # a group's ratio
    assert at_ratio(1, Fraction(1, 3)) == '$0.00<span class="subcent">0000</span>'  # rounded up to the nano
    assert local_time("2026-07-01T12:00:00.000Z", "Asia/Kathmandu") == "2026-07-01 17:45:00"
    assert local_time("2026-01-15T12:00:00.000Z", "America/New_York", False) == "2026-01-15 07:00"
    assert day_start_utc(dt.date(2026, 7, 1), "Europe/Paris") == "2026-06-30T22:00:00.000Z"
    query = UsageFilter(key_id="key_1", date_from=dt.date(2026, 3, 8), date_to=dt.date(2026, 3, 8)) \
        .query("acct_1", "America/New_York")
    assert (query.account_id, query.key_id, query.model) == ("acct_1", "key_1", None)
    assert (query.since, query.until) == ("2026-03-08T05:00:00.000Z", "2026-03-09T04:00:00.000Z")  # DST day: 23 h


def test_chart_scale_series_and_escaping():
    assert nice_ceiling(0) == 10_000_000 and nice_ceiling(1) == 1 and nice_ceiling(3_000) == 5_000
    assert nice_ceiling(10_000_001) == 20_000_000
    days = [dt.date(2026, 11, 1) + dt.timedelta(days=i) for i in range(3)]
    spend = {f"model-{i}": {days[0]: (i + 1) * 1000} for i in range(10)}
    spend["<b>&x"] = {days[1]: 20_000}
    drawn = series(spend)
    assert [s.label for s in drawn] == ["<b>&x"] + [f"model-{i}" for i in range(9, 2, -1)] + ["3 other models"]
    assert drawn[-1].total_nano == 1000 + 2000 + 3000
    svg, _ = daily_spend_svg(days, spend)
    assert "<b>" not in svg and "2026-11-02 · &lt;b&gt;&amp;x: $0.000020</title>" in svg
    assert svg.count("<rect") == 8 + 1  # day one: seven models and "other"; day two: one
    empty_svg, empty_series = daily_spend_svg(days, {})
    assert empty_series == [] and "<rect" not in empty_svg and "$0.01" in empty_svg


async def test_daily_spend_puts_each_request_on_its_local_day(tmp_path):
    store = SQLiteStore(str(tmp_path / "db.sqlite"))  # rows with chosen times: written below the contract
    now = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)
    rows = [
        ("2026-11-20T18:14:59.999Z", "m1", 100),  # Kathmandu 23:59:59 on the 20th
        ("2026-11-20T18:15:00.000Z", "m1", 200),  # Kathmandu 00:00 on the 21st
        ("2026-11-21T11:59:00.000Z", "m2", 7),
        ("2026-10-22T18:14:00.000Z", "m1", 999),  # Kathmandu Oct 22 23:59: before the 30 days
        ("2026-10-22T18:15:00.000Z", "m1", 1),  # Kathmandu Oct 23 00:00: the first day shown
    ]

    def insert(conn: sqlite3.Connection) -> None:
        for i, (at, model, cost) in enumerate(rows):
            for account in ("acct_1", "acct_2"):
                conn.execute(
                    "INSERT INTO usage (request_id, created_at, account_id, key_id, model, endpoint, stream, status,"
                    " http_status, cost_nano) VALUES (?, ?, ?, 'key_1', ?, 'chat', 0, 'ok', 200, ?)",
                    (f"req_{i}_{account}", at, account, model, cost),
                )

    await store.write(insert)
    try:
        days, spend = await daily_spend(store, "acct_1", "Asia/Kathmandu", now=now)
    finally:
        await store.close()
    assert days[0] == dt.date(2026, 10, 23) and days[-1] == dt.date(2026, 11, 21) and len(days) == 30
    assert spend == {
        "m1": {dt.date(2026, 11, 20): 100, dt.date(2026, 11, 21): 200, dt.date(2026, 10, 23): 1},
        "m2": {dt.date(2026, 11, 21): 7},
    }
