"""``gatewayd serve --workers N``: what is refused, with one line each.

The multi-worker runs themselves (PostgreSQL) are in tests/test_multi_instance_live.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import httpx
import pytest

from tests import pg
from tests.faults import gatewayctl_audit
from tests.live import BIN, Daemon, postgres_ready, unique_email

pytestmark = pytest.mark.live  # every test starts gatewayd (one or N workers)


def serve(tmp_path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "gatewayd"), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), *args],
        capture_output=True, text=True, timeout=60, env=env,
    )


def errors(result: subprocess.CompletedProcess) -> list[str]:
    """stderr's lines but the default catalogue's one warning about providers whose key is unset
    (the machine running the tests has none: issue 32)."""
    return [line for line in result.stderr.strip().splitlines() if not line.startswith("gatewayd: warning: providers")]


def test_sqlite_serves_one_process(tmp_path):
    result = serve(tmp_path, "--workers", "2")
    assert result.returncode == 2 and result.stdout == ""
    assert errors(result) == [
        'gatewayd: --workers 2 needs PostgreSQL ([database] url = "postgresql://..." or GATEWAY_DATABASE_URL): '
        "a SQLite database is served by one process"
    ]
    assert not (tmp_path / "gateway.db").exists()  # refused before anything was created


@pytest.mark.parametrize("count", ["0", "-1"])
def test_workers_must_be_positive(tmp_path, count):
    result = serve(tmp_path, "--workers", count)
    assert result.returncode == 2
    assert errors(result) == [f"gatewayd: --workers must be at least 1 (got {count})"]


# -- two workers on PostgreSQL ------------------------------------------------------------------


def cpu_ticks(pid: int) -> int:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@pytest.mark.slow
@pytest.mark.skipif(not postgres_ready(), reason="no PostgreSQL on 127.0.0.1:5432 (.ci/run starts it)")
def test_two_workers_share_the_address_the_admin_socket_and_the_money(sim, tmp_path):
    name, url = pg.create_database()
    daemon = Daemon(tmp_path, sim.url, args=["--workers", "2"], env={"GATEWAY_DATABASE_URL": url})
    try:
        line = re.search(r"2 workers \(pids (\d+), (\d+)\)", daemon.output.text)
        assert line, daemon.output.text
        pids = [int(line.group(1)), int(line.group(2))]
        account = daemon.admin.account(unique_email("workers"))
        key = daemon.admin.key(account["id"])
        before = [cpu_ticks(p) for p in pids]
        for _ in range(40):  # a new connection each: the kernel hands them to either worker
            r = httpx.post(daemon.url + "/v1/chat/completions", headers={"authorization": f"Bearer {key['secret']}"},
                           json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
            assert r.status_code == 200, r.text
        assert all(cpu_ticks(p) > b for p, b in zip(pids, before))  # both workers served
        assert len(daemon.admin.usage(account["id"])) == 40
        # `gatewayctl reload` reaches one worker; the supervisor passes SIGHUP on to both
        assert daemon.admin.call("POST", "/reload")
        deadline = time.monotonic() + 20
        while len(re.findall(r"config reloaded.*SIGHUP", daemon.output.text)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(re.findall(r"config reloaded.*SIGHUP", daemon.output.text)) >= 2, daemon.output.text
        # a worker killed -9 is replaced on the same socket; requests keep being served
        os.kill(pids[0], signal.SIGKILL)
        daemon.output.wait_for(r"worker 1 restarted \(pid (\d+)\)", 30, daemon.proc)
        for _ in range(10):
            r = httpx.post(daemon.url + "/v1/chat/completions", headers={"authorization": f"Bearer {key['secret']}"},
                           json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
            assert r.status_code == 200, r.text
        code, report = gatewayctl_audit(daemon.socket)
        assert code == 0 and report["ok"] is True, report
    finally:
        assert daemon.stop() == 0
        pg.drop_database(name)
    for pid in pids[1:]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not os.path.exists(daemon.socket)
