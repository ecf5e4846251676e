"""The daemon dying under load: kill -9 with requests in flight, SIGTERM with streams open.

After a kill -9 and a restart the invariant holds (``gatewayctl audit`` says so), the
holds the dead process left are released and recorded as ``interrupted`` usage rows, and
every request whose last byte was sent still has its usage row. A SIGTERM lets open
streams finish within ``shutdown_grace_s``, then cuts and settles them.
"""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

from tests.faults import (
    LIVENESS_S, PAID, assert_money_consistent, chat_body, gatewayctl_audit, headers, messages_body, new_account,
    sse_events,
    stream_all,
)
from tests.live import Daemon


class SlowStream(threading.Thread):
    """A streaming request read in the background; ``started`` is set once events arrive."""

    def __init__(self, daemon, secret: str, path: str, body: dict) -> None:
        super().__init__(daemon=True)
        self.url, self.secret, self.path, self.body = daemon.url, secret, path, body
        self.started = threading.Event()
        self.request_id: str | None = None
        self.status: int | None = None
        self.raw = b""
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            with httpx.Client(timeout=60) as http:
                with http.stream("POST", self.url + self.path, json=self.body, headers=headers(self.secret)) as r:
                    self.status = r.status_code
                    self.request_id = r.headers.get("x-request-id")
                    for chunk in r.iter_raw():
                        self.raw += chunk
                        if self.raw.count(b"\n\n") >= 3:
                            self.started.set()
        except Exception as e:  # noqa: BLE001 - the daemon going away is the point
            self.error = e
        finally:
            self.started.set()

    @property
    def completed(self) -> bool:
        events = sse_events(self.raw)
        return bool(events) and (events[-1][1] == "[DONE]" or events[-1][0] == "message_stop")


def _start_streams(daemon, secret: str, count: int, words: int, delay_ms: int) -> list[SlowStream]:
    streams = []
    for i in range(count):
        text = f"slow {i} [[sim:words={words}]] [[sim:fault=chunk_delay_ms:{delay_ms}]]"
        if i % 2:
            stream = SlowStream(daemon, secret, "/v1/messages", messages_body(text, max_tokens=words + 50))
        else:
            stream = SlowStream(daemon, secret, "/v1/chat/completions", chat_body(text))
        stream.start()
        streams.append(stream)
    for stream in streams:
        assert stream.started.wait(15), "a slow stream never started"
        assert stream.status == 200, stream.raw
    return streams


def _swallow(fn, *args) -> None:
    try:
        fn(*args)
    except httpx.HTTPError:
        pass


@pytest.mark.slow
def test_kill_9_with_requests_in_flight_then_restart(sim, tmp_path):
    d = Daemon(tmp_path, sim.url)
    try:
        account, _, secret = new_account(d)
        finished = []
        for path, body in [("/v1/chat/completions", chat_body("done one", stream=False)),
                           ("/v1/chat/completions", chat_body("done two [[sim:words=30]]")),
                           ("/v1/messages", messages_body("done three [[sim:words=30]]"))]:
            status, hdrs, raw = stream_all(d.url, path, secret, body)
            assert status == 200
            finished.append(hdrs["x-request-id"])
        streams = _start_streams(d, secret, count=4, words=300, delay_ms=100)
        # and one non-streaming request waiting for its answer (no request id seen by the client yet)
        waiting = threading.Thread(target=_swallow, args=(stream_all, d.url, "/v1/chat/completions", secret,
                                                          chat_body("waiting [[sim:fault=delay_ms:20000]]",
                                                                    stream=False)), daemon=True)
        waiting.start()
        in_flight = [s.request_id for s in streams]
        time.sleep(0.3)  # the hold rows are queued without waiting; give the writer a moment
        before = d.admin.balance(account["id"])
        assert before["held_nano"] > 0
        assert d.admin.audit()["ok"] is True  # holds in flight are consistent too

        d.stop(signal.SIGKILL)
        assert d.proc.returncode == -signal.SIGKILL
        for stream in streams:
            stream.join(10)
            assert not stream.completed
        d.start()

        code, report = gatewayctl_audit(d.socket)
        assert code == 0 and report["ok"] is True, report
        rows = {r["request_id"]: r for r in d.admin.usage(account["id"], limit=100)}
        for request_id in finished:  # their last byte was sent: their rows survived
            assert rows[request_id]["status"] == "ok" and rows[request_id]["cost_nano"] > 0
        for request_id in in_flight:  # released and recorded
            assert rows[request_id]["status"] == "interrupted", rows[request_id]
            assert rows[request_id]["cost_nano"] == 0
        assert len(rows) == len(finished) + len(in_flight) + 1
        [other] = [r for r in rows.values() if r["request_id"] not in finished + in_flight]
        assert other["status"] == "interrupted" and other["stream"] is False and other["cost_nano"] == 0
        balance = assert_money_consistent(d, account["id"])
        assert balance["balance_nano"] == PAID - sum(rows[r]["cost_nano"] for r in finished)
        # and the daemon serves again
        status, _, raw = stream_all(d.url, "/v1/chat/completions", secret, chat_body("after the crash"))
        assert status == 200 and sse_events(raw)[-1][1] == "[DONE]"
        assert_money_consistent(d, account["id"])
    finally:
        d.stop(signal.SIGKILL)


@pytest.mark.slow
def test_sigterm_lets_short_streams_finish_and_cuts_long_ones_at_grace(sim, tmp_path):
    grace = 2.0
    d = Daemon(tmp_path, sim.url, server=f"shutdown_grace_s = {grace}\n")
    try:
        account, _, secret = new_account(d)
        short = _start_streams(d, secret, count=2, words=10, delay_ms=100)  # about 1 s each
        long = _start_streams(d, secret, count=2, words=300, delay_ms=100)  # about 30 s each
        answers: list[httpx.Response] = []
        waiting = threading.Thread(target=lambda: answers.append(httpx.post(
            d.url + "/v1/chat/completions", json=chat_body("slow answer [[sim:fault=delay_ms:30000]]", stream=False),
            headers=headers(secret), timeout=30)), daemon=True)
        waiting.start()
        time.sleep(0.3)
        at_signal = [len(stream.raw) for stream in long]
        d.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        with pytest.raises(httpx.TransportError):  # no longer accepting
            httpx.post(d.url + "/v1/chat/completions", json=chat_body("too late", stream=False),
                       headers=headers(secret), timeout=5)
        assert d.proc.wait(LIVENESS_S) == 0  # stopped: the long streams (30 s each) were not waited for
        for stream in short + long:
            stream.join(10)
        waiting.join(10)
        [answer] = answers  # a request still waiting for its provider is told why
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "shutting_down", answer.text
        assert all(s.completed for s in short), [s.raw[-200:] for s in short]
        for stream, before in zip(long, at_signal):
            assert not stream.completed  # cut, at the end of the grace (the short ones, 1 s, were let finish) ...
            assert len(stream.raw) > before, "not cut at once: it went on during the grace"  # ... not at once
            name, data = sse_events(stream.raw)[-1]
            assert "shutting down" in data and "incomplete" in data, stream.raw[-300:]
            assert stream.error is None, "the stream was dropped instead of ended with an error event"

        d.admin.close()
        d.start()
        code, report = gatewayctl_audit(d.socket)
        assert code == 0 and report["ok"] is True, report
        rows = {r["request_id"]: r for r in d.admin.usage(account["id"], limit=100)}
        for stream in short:
            assert rows[stream.request_id]["status"] == "ok"
        for stream in long:
            row = rows[stream.request_id]
            assert row["status"] == "shutdown", row  # settled by the daemon as it stopped
            assert row["output_tokens"] > 0 and row["cost_nano"] > 0
        assert rows[answer.headers["x-request-id"]]["status"] == "shutdown"
        assert len(rows) == 5
        assert_money_consistent(d, account["id"])
    finally:
        d.stop(signal.SIGKILL)


def test_gatewayctl_audit_ok_on_a_healthy_daemon(gateway, funded):
    account, _, secret = funded
    status, _, _ = stream_all(gateway.url, "/v1/chat/completions", secret, chat_body("audit me"))
    assert status == 200
    code, report = gatewayctl_audit(gateway.socket)
    assert code == 0 and report["ok"] is True
    assert any(a["account_id"] == account["id"] and a["ok"] for a in report["accounts"])


@pytest.mark.slow
def test_gatewayctl_audit_fails_when_the_ledger_was_tampered_with(sim, tmp_path):
    """The audit is a real check: money changed behind the ledger's back makes it exit 1."""
    import sqlite3

    from tests import pg

    d = Daemon(tmp_path, sim.url)
    try:
        account, _, secret = new_account(d)
        assert stream_all(d.url, "/v1/chat/completions", secret, chat_body("before"))[0] == 200
        assert gatewayctl_audit(d.socket)[0] == 0
        d.stop()
        if d.database:  # the suite on PostgreSQL: tamper with that database
            import psycopg

            with psycopg.connect(pg.url_of(d.database), autocommit=True) as conn:
                conn.execute("UPDATE accounts SET credit_nano = credit_nano + 1 WHERE id = %s", (account["id"],))
        else:
            conn = sqlite3.connect(tmp_path / "data" / "gateway.db")
            with conn:
                conn.execute("UPDATE accounts SET credit_nano = credit_nano + 1 WHERE id = ?", (account["id"],))
            conn.close()
        d.start()
        code, report = gatewayctl_audit(d.socket)
        assert code == 1 and report["ok"] is False
        [bad] = [a for a in report["accounts"] if not a["ok"]]
        assert bad["account_id"] == account["id"] and "payments - charges" in bad["problems"][0]
    finally:
        d.stop(signal.SIGKILL)
