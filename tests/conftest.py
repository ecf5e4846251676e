"""Session-wide live processes: one simulator and one gateway for the suite.

Tests that need a daemon of their own (restarts, kill -9, other config) start one with
``tests.live.Daemon`` directly.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.live import Daemon, Sim, unique_email  # noqa: E402


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
def _shared_gateway_money_holds(request):
    """After every test that used the session's daemon: ``gatewayctl audit`` is ok (no charge
    escaped its hold, every balance is payments - charges - holds). The daemon is shared, so
    without this a test that breaks the rule fails some later test instead of itself."""
    yield
    if "gateway" not in request.fixturenames:
        return
    gateway = request.getfixturevalue("gateway")
    report = gateway.admin.audit()
    problems = report["problems"] + [p for a in report["accounts"] for p in a["problems"]] + [
        p for k in report["keys"] for p in k["problems"]]
    assert report["ok"] is True, f"after {request.node.nodeid}, the audit fails: {problems[:3]}"


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
    fresh PostgreSQL database made for this test (and dropped after it)."""
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

    name, url = pg.create_database()
    s = await PostgresStore.open(url, pool_size=4)
    try:
        yield s
    finally:
        await s.close()
        pg.drop_database(name)
