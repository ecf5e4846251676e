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


@pytest.fixture
def funded(gateway):
    """A fresh account with $10 paid and one unrestricted key: (account, key, secret)."""
    account = gateway.admin.account(unique_email())
    key = gateway.admin.key(account["id"])
    return account, key, key["secret"]
