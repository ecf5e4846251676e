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
    import gc

    monkeypatch.setattr(gc, "callbacks", [])
    monkeypatch.delenv(loopwatch.ENV, raising=False)
    assert loopwatch.from_environment() == [] and gc.callbacks == []
    monkeypatch.setenv(loopwatch.ENV, "2.5")
    loopwatch.from_environment()
    [watch] = loopwatch.from_environment()
    assert watch.threshold_s == pytest.approx(0.0025)
    [hook] = gc.callbacks  # one collector hook however often it is asked for
    assert isinstance(hook, loopwatch.SlowCollections)
    monkeypatch.setenv(loopwatch.ENV, "soon")
    with pytest.raises(SystemExit, match="GATEWAYD_SLOW_STEP_MS"):
        loopwatch.from_environment()


def test_startup_heap_is_frozen_out_of_collections():
    import gc

    try:
        frozen = loopwatch.freeze_startup_heap()
        assert frozen > 1000  # this test process's modules at least
        young = [[i] for i in range(100)]  # made after the freeze: still collected normally
        # nothing joined the frozen objects since (the count may fall: a frozen object another
        # thread of this process frees leaves it), and the new ones are in a collected generation
        assert gc.get_freeze_count() <= frozen
        assert any(o is young[0] for generation in range(3) for o in gc.get_objects(generation))
    finally:
        gc.unfreeze()


def test_a_slow_collection_is_logged(caplog):
    import gc

    hook = loopwatch.SlowCollections(threshold_ms=0)
    gc.callbacks.append(hook)
    try:
        with caplog.at_level(logging.WARNING, logger="gatewayd.loopwatch"):
            gc.collect()
    finally:
        gc.callbacks.remove(hook)
    assert any("slow garbage collection" in r.getMessage() and "generation 2" in r.getMessage()
               for r in caplog.records)
