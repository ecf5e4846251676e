"""trio's MockClock for in-process tests whose store works in worker threads.

``MockClock(autojump_threshold=t)`` jumps to the next deadline once every task has waited
``t`` seconds of real time. A task waiting for a worker thread (SQLite's writer, a PostgreSQL
call) counts as waiting, so on a busy machine, where a thread may take longer than ``t``, the
clock jumped past the store's own deadlines and a test failed for no fault of the code (one in
several runs of ``make test`` beside another load). :func:`thread_aware_clock` jumps only while
no worker thread is running: time stands still while the store works, however long it takes.
"""

from __future__ import annotations

import functools

import pytest
import trio
import trio.testing


def thread_aware_clock(monkeypatch: pytest.MonkeyPatch, autojump_threshold: float = 0.02) -> trio.testing.MockClock:
    """A MockClock that never autojumps while a ``trio.to_thread.run_sync`` call is running (for
    this test: ``trio.to_thread.run_sync`` counts the threads it runs). MockClock is final, so its
    autojump (the hook trio's run loop calls, trio/_core/_mock_clock.py) is wrapped on the instance."""
    clock = trio.testing.MockClock(autojump_threshold=autojump_threshold)
    threads = 0
    autojump = clock._autojump

    def autojump_unless_a_thread_runs() -> None:
        if threads == 0:
            autojump()

    clock._autojump = autojump_unless_a_thread_runs  # type: ignore[method-assign]
    real = trio.to_thread.run_sync

    @functools.wraps(real)
    async def counted(*args, **kwargs):
        nonlocal threads
        threads += 1
        try:
            return await real(*args, **kwargs)
        finally:
            threads -= 1

    monkeypatch.setattr(trio.to_thread, "run_sync", counted)
    return clock
