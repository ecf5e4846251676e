"""No test asserts how fast something happened (issue 30, point 6).

A bound on a duration fails on a busy machine (CI shares two cores with whatever else runs),
so a test asserts what happened and prints how long it took; ``bench/`` measures speed. What
this reads, in every test file: an ``assert`` that compares a reading of the real clock
(``time.monotonic()``, ``time.perf_counter()``, ``time.time()``), or a name assigned from one
(``took = time.monotonic() - start``), with anything but a liveness bound: ``LIVENESS_S`` or a
``deadline`` (a wait for what must happen at all, as ``tests.faults.wait_until`` does).
trio's clock is not read here: under ``MockClock`` it is virtual, and deterministic.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
CLOCKS = {("time", "monotonic"), ("time", "perf_counter"), ("time", "time")}
LIVENESS_NAMES = {"LIVENESS_S", "deadline"}


def _reads_clock(node: ast.AST, timed: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and isinstance(sub.func.value, ast.Name):
            if (sub.func.value.id, sub.func.attr) in CLOCKS:
                return True
        if isinstance(sub, ast.Name) and sub.id in timed:
            return True
    return False


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def timing_asserts(source: str) -> list[int]:
    """Line numbers of the asserts that bound a duration of the real clock."""
    tree = ast.parse(source)
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        timed: set[str] = set()  # names assigned from a clock reading, in this function
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and _reads_clock(node.value, set()) and not isinstance(node.value, ast.Call):
                timed |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(function):
            if not isinstance(node, ast.Assert):
                continue
            for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                sides = [compare.left, *compare.comparators]
                if any(_reads_clock(side, timed) for side in sides) and not _names(compare) & LIVENESS_NAMES:
                    found.append(node.lineno)
                    break
    return sorted(set(found))


def test_no_test_asserts_a_duration():
    offenders = {}
    for path in sorted(TESTS.glob("*.py")):
        lines = timing_asserts(path.read_text())
        if lines:
            offenders[path.name] = lines
    assert offenders == {}, f"asserts on the real clock (assert what happened; bench/ measures speed): {offenders}"


def test_the_check_sees_a_duration_and_leaves_liveness_alone():
    timed = '''
import time
def test_a():
    start = time.monotonic()
    work()
    assert time.monotonic() - start < 2
def test_b():
    took = time.monotonic() - start
    assert took < 1.5, took
def test_c():
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline
    assert time.monotonic() - start < LIVENESS_S
def test_d():
    now = time.monotonic()
    assert len(items) == 3
'''
    assert timing_asserts(timed) == [6, 9]
