"""Issue 20, local files and the demo account: what another local user, or a demo data dir, can do to a daemon.

Real ``gatewayd serve`` processes on tmp dirs and loopback. The suite runs as root here, so
"a data dir another user owns" is a tmp dir chowned to ``nobody`` (65534). A start that
is expected to be refused and is not is stopped after ``START_WAIT_S``.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from tests import pg
from tests.live import BIN, ROOT, Daemon, _Reader, catalogue_pointed_at

START_WAIT_S = 30
NOBODY = 65534


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _config(workdir: Path, sim_url: str, data_dir: Path, extra: str = "") -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "gatewayd.toml"
    config.write_text(f'[server]\nlisten = "127.0.0.1:0"\ndata_dir = "{data_dir}"\n'
                      f'admin_socket = "{workdir / "admin.sock"}"\nshutdown_grace_s = 1\n{extra}\n'
                      + catalogue_pointed_at(sim_url))
    return config


def _refused_start(args: list[str], env: dict | None = None) -> tuple[int | None, str]:
    """Run ``gatewayd serve`` that should stop at once: (exit status or None if it served, output)."""
    proc = subprocess.Popen([str(BIN / "gatewayd"), "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, **(env or {})})
    try:
        out, err = proc.communicate(timeout=START_WAIT_S)
        return proc.returncode, err
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        return None, err + out


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# --------------------------------------------------------------------------- modes


def test_the_data_dir_and_the_database_are_the_daemons_only(sim, tmp_path):
    daemon = Daemon(tmp_path / "gw", sim.url)
    try:
        account = daemon.admin.account("files@example.com")
        secret = daemon.admin.key(account["id"])["secret"]
        answer = httpx.post(f"{daemon.url}/v1/chat/completions", headers={"Authorization": f"Bearer {secret}"},
                            json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
        assert answer.status_code == 200, answer.text
        data = tmp_path / "gw" / "data"
        assert _mode(data) == 0o700
        files = [p for p in data.iterdir() if p.name.startswith("gateway.db")]
        assert {p.name for p in files} >= {"gateway.db", "gateway.db-wal", "gateway.db-shm"}
        for path in files:
            assert _mode(path) == 0o600, (path, oct(_mode(path)))
    finally:
        daemon.stop()


def test_a_data_dir_readable_by_others_is_tightened_with_a_warning(sim, tmp_path):
    """A data dir made by an older gatewayd (0755, gateway.db 0644): closed at the next start."""
    data = tmp_path / "gw" / "data"
    data.mkdir(parents=True)
    os.chmod(data, 0o755)
    (data / "gateway.db").touch(mode=0o644)
    os.chmod(data / "gateway.db", 0o644)
    daemon = Daemon(tmp_path / "gw", sim.url)
    try:
        assert _mode(data) == 0o700 and _mode(data / "gateway.db") == 0o600
        assert re.search(r"data dir \S+ was mode 0755, now 0700", daemon.output.text), daemon.output.text
        assert re.search(r"gateway\.db was mode 0644, now 0600", daemon.output.text), daemon.output.text
    finally:
        daemon.stop()


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_data_dir_others_can_write_to_is_refused(sim, tmp_path, mode):
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, mode)
    status, err = _refused_start(["--config", str(_config(tmp_path, sim.url, data))])
    assert status == 2, err
    line = _one_line(err)
    assert str(data) in line and "writable by its group or by everyone" in line
    assert list(data.iterdir()) == []  # nothing made in it


def test_a_data_dir_another_user_owns_is_refused(sim, tmp_path):
    """Root must not use (and follow links in) a directory ``nobody`` can fill."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    os.chown(data, NOBODY, NOBODY)
    status, err = _refused_start(["--config", str(_config(tmp_path, sim.url, data))])
    assert status == 2, err
    line = _one_line(err)
    assert str(data) in line and f"owned by uid {NOBODY}" in line
    assert list(data.iterdir()) == []


# --------------------------------------------------------------------------- links


@pytest.mark.parametrize("planted", ["gateway.db", "gateway.db-wal", "gateway.db.instance-lock"])
def test_a_link_where_a_database_file_goes_is_refused_and_its_target_untouched(sim, tmp_path, planted):
    victim = tmp_path / "victim"
    victim.write_bytes(b"")  # an empty file: SQLite would happily make a database in it
    os.chmod(victim, 0o644)
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    os.symlink(victim, data / planted)
    status, err = _refused_start(["--config", str(_config(tmp_path, sim.url, data))])
    assert status == 2, err
    line = _one_line(err)
    assert planted in line and "symbolic link" in line
    assert victim.read_bytes() == b"" and _mode(victim) == 0o644
    assert os.path.islink(data / planted)


@pytest.mark.skipif(not pg.available(), reason="no PostgreSQL on 127.0.0.1:5432")
def test_a_link_where_the_instance_slot_file_goes_is_refused_and_its_target_untouched(sim, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    os.symlink(victim, data / "instance-0.id.tmp")  # where the slot's id is written before its rename
    name, url = pg.create_database()
    try:
        status, err = _refused_start(["--config", str(_config(tmp_path, sim.url, data))],
                                     env={"GATEWAY_DATABASE_URL": url})
    finally:
        pg.drop_database(name)
    assert victim.read_text() == "precious\n"
    assert status == 2, err
    line = _one_line(err)
    assert "instance-0.id.tmp" in line and "symbolic link" in line


# --------------------------------------------------------------------------- the demo account


class _Demo:
    """``gatewayd serve --demo`` started from ``cwd`` with the environment an operator has."""

    def __init__(self, cwd: Path, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        self.proc = subprocess.Popen([str(BIN / "gatewayd"), "serve", "--demo", "--listen", "127.0.0.1:0", *args],
                                     cwd=cwd, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.output = _Reader(self.proc.stdout)
        self.output.start()
        self.url = self.output.wait_for(r"demo is running at (http://\S+)", 60, self.proc).group(1)
        self.secret = self.output.wait_for(r"demo key: (sk-\S+)", 10, self.proc).group(1)

    def chat(self, url: str | None = None) -> httpx.Response:
        return httpx.post(f"{url or self.url}/v1/chat/completions", headers={"Authorization": f"Bearer {self.secret}"},
                          json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_demo_uses_its_own_data_dir(tmp_path):
    demo = _Demo(tmp_path)
    try:
        assert demo.chat().status_code == 200
        assert (tmp_path / "var" / "demo" / "gateway.db").is_file()
        assert (tmp_path / "var" / "demo" / "admin.sock").exists()
        assert not (tmp_path / "var" / "gateway.db").exists()  # where a plain `serve` keeps its database
        assert _mode(tmp_path / "var" / "demo") == 0o700
    finally:
        demo.stop()


def test_a_real_start_on_a_demo_database_retires_the_demo_account(sim, tmp_path):
    workdir = tmp_path / "gw"
    data = workdir / "data"
    workdir.mkdir()
    demo = _Demo(tmp_path, "--data-dir", str(data), "--admin-socket", str(tmp_path / "demo.sock"))
    try:
        assert demo.chat().status_code == 200
    finally:
        demo.stop()

    daemon = Daemon(workdir, sim.url)  # a real daemon pointed at the demo's data dir
    try:
        answer = demo.chat(daemon.url)
        assert answer.status_code == 401, answer.text
        warning = re.search(r"the demo account demo@example\.com \(acct_\w+\) is in this database.*", daemon.output.text)
        assert warning, daemon.output.text
        account = daemon.admin.call("GET", "/accounts/demo@example.com")
        assert account["has_password"] is False  # the published demo password signs no one in
        keys = daemon.admin.call("GET", f"/accounts/{account['id']}/keys")["data"]
        assert keys and all(k["state"] != "enabled" for k in keys), keys
        signin = httpx.get(f"{daemon.url}/console/signin", timeout=30)
        assert signin.status_code == 200
    finally:
        daemon.stop()

    again = _Demo(tmp_path, "--data-dir", str(data), "--admin-socket", str(tmp_path / "demo.sock"))
    try:  # the demo itself gets its account back
        assert again.secret == demo.secret
        assert again.chat().status_code == 200
    finally:
        again.stop()
