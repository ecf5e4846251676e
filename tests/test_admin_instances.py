"""Two instances on one PostgreSQL database, each with its admin API over HTTP (in this
process): a token made on one works on the other, a token revoked on one is refused by the
other at its very next call (tokens are read from the database, never cached), and both write
one audit log."""

from __future__ import annotations

import pytest

from gatewayd.admin.gate import LOCAL_OPERATOR
from tests.admin_http import admin_http
from tests.live import postgres_ready


@pytest.fixture
async def two(tmp_path):
    if not postgres_ready():
        pytest.skip("no PostgreSQL on 127.0.0.1:5432 (or psycopg missing)")
    from gatewayd.store.postgres import PostgresStore
    from tests import pg

    name, url = pg.create_database(migrated=True)
    made = []
    try:
        for n in ("a", "b"):
            (tmp_path / n).mkdir()
            made.append(await admin_http(tmp_path / n, store=await PostgresStore.open(url, pool_size=2)))
        yield made
    finally:
        for instance in made:
            await instance.aclose()
        pg.drop_database(name)


async def test_a_token_revoked_on_one_instance_is_refused_by_the_other_at_once(two):
    a, b = two
    token = await a.token("money")
    created = await a.gate.call(LOCAL_OPERATOR, "POST", "/admin/v1/accounts", {"email": "pg@example.com"})
    await b.directory.load()  # (the change feed does this for a running daemon)
    account = created[1]["id"]
    paid = await b.as_(token, "POST", f"/admin/v1/accounts/{account}/payments", {"amount_nano": 10**9})
    assert paid.status_code == 201, paid.text
    [row] = await a.store.admin_tokens()
    status, _ = await a.gate.call(LOCAL_OPERATOR, "POST", f"/admin/v1/admin-tokens/{row.id}/revoke")
    assert status == 200
    refused = await b.as_(token, "GET", "/admin/v1/accounts")
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
    _, log = await b.gate.call(LOCAL_OPERATOR, "GET", "/admin/v1/audit-log", query={"changes": "true"})
    paths = [(r["via"], r["path"]) for r in log["data"]]
    assert ("http", f"/admin/v1/accounts/{account}/payments") in paths  # made on b
    assert ("socket", f"/admin/v1/admin-tokens/{row.id}/revoke") in paths  # made on a


async def test_routes_of_every_live_instance_are_shown_by_any_of_them(two):
    from gatewayd.records import utc_now_iso

    a, b = two
    token = await b.token("read")
    a_rows = [{"model": "gpt-4.1-mini", "route": "openai", "provider": "openai", "state": "cooling",
               "failures": 3}]
    await a.store.publish_route_report(a.store.instance_id, "host-a", a_rows, utc_now_iso())
    await a.store.publish_route_report("gone", "host-gone", a_rows, "2020-01-01T00:00:00.000Z")  # silent: left out
    shown = (await b.as_(token, "GET", "/admin/v1/routes?instances=all")).json()["data"]
    from_a = [r for r in shown if r["instance"] == a.store.instance_id]
    assert from_a == [{**a_rows[0], "instance": a.store.instance_id, "host": "host-a",
                       "reported_at": from_a[0]["reported_at"]}]
    assert {r["instance"] for r in shown} == {a.store.instance_id, b.store.instance_id}
    assert len([r for r in shown if r["instance"] == b.store.instance_id]) == len(
        (await b.as_(token, "GET", "/admin/v1/routes")).json()["data"])
    bad = await b.as_(token, "GET", "/admin/v1/routes?instances=some")
    assert bad.status_code == 400
    await a.store.forget_route_report(a.store.instance_id)
    shown = (await b.as_(token, "GET", "/admin/v1/routes?instances=all")).json()["data"]
    assert {r["instance"] for r in shown} == {b.store.instance_id}


async def test_an_instance_publishes_its_routes_and_withdraws_them_when_it_stops(two):
    import trio

    from gatewayd.admin.route_reports import publish_forever

    a, _ = two
    report = [{"model": "m", "route": "r", "provider": "p", "state": "healthy"}]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(publish_forever, a.store, lambda: report)
        with trio.fail_after(10):
            while not await a.store.route_reports("2000-01-01T00:00:00.000Z"):
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert await a.store.route_reports("2000-01-01T00:00:00.000Z") == []


@pytest.mark.live
@pytest.mark.slow
async def test_with_the_database_away_a_token_call_is_a_503_and_nothing_is_left_half_done(tmp_path, caplog):
    """(Waits on a real socket through a black-hole proxy: the live layer, as tests/test_store_outage.py.)"""
    if not postgres_ready():
        pytest.skip("no PostgreSQL on 127.0.0.1:5432 (or psycopg missing)")
    from gatewayd.store.postgres import PostgresStore
    from tests import pg
    from tests.pgproxy import Proxy

    name, url = pg.create_database(migrated=True)
    proxy = Proxy()
    admin = await admin_http(tmp_path, store=await PostgresStore.open(url.replace(":5432/", f":{proxy.port}/"),
                                                                      pool_size=2))
    try:
        token = await admin.token("read")
        assert (await admin.as_(token, "GET", "/admin/v1/me")).status_code == 200
        proxy.cut()
        away = await admin.as_(token, "GET", "/admin/v1/me")
        assert away.status_code == 503 and away.json()["error"]["code"] == "store_unavailable"
        assert away.headers["retry-after"] == "5"
        # the socket's operator is served what needs no database; the audit row it could not
        # write is in the log instead
        status, me = await admin.gate.call(LOCAL_OPERATOR, "GET", "/admin/v1/me")
        assert status == 200 and me["actor"] == "socket"
        assert any("admin audit entry not stored" in r.getMessage() and "/admin/v1/me" in r.getMessage()
                   for r in caplog.records)
    finally:
        proxy.restore()
        await admin.aclose()
        proxy.close()
        pg.drop_database(name)
