"""Versions and upgrades (issue 32, point 5): ``--version`` of both commands, the version in
/healthz (tests/test_operations_live.py) and /metrics, each migration logged, and a database
migrated by a newer gatewayd refused with one line and exit 2."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from gatewayd.metrics import Metrics
from gatewayd.store import sqlite as sqlite_store
from gatewayd.store.base import SchemaTooNew
from gatewayd.version import describe, schema_versions, version

BIN = Path(sys.executable).parent


def test_the_version_is_the_packages_and_names_the_schemas_it_knows():
    assert version() == "0.1.0"  # pyproject.toml
    known = schema_versions()
    assert known["sqlite"] >= 15 and known["postgresql"] >= 15
    assert describe() == f"gatewayd 0.1.0 (database schema: SQLite {known['sqlite']}, PostgreSQL {known['postgresql']})"
    assert f'gateway_build_info{{version="{version()}"}} 1.0' in Metrics().render().decode()


@pytest.mark.live
def test_both_commands_print_their_version():
    for command, expected in (("gatewayd", describe()), ("gatewayctl", f"gatewayctl {version()}")):
        done = subprocess.run([str(BIN / command), "--version"], capture_output=True, text=True, timeout=30)
        assert (done.returncode, done.stdout.strip(), done.stderr) == (0, expected, "")


def test_each_sqlite_migration_is_logged_with_from_to_and_time(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="gatewayd.store")
    conn = sqlite3.connect(tmp_path / "g.db", isolation_level=None)
    assert sqlite_store.migrate(conn) == schema_versions()["sqlite"]
    lines = [r.fields for r in caplog.records if r.getMessage() == "database migrated"]
    assert [(f["from"], f["to"]) for f in lines][:2] == [(0, 1), (1, 2)]
    assert lines[-1]["to"] == schema_versions()["sqlite"] and all(f["duration_ms"] >= 0 for f in lines)
    caplog.clear()
    sqlite_store.migrate(conn)  # nothing left to do: nothing logged
    assert not [r for r in caplog.records if r.getMessage() == "database migrated"]


def test_a_sqlite_database_from_a_newer_gatewayd_is_refused(tmp_path):
    conn = sqlite3.connect(tmp_path / "g.db", isolation_level=None)
    sqlite_store.migrate(conn)
    conn.execute("INSERT INTO schema_version (version) VALUES (9999)")
    with pytest.raises(SchemaTooNew) as caught:
        sqlite_store.migrate(conn)
    assert "schema is at migration 9999, which this gatewayd 0.1.0 does not know" in str(caught.value)
    assert "docs/upgrade.md" in str(caught.value)


def test_a_postgresql_database_from_a_newer_gatewayd_is_refused():
    from tests import pg

    if not pg.available():
        pytest.skip("PostgreSQL is not reachable")
    from gatewayd.store.postgres import migrate

    _, url = pg.create_database(migrated=True)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_version (version) VALUES (9999)")
    with pytest.raises(SchemaTooNew, match="PostgreSQL database's schema is at migration 9999"):
        migrate(url)


@pytest.mark.live
def test_serve_on_a_newer_schema_exits_2_with_one_line(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    conn = sqlite3.connect(data / "gateway.db", isolation_level=None)
    sqlite_store.migrate(conn)
    conn.execute("INSERT INTO schema_version (version) VALUES (9999)")
    conn.close()
    done = subprocess.run([str(BIN / "gatewayd"), "serve", "--data-dir", str(data), "--listen", "127.0.0.1:0",
                           "--admin-socket", str(tmp_path / "a.sock")], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "o", "ANTHROPIC_API_KEY": "a",
                               "GEMINI_API_KEY": "g", "DEEPSEEK_API_KEY": "d"})
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("gatewayd: the SQLite database's schema is at migration 9999")
