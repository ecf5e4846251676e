"""Instances cut off from PostgreSQL the way a network does it, under load (issue 25).

Each instance that is cut reaches the database through its own ``tests/pgproxy.py``, whose
``partition()`` accepts and never forwards (a black hole: no refusal, no reset, silence).
Real daemons, the simulator upstream, loopback only. After each: ``gatewayctl audit`` on
every instance, one usage row per admitted request, and the balance bound.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests import pg
from tests.faults import LIVENESS_S, chat_body, gatewayctl_audit, headers, new_account
from tests.live import Daemon
from tests.pgproxy import Proxy
from tests.test_faults_crash import SlowStream

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not pg.available(), reason="no PostgreSQL on 127.0.0.1:5432")]

SERVER = "models_visible_after_paid = 0\n"  # an account paid a few cents sees the models


def _post(d: Daemon, secret: str, text: str, **extra) -> httpx.Response:
    return httpx.post(d.url + "/v1/chat/completions", json=chat_body(text, stream=False, **extra),
                      headers=headers(secret), timeout=60)


class Load(threading.Thread):
    """Requests to ``daemon`` one after another until stopped; every answer's status kept."""

    def __init__(self, daemon: Daemon, secret: str, text: str, **extra) -> None:
        super().__init__(daemon=True)
        self.d, self.secret, self.text, self.extra = daemon, secret, text, extra
        self.stop = threading.Event()
        self.statuses: list[int] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.statuses.append(_post(self.d, self.secret, self.text, **self.extra).status_code)
            except httpx.HTTPError:
                self.statuses.append(0)
            time.sleep(0.05)


def _audit_all(*daemons: Daemon) -> None:
    for d in daemons:
        code, report = gatewayctl_audit(d.socket)
        assert code == 0 and report["ok"] is True, report


def _visible_on(d: Daemon, secret: str) -> None:
    """Until ``d`` knows the key made on another instance, with its paid account's models."""
    deadline = time.monotonic() + 5
    while True:
        r = httpx.get(d.url + "/v1/models", headers=headers(secret), timeout=30)
        if r.status_code == 200 and r.json()["data"]:
            return
        assert time.monotonic() < deadline, r.text
        time.sleep(0.05)


def _settled(d: Daemon, account_id: str, bound_s: float = 30) -> dict:
    """The balance once nothing is held (holds whose answer was lost are released by maintenance)."""
    deadline = time.monotonic() + bound_s
    while True:
        balance = d.admin.balance(account_id)
        if balance["held_nano"] == 0 or time.monotonic() > deadline:
            return balance
        time.sleep(0.3)


def test_a_black_holed_instance_answers_503_within_3_s_every_time_and_recovers(sim, tmp_path):
    proxy = Proxy()
    name, url = pg.create_database()
    via = url.replace(":5432/", f":{proxy.port}/")  # a reaches the database through the proxy
    a = Daemon(tmp_path / "a", sim.url, server=SERVER, env={"GATEWAY_DATABASE_URL": via})
    b = Daemon(tmp_path / "b", sim.url, server=SERVER, env={"GATEWAY_DATABASE_URL": url})
    loads: list[Load] = []
    try:
        account, _, secret = new_account(b)
        _visible_on(a, secret)
        assert _post(a, secret, "warm").status_code == 200
        loads = [Load(b, secret, "load on b"), Load(a, secret, "load on a")]
        for load in loads:
            load.start()
        time.sleep(1)
        proxy.partition()
        took: list[tuple[int, str, float]] = []

        def one(i: int) -> None:
            started = time.monotonic()
            r = _post(a, secret, f"cut {i}")
            code = r.json().get("error", {}).get("code") if r.status_code != 200 else "ok"
            took.append((r.status_code, code, time.monotonic() - started))

        for _ in range(3):  # three waves of six at once: pooled connections, then new black-holed ones
            wave = [threading.Thread(target=one, args=(i,)) for i in range(6)]
            for t in wave:
                t.start()
            for t in wave:
                t.join(30)
        print("black hole: 503s after", sorted(round(s, 2) for _, _, s in took))
        # the daemon's own answer (not the client's 60 s timeout): bounded by the store's deadlines
        assert len(took) == 18 and {(s, c) for s, c, _ in took} == {(503, "store_unavailable")}, took
        proxy.heal()
        healed = time.monotonic()
        while _post(a, secret, "after").status_code != 200:
            assert time.monotonic() - healed < LIVENESS_S, "the pool did not come back"
            time.sleep(0.2)
        print(f"a answered again {time.monotonic() - healed:.1f} s after the heal")
        for load in loads:
            load.stop.set()
        for load in loads:
            load.join(60)
        served_b = loads[0].statuses
        assert served_b.count(200) >= 5 and set(served_b) == {200}, served_b  # b never noticed
        assert set(loads[1].statuses) <= {200, 503}

        balance = _settled(b, account["id"])
        assert balance["held_nano"] == 0, balance
        rows = b.admin.usage(account["id"], limit=1000)
        admitted = 2 + served_b.count(200) + loads[1].statuses.count(200)  # warm and after, and the loads
        assert len(rows) == admitted and {r["status"] for r in rows} == {"ok"}, rows  # no row for a 503
        assert len({r["request_id"] for r in rows}) == len(rows)
        assert balance["balance_nano"] == 10 * 10**9 - sum(r["cost_nano"] for r in rows)
        _audit_all(a, b)
    finally:
        for load in loads:
            load.stop.set()
        for d in (a, b):
            d.stop()
        proxy.close()
        pg.drop_database(name)


STREAM = "fenced [[sim:words=300]] [[sim:fault=chunk_delay_ms:100]]"  # 30 s of stream


def test_a_partition_longer_than_dead_after_never_lets_the_account_overdraw(sim, tmp_path):
    """a runs three long streams on an account with little money; a is cut off (black hole) for
    longer than DEAD_AFTER_S while b and c spend the account as fast as they can. a fences
    itself (its new requests get 503), b or c charges a's holds provisionally, so the money
    held for a's streams is never spent twice; when a is back its streams settle, correcting
    those charges. The balance ends at or above minus one request's estimate (in fact >= 0)."""
    proxy = Proxy()
    name, url = pg.create_database()
    via = url.replace(":5432/", f":{proxy.port}/")  # a reaches the database through the proxy
    a = Daemon(tmp_path / "a", sim.url, server=SERVER, env={"GATEWAY_DATABASE_URL": via})
    b = Daemon(tmp_path / "b", sim.url, server=SERVER, env={"GATEWAY_DATABASE_URL": url})
    c = Daemon(tmp_path / "c", sim.url, server=SERVER, env={"GATEWAY_DATABASE_URL": url})
    loads: list[Load] = []
    try:
        account, _, secret = new_account(b, paid_usd="0.004")
        _visible_on(a, secret)
        # three streams of 300 words, max_tokens 400: each uses about 3/4 of what it holds, so had
        # their holds been freed and spent, their charges would take the balance below -estimate
        streams = [SlowStream(a, secret, "/v1/chat/completions", chat_body(STREAM, max_tokens=400))
                   for _ in range(3)]
        for s in streams:
            s.start()
        for s in streams:
            assert s.started.wait(15) and s.status == 200, s.raw[-500:]
        estimate = b.admin.balance(account["id"])["held_nano"] // 3
        print(f"one stream's estimate: {estimate} nano")
        proxy.partition()
        cut = time.monotonic()
        # b and c spend whatever they may: requests as costly as a stream, back to back
        loads = [Load(d, secret, "[[sim:words=300]] spend", max_tokens=400) for d in (b, c, b, c)]
        for load in loads:
            load.start()
        fenced_503 = []
        while time.monotonic() - cut < 22:  # past DEAD_AFTER_S (15 s) and a maintenance round
            started = time.monotonic()
            r = _post(a, secret, "on a, cut off")
            fenced_503.append((r.status_code, time.monotonic() - started))
            time.sleep(0.5)
        print("fenced: 503s after", sorted(round(t, 2) for _, t in fenced_503))
        assert {s for s, _ in fenced_503} == {503}, fenced_503  # answered by a, not timed out by the client
        rows = {r["request_id"]: r for r in b.admin.usage(account["id"], limit=1000)}
        provisional = [rows[s.request_id] for s in streams if s.request_id in rows]
        assert [(r["status"], r["cost_nano"]) for r in provisional] == [("unsettled", estimate)] * 3, provisional
        proxy.heal()
        for s in streams:
            s.join(60)
            assert s.completed, s.raw[-300:]
        for load in loads:
            load.stop.set()
        for load in loads:
            load.join(60)

        balance = _settled(b, account["id"])
        rows = b.admin.usage(account["id"], limit=1000)
        print(f"balance after the partition: {balance['balance_nano']} nano (bound {-estimate}); "
              f"{len(rows)} rows, statuses {sorted({r['status'] for r in rows})}")
        assert balance["held_nano"] == 0
        assert balance["balance_nano"] >= -estimate  # the bound
        assert balance["balance_nano"] >= 0  # and here every charge was within its estimate
        assert len({r["request_id"] for r in rows}) == len(rows)
        by_id = {r["request_id"]: r for r in rows}
        for s in streams:  # the provisional charge became the real outcome
            assert by_id[s.request_id]["status"] == "ok" and 0 < by_id[s.request_id]["cost_nano"] <= estimate
        served = sum(load.statuses.count(200) for load in loads)
        assert len(rows) == served + 3 and {r["status"] for r in rows} == {"ok"}
        assert balance["balance_nano"] == 4 * 10**6 - sum(r["cost_nano"] for r in rows)
        _audit_all(a, b, c)
    finally:
        for load in loads:
            load.stop.set()
        for d in (a, b, c):
            d.stop()
        proxy.close()
        pg.drop_database(name)
