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
