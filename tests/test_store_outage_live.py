"""PostgreSQL going away mid-traffic, through a proxy the test cuts (tests/pgproxy.py).

Requests that cannot take a hold get a clear 503 (nothing held, nothing charged, no row);
a stream already running settles when the database is back; gatewayd needs no restart;
the audit holds.
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests import pg
from tests.faults import assert_money_consistent, chat_body, headers, new_account
from tests.live import Daemon
from tests.pgproxy import Proxy
from tests.test_faults_crash import SlowStream

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not pg.available(), reason="no PostgreSQL on 127.0.0.1:5432")]


def test_database_away_then_back_mid_stream(sim, tmp_path):
    proxy = Proxy()
    name, url = pg.create_database()
    d = Daemon(tmp_path, sim.url, env={"GATEWAY_DATABASE_URL": url.replace(":5432/", f":{proxy.port}/")})
    try:
        account, _, secret = new_account(d)
        stream = SlowStream(d, secret, "/v1/chat/completions",
                            chat_body("outage [[sim:words=40]] [[sim:fault=chunk_delay_ms:100]]"))
        stream.start()
        assert stream.started.wait(15) and stream.status == 200

        proxy.cut()
        refused = httpx.post(d.url + "/v1/chat/completions", json=chat_body("during", stream=False),
                             headers=headers(secret), timeout=30)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "store_unavailable"
        assert "nothing was charged" in refused.json()["error"]["message"]
        # a clear answer from the daemon, not the client's timeout
        time.sleep(3)  # the stream reaches its end while the database is away: its settlement waits
        assert not stream.completed
        proxy.restore()

        stream.join(40)
        assert stream.completed, stream.raw[-300:]
        # no restart: new requests work, and the books are right
        ok = httpx.post(d.url + "/v1/chat/completions", json=chat_body("after", stream=False),
                        headers=headers(secret), timeout=30)
        assert ok.status_code == 200, ok.text
        rows = d.admin.usage(account["id"])
        assert sorted(r["status"] for r in rows) == ["ok", "ok"]  # the refused request left no row
        assert {r["request_id"] for r in rows} >= {stream.request_id}
        assert all(r["cost_nano"] > 0 for r in rows)
        assert_money_consistent(d, account["id"])
    finally:
        d.stop()
        proxy.close()
        pg.drop_database(name)


def test_unreachable_database_at_start_is_one_clear_line(sim, tmp_path):
    proxy = Proxy()
    proxy.cut()
    try:
        with pytest.raises(RuntimeError) as failed:
            Daemon(tmp_path, sim.url, env={"GATEWAY_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{proxy.port}/x"})
        assert "cannot be reached" in str(failed.value) and "Traceback" not in str(failed.value)
    finally:
        proxy.close()



def test_an_outage_longer_than_dead_after_releases_no_live_instance_s_holds(sim, tmp_path):
    """Two instances on one database, a stream running on a, the database away for 20 s (more
    than the 15 s after which a silent instance is dead). When it is back, b must not take a's
    silence for death: a's stream settles into its one usage row, nothing is interrupted."""
    proxy = Proxy()
    name, url = pg.create_database()
    env = {"GATEWAY_DATABASE_URL": url.replace(":5432/", f":{proxy.port}/")}
    a = Daemon(tmp_path / "a", sim.url, env=env)
    b = Daemon(tmp_path / "b", sim.url, env=env)
    try:
        account, _, secret = new_account(a)
        stream = SlowStream(a, secret, "/v1/chat/completions",
                            chat_body("long outage [[sim:words=250]] [[sim:fault=chunk_delay_ms:100]]"))
        stream.start()
        assert stream.started.wait(15) and stream.status == 200
        proxy.cut()
        time.sleep(20)
        proxy.restore()
        stream.join(90)  # it ends about 5 s after the restore and settles then
        assert stream.completed, stream.raw[-300:]
        time.sleep(20)  # b has now heartbeated 15 s without a break: it may judge, and a is alive
        rows = b.admin.usage(account["id"])
        assert [(r["request_id"], r["status"]) for r in rows] == [(stream.request_id, "ok")], rows
        assert rows[0]["cost_nano"] > 0
        for d in (a, b):
            assert_money_consistent(d, account["id"])
    finally:
        for d in (a, b):
            d.stop()
        proxy.close()
        pg.drop_database(name)


def test_a_store_outage_is_logged_and_in_the_metrics_without_a_readyz_poll(sim, tmp_path):
    from tests.test_operations_live import log_lines, scrape

    proxy = Proxy()
    name, url = pg.create_database()
    d = Daemon(tmp_path, sim.url, env={"GATEWAY_DATABASE_URL": url.replace(":5432/", f":{proxy.port}/")})

    def wait_for(msg: str) -> dict:
        deadline = time.monotonic() + 20
        while True:
            found = [doc for doc in log_lines(d) if doc.get("msg") == msg]
            if found:
                return found[-1]
            assert time.monotonic() < deadline, f"no {msg!r} line:\n{d.output.text[-2000:]}"
            time.sleep(0.2)

    try:
        assert scrape(d.url)[("gateway_store_up", ())] == 1
        proxy.cut()
        down = wait_for("store does not answer")
        assert down["store_up"] is False and down["level"] == "error"
        metrics = scrape(d.url)
        assert metrics[("gateway_store_up", ())] == 0 and metrics[("gateway_ready", ())] == 0
        proxy.restore()
        wait_for("store answers again")
        metrics = scrape(d.url)
        assert metrics[("gateway_store_up", ())] == 1 and metrics[("gateway_ready", ())] == 1
        assert not [doc for doc in log_lines(d) if doc.get("msg") == "request" and doc.get("path") == "/readyz"]
    finally:
        d.stop()
        proxy.close()
        pg.drop_database(name)
