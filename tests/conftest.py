"""Session-wide live processes: one simulator and one gateway for the suite; the ``live`` marker.

Tests that need a daemon of their own (restarts, kill -9, other config) start one with
``tests.live.Daemon`` directly.

``live`` marks every test that starts a process (a daemon, the simulator, a CLI or npm
subprocess, nginx, a browser): ``make test-unit`` runs the rest (``-m "not live"``). Tests
using the session's processes (``LIVE_FIXTURES``) and every test of a ``*_live.py`` file are
marked here; other modules mark themselves (``pytestmark``) or their tests. So that a
missing mark cannot go unnoticed, a test without it that starts a process anyway (in the
test, or in a fixture set up for it) fails, naming the command. A few in-process tests that
wait seconds on real sockets and the real clock (PostgreSQL through a black-hole proxy, the
change feed's ping) carry ``live`` too, each saying why: trio's MockClock cannot drive them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.live import Daemon, Sim, unique_email  # noqa: E402

LIVE_FIXTURES = frozenset({"sim", "gateway", "funded"})  # the session's processes, and what needs them


def pytest_collection_modifyitems(config, items):
    for item in items:
        if LIVE_FIXTURES.intersection(getattr(item, "fixturenames", ())) or item.path.stem.endswith("_live"):
            item.add_marker(pytest.mark.live)


# not processes the test needs, each run once per process: ctypes.util.find_library("c")
# (gatewayd.bodies) asks ldconfig; platform.platform() (the openai SDK's headers) runs uname -p
INCIDENTAL = ("/sbin/ldconfig", "ldconfig", "uname")


class _Spawned(pytest.fail.Exception):
    pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test not marked ``live`` may start no process (module docstring)."""
    if item.get_closest_marker("live") is not None:
        yield
        return
    execute_child, fork = subprocess.Popen._execute_child, os.fork

    def refuse(what):
        raise _Spawned(f"{item.nodeid} starts a process ({what}) but is not marked live: add "
                       "@pytest.mark.live (or pytestmark) so make test-unit leaves it out", pytrace=False)

    def refused_child(self, args, *rest, **kwargs):
        command = args if isinstance(args, str) else " ".join(map(str, args))
        if command.startswith(INCIDENTAL):
            return execute_child(self, args, *rest, **kwargs)
        refuse(command)

    subprocess.Popen._execute_child = refused_child  # type: ignore[method-assign]
    os.fork = lambda: refuse("os.fork")
    try:
        yield
    finally:
        subprocess.Popen._execute_child, os.fork = execute_child, fork  # type: ignore[method-assign]


@pytest.fixture(scope="session")
def sim():
    s = Sim()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def gateway(sim, tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("gateway"), sim.url)
    yield d
    d.stop()


@pytest.fixture(autouse=True)
def _shared_gateway_stays_sound(request):
    """After every test that used the session's daemon: ``gatewayctl audit`` is ok (no charge
    escaped its hold, every balance is payments - charges - holds), and the daemon logged no
    traceback meanwhile (a traceback is a gateway bug). The daemon is shared, so without this
    a test that breaks a rule fails some later test instead of itself."""
    if "gateway" not in request.fixturenames:
        yield
        return
    gateway = request.getfixturevalue("gateway")
    logged_before = len(gateway.output.lines)
    yield
    report = gateway.admin.audit()
    problems = report["problems"] + [p for a in report["accounts"] for p in a["problems"]] + [
        p for k in report["keys"] for p in k["problems"]]
    assert report["ok"] is True, f"after {request.node.nodeid}, the audit fails: {problems[:3]}"
    logged = "".join(gateway.output.lines[logged_before:])
    at = logged.find("Traceback")
    assert at < 0, f"during {request.node.nodeid}, the session's daemon logged a traceback:\n" + logged[
        max(0, at - 1500):at + 3000]


@pytest.fixture
def funded(gateway):
    """A fresh account with $10 paid and one unrestricted key: (account, key, secret)."""
    account = gateway.admin.account(unique_email())
    key = gateway.admin.key(account["id"])
    return account, key, key["secret"]


def _postgres_ready() -> bool:
    from tests import pg

    try:
        import gatewayd.store.postgres  # noqa: F401
    except ImportError:
        return False
    return pg.available()


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request, tmp_path):
    """Each store behind the one contract: the same test runs against a real SQLite file and a
    fresh PostgreSQL database made for this test, its schema copied from a migrated template
    (dropped when the run ends: tests/pg.py)."""
    if request.param == "sqlite":
        from gatewayd.store.sqlite import SQLiteStore

        s = SQLiteStore(str(tmp_path / "store.db"))
        try:
            yield s
        finally:
            await s.close()
        return
    if not _postgres_ready():
        pytest.skip("no PostgreSQL on 127.0.0.1:5432 (or psycopg missing)")
    from gatewayd.store.postgres import PostgresStore
    from tests import pg

    name, url = pg.create_database(migrated=True)
    s = await PostgresStore.open(url, pool_size=4)
    try:
        yield s
    finally:
        await s.close()
        pg.drop_database(name)
