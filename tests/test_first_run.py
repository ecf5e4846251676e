"""An operator's first run (issue 32, points 5 and 6): a data dir shared with the service's own
group (Kubernetes fsGroup: mode 2775) is accepted, other unsafe modes still refused; a taken
port is one line naming it and --listen; gatewayctl finds the demo's socket from the checkout."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gatewayd.local_files import LocalFileRefused, check_directory

BIN = Path(sys.executable).parent
NOBODY = 65534


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mode", [0o2775, 0o2770])
def test_a_setgid_data_dir_of_gatewayds_own_group_is_accepted(tmp_path, mode):
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, mode)
    assert os.stat(data).st_gid == os.getegid()
    changed = check_directory(data, "data dir", tighten=True)
    assert _mode(data) == mode & ~0o007  # only what others may do is taken away
    assert changed == ([f"data dir {data} was mode {mode:04o}, now {mode & ~0o007:04o}"] if mode & 0o007 else [])


@pytest.mark.parametrize("mode, group, why", [
    (0o0770, None, "writable by its group"),  # group write without setgid
    (0o2777, None, "writable by its group or by everyone"),  # others may write, setgid or not
    (0o2770, NOBODY, "writable by its group"),  # a group gatewayd is not in
])
def test_other_shared_modes_are_still_refused(tmp_path, mode, group, why):
    if group is not None and group in os.getgroups() + [os.getegid()]:
        pytest.skip("this user is in the nobody group")
    data = tmp_path / "data"
    data.mkdir()
    if group is not None:
        os.chown(data, -1, group)
    os.chmod(data, mode)
    with pytest.raises(LocalFileRefused) as caught:
        check_directory(data, "data dir", tighten=True)
    assert why in str(caught.value) and _mode(data) == mode


@pytest.mark.live
def test_serve_on_a_taken_port_exits_2_with_one_line_naming_the_port_and_the_flag(tmp_path):
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([str(BIN / "gatewayd"), "serve", "--demo", "--listen", f"127.0.0.1:{port}",
                               "--data-dir", str(tmp_path / "data"), "--admin-socket", str(tmp_path / "a.sock")],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line == (f"gatewayd: port {port} on 127.0.0.1 is already in use (another gatewayd, or another program); "
                    "stop it, or choose another port with --listen HOST:PORT (or [server] listen)")


def test_gatewayctl_finds_the_demos_socket_when_only_the_demo_runs_here(tmp_path, monkeypatch):
    from gatewayctl.client import resolve_socket

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GATEWAY_ADMIN_SOCKET", raising=False)
    assert resolve_socket(None) == "var/admin.sock"  # nothing runs: the default, named in the error
    (tmp_path / "var" / "demo").mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as demo:
        demo.bind("var/demo/admin.sock")
        assert resolve_socket(None) == "var/demo/admin.sock"
        with socket.socket(socket.AF_UNIX) as real:
            real.bind("var/admin.sock")
            assert resolve_socket(None) == "var/admin.sock"  # a real daemon here wins
        assert resolve_socket("other.sock") == "other.sock"
        monkeypatch.setenv("GATEWAY_ADMIN_SOCKET", "env.sock")
        assert resolve_socket(None) == "env.sock"
