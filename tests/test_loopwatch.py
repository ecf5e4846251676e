"""The slow-step instrument (GATEWAYD_SLOW_STEP_MS): it names a step that held the loop, and only that."""

from __future__ import annotations

import logging
import time

import pytest
import trio

from gatewayd import loopwatch


def busy(ms: float) -> None:
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass


async def hog() -> None:
    busy(30)  # CPU on the loop, not a sleep
    await trio.sleep(0)


async def polite() -> None:
    for _ in range(5):
        await trio.sleep(0.01)  # sleeping is not holding the loop


async def main() -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(polite, name="polite")
        nursery.start_soon(hog, name="hog")


def test_a_step_over_the_threshold_is_logged_with_its_task(caplog):
    watch = loopwatch.SlowSteps(threshold_ms=10)
    with caplog.at_level(logging.WARNING, logger="gatewayd.loopwatch"):
        trio.run(main, instruments=[watch])
    lines = [r.getMessage() for r in caplog.records if r.name == "gatewayd.loopwatch"]
    assert watch.count == 1, lines
    assert len(lines) == 1 and "in task hog" in lines[0]
    assert "test_loopwatch.py" in lines[0] and "in hog" in lines[0]  # where it suspended next
    assert watch.worst_s >= 0.03


def test_environment_switch(monkeypatch):
    monkeypatch.delenv(loopwatch.ENV, raising=False)
    assert loopwatch.from_environment() == []
    monkeypatch.setenv(loopwatch.ENV, "2.5")
    [watch] = loopwatch.from_environment()
    assert watch.threshold_s == pytest.approx(0.0025)
    monkeypatch.setenv(loopwatch.ENV, "soon")
    with pytest.raises(SystemExit, match="GATEWAYD_SLOW_STEP_MS"):
        loopwatch.from_environment()
