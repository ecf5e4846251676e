"""A debug instrument that reports every task step holding the event loop too long.

One process serves every request and stream on one trio loop, so a step that runs for
10 ms (a big JSON parse, a tokenizer pass, a slow store call made synchronously) delays
every other client by 10 ms. Set ``GATEWAYD_SLOW_STEP_MS`` (for example ``2``) and
``gatewayd serve`` logs, at WARNING on the ``gatewayd.loopwatch`` logger, each task step
that ran longer: its duration, the task, and where the task next suspended (the line
just after the slow code). ``bench/hot_path.py`` turns it on and counts these lines.

Off by default: the instrument costs two clock reads per task step.
"""

from __future__ import annotations

import gc
import logging
import os
import time

import trio

log = logging.getLogger("gatewayd.loopwatch")

ENV = "GATEWAYD_SLOW_STEP_MS"


def where_suspended(task: trio.lowlevel.Task) -> str:
    """``file:line in function`` of the innermost frame, outside trio, the task is suspended
    in ("?" once it ended): the line just after the code that held the loop."""
    coro = task.coro
    found = None
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None and "/trio/" not in frame.f_code.co_filename:
            found = frame
        nxt = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None) or getattr(coro, "gi_yieldfrom", None)
        if nxt is None or not hasattr(nxt, "send"):
            break
        coro = nxt
    if found is None:
        return "?"
    code = found.f_code
    return f"{_short(code.co_filename)}:{found.f_lineno} in {code.co_name}"


def _short(filename: str) -> str:
    parts = filename.split("/")
    return "/".join(parts[-2:])


class SlowSteps(trio.abc.Instrument):
    """Times each task step; logs the ones that used more than ``threshold_ms`` of CPU.

    CPU time of the loop's thread, not wall time: on a busy machine the kernel can
    preempt a 50 us step for 20 ms, and that is not the step's doing. The wall time is
    logged beside it.
    """

    def __init__(self, threshold_ms: float) -> None:
        self.threshold_s = threshold_ms / 1000
        self.started_cpu = 0.0
        self.started_wall = 0.0
        self.count = 0
        self.worst_s = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.started_cpu = time.thread_time()
        self.started_wall = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        took = time.thread_time() - self.started_cpu
        if took > self.threshold_s:
            self.count += 1
            self.worst_s = max(self.worst_s, took)
            log.warning("slow task step: %.1f ms CPU (%.1f ms wall) in task %s, next suspended at %s",
                        took * 1000, (time.perf_counter() - self.started_wall) * 1000, task.name,
                        where_suspended(task))


class SlowCollections:
    """A ``gc.callbacks`` hook: logs each garbage collection that used more than the threshold
    of CPU, so a slow task step can be told apart from the collector running inside it."""

    def __init__(self, threshold_ms: float) -> None:
        self.threshold_s = threshold_ms / 1000
        self.started = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.started = time.thread_time()
            return
        took = time.thread_time() - self.started
        if took > self.threshold_s:
            log.warning("slow garbage collection: %.1f ms CPU, generation %d, %d collected",
                        took * 1000, info.get("generation", -1), info.get("collected", 0))


def from_environment() -> list[trio.abc.Instrument]:
    """The instruments ``GATEWAYD_SLOW_STEP_MS`` asks for (none when unset); it also hooks
    the garbage collector (``SlowCollections``)."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return []
    try:
        threshold = float(value)
    except ValueError:
        raise SystemExit(f"{ENV} must be a number of milliseconds (got {value!r})") from None
    gc.callbacks[:] = [c for c in gc.callbacks if not isinstance(c, SlowCollections)] + [SlowCollections(threshold)]
    return [SlowSteps(threshold)]


# Allocations (net of frees) between two young-generation collections. Python's default,
# 700, is reached within a few requests once dozens are in flight, and those passes find
# nothing to free (a request's objects die by reference counting; measured: no object
# collected over thousands of requests at 64 connections), so at 64 connections the
# collector cost ~0.17 ms a request, nothing at 1 connection. 20,000 keeps that off the
# hot path; reference cycles (exceptions with their tracebacks) wait a little longer.
YOUNG_GENERATION_THRESHOLD = 20_000


def freeze_startup_heap() -> int:
    """Move every object alive once the daemon is up into the collector's permanent generation,
    and collect the young generation less often (``YOUNG_GENERATION_THRESHOLD``).

    Python's full (oldest-generation) collection walks every container object: the
    daemon's modules, config, catalogue and directory are some 70,000 of them, and each
    full collection held the loop for 40-130 ms on the bench machine (loop-watch caught
    it as the longest step under load). None of those objects becomes garbage while the
    daemon serves, so the collector need not look at them again (``gc.freeze``, meant for
    exactly this). Returns how many objects were frozen.
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, older, oldest)
    return gc.get_freeze_count()
