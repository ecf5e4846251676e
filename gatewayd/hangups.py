"""The daemon's own tasks: what is left of a request once its client has gone.

A client that hangs up ends its request at once: its handler returns and its concurrency
slots are free within the second. What the provider still owes is not the client's handler's
to wait for, so what could outlive the client runs here, in tasks the daemon owns, from the
start (a task cannot be handed over mid-read):

- a stream after its status line is forwarded from here (:mod:`gatewayd.reply`); once its
  client left, it is read on for at most ``[server] hangup_grace_s`` (2 s), only to catch a
  terminal event already on its way, then closed, so the provider stops generating; it is
  charged the provider's usage if that came, else what was produced (``gatewayd.billing.cut``);
- a non-streamed attempt at a provider that finishes and bills an answer whatever the client
  does (docs/billing.md, "A client that hangs up"; ``gatewayd.failover``) runs here; once its
  client left it is read to its end and charged at the provider's own usage.

Each task is bounded (the grace, the idle timeout, the shutdown drain's cut) and settles its
tab on every way out. The server runs :meth:`Hangups.run` in its nursery and waits for
:meth:`Hangups.wait_idle` before it stops, so a shutdown settles them too. A relay outside
a daemon (a test of the relay alone) runs them as trio system tasks, which its run owns.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any, Awaitable, Callable

import trio

log = logging.getLogger("gatewayd.hangups")


class Hangups:
    """The tasks that may outlive their request's client (module doc)."""

    def __init__(self, grace_s: float = 2.0) -> None:
        self.grace_s = grace_s  # [server] hangup_grace_s, replaced on a config reload
        self._nursery: trio.Nursery | None = None
        self._open = 0
        self._idle = trio.Event()
        self._idle.set()

    @property
    def open(self) -> int:
        """Tasks still running."""
        return self._open

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The daemon's nursery for these tasks; runs until the server cancels it (after
        :meth:`wait_idle`)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    def start(self, work: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``work(*args)`` in a task the daemon owns, with the caller's context (its
        request's trace)."""
        self._open += 1
        if self._idle.is_set():
            self._idle = trio.Event()
        if self._nursery is not None:
            self._nursery.start_soon(self._guarded, work, args)
        else:
            trio.lowlevel.spawn_system_task(self._guarded, work, args, context=contextvars.copy_context())

    async def wait_idle(self) -> None:
        """Until every task started has finished (each is bounded: see the module doc)."""
        await self._idle.wait()

    async def _guarded(self, work: Callable[..., Awaitable[Any]], args: tuple) -> None:
        try:
            await work(*args)
        except Exception as e:  # noqa: BLE001 - each task settles its own money; a fault left here is ours
            log.error("internal error in a task the daemon owns (a stream, or what a client left): %s", type(e).__name__,
                      exc_info=e)
        finally:
            self._open -= 1
            if self._open == 0:
                self._idle.set()
