"""``gatewayd serve --workers N``: what is refused, with one line each.

The multi-worker runs themselves (PostgreSQL) are in tests/test_multi_instance_live.py.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.live import BIN


def serve(tmp_path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "gatewayd"), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), *args],
        capture_output=True, text=True, timeout=60, env=env,
    )


def test_sqlite_serves_one_process(tmp_path):
    result = serve(tmp_path, "--workers", "2")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        'gatewayd: --workers 2 needs PostgreSQL ([database] url = "postgresql://..." or GATEWAY_DATABASE_URL): '
        "a SQLite database is served by one process"
    ]
    assert not (tmp_path / "gateway.db").exists()  # refused before anything was created


@pytest.mark.parametrize("count", ["0", "-1"])
def test_workers_must_be_positive(tmp_path, count):
    result = serve(tmp_path, "--workers", count)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"gatewayd: --workers must be at least 1 (got {count})"]
