"""Graceful shutdown, the relay's half: cut upstream reads when the grace period ends.

On SIGTERM hypercorn stops accepting and waits for open requests; if the relay left the
cut to hypercorn, a stream would just be cancelled: the client's connection dropped
mid-chunk with no word why, and the usage row would read like a client disconnect. So
every upstream read runs inside a cancel scope registered here, and ``begin`` moves all
of them (and every later one) to the end of the grace period. A read cut that way lets
the relay send the client an error event in its format and settle the request with
status ``shutdown``; hypercorn's own cut-off is set a little later as a backstop.

A scope is entered and left within one read, never across a ``yield`` of the relay's
stream generator, as trio requires.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator

import trio

BACKSTOP_S = 5.0  # hypercorn's graceful_timeout = grace + this


class Drain:
    """The daemon's shutdown as the request path sees it: built by the server, passed to the
    relay (upstream reads) and to ``gatewayd.ops.Readiness`` (``draining``)."""

    def __init__(self) -> None:
        self.draining = False  # shutdown started: /readyz answers 503 from then on
        self.cut_at = math.inf
        self._reads: set[trio.CancelScope] = set()

    @property
    def stopping(self) -> bool:
        return self.cut_at != math.inf

    @contextmanager
    def read(self) -> Iterator[trio.CancelScope]:
        """One upstream read; ``scope.cancelled_caught`` afterwards means the grace period ran out."""
        with trio.CancelScope(deadline=self.cut_at) as scope:
            self._reads.add(scope)
            try:
                yield scope
            finally:
                self._reads.discard(scope)

    def begin(self, grace_s: float) -> None:
        """Shutdown started: reads still going at ``now + grace_s`` are cut."""
        self.cut_at = min(self.cut_at, trio.current_time() + max(grace_s, 0.0))
        for scope in self._reads:
            scope.deadline = min(scope.deadline, self.cut_at)
