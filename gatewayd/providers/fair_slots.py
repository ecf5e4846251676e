"""The upstream pool's connection slots, shared fairly between accounts.

The pool has ``max_connections`` slots for every account together. With a plain semaphore
one account holding many slow streams could take them all, and every other account's
request then waited for a slot until its pool timeout (issue 20: 1,000 slow streams of one
account, another account's request a 502 after 10 s). Streams cannot be taken back once
started, so fairness has to be kept while slots are handed out:

- **an account never holds more slots than it leaves free**: it may take a free slot only
  while it holds fewer slots than are free. Alone, an account can use half of the pool;
  beside it another account still finds as many free slots as the first holds, and can
  itself use half of those, and so on: an account at its share never makes another
  account's request wait.
- **waiters are served fewest-held first**: when every slot is taken (many accounts, each
  within its share), a freed slot goes to the waiting account that holds the fewest,
  first come first served within an account. A waiter that already holds as many slots as
  are free keeps waiting even then: those slots are kept for an account that holds fewer.

Requests that belong to no account (``owner`` None: tests, tools) are bounded by the total
only. Taking a free slot is O(1); a release with accounts waiting looks at each waiting
account once.
"""

from __future__ import annotations

from collections import deque
from typing import Hashable

import trio

Owner = Hashable | None


class _Waiter:
    __slots__ = ("owner", "event", "granted")

    def __init__(self, owner: Owner) -> None:
        self.owner = owner
        self.event = trio.Event()
        self.granted = False


class FairSlots:
    def __init__(self, total: int) -> None:
        self.total = total
        self.in_use = 0
        self.held: dict[Owner, int] = {}  # slots in use per owner (owners holding none are absent)
        self._waiting: dict[Owner, deque[_Waiter]] = {}  # per owner, first come first

    def _may_take(self, owner: Owner) -> bool:
        free = self.total - self.in_use
        return free > 0 and (owner is None or self.held.get(owner, 0) < free)

    def _take(self, owner: Owner) -> None:
        self.in_use += 1
        self.held[owner] = self.held.get(owner, 0) + 1

    def try_take(self, owner: Owner) -> bool:
        """Take a slot if ``owner`` may have one now (no waiter is ever passed over: see ``release``)."""
        if not self._may_take(owner):
            return False
        self._take(owner)
        return True

    async def take(self, owner: Owner, timeout_s: float) -> bool:
        """A slot within ``timeout_s``: True once taken, False when the time ran out."""
        if self.try_take(owner):
            return True
        waiter = _Waiter(owner)
        self._waiting.setdefault(owner, deque()).append(waiter)
        try:
            with trio.move_on_after(timeout_s):
                await waiter.event.wait()
        except BaseException:
            if waiter.granted:  # given a slot in the same instant it was cancelled: give it back
                self.release(owner)
            else:
                self._forget(waiter)
            raise
        if not waiter.granted:
            self._forget(waiter)
        return waiter.granted

    def release(self, owner: Owner) -> None:
        self.in_use -= 1
        left = self.held[owner] - 1
        if left:
            self.held[owner] = left
        else:
            del self.held[owner]
        self._serve_waiters()

    def _serve_waiters(self) -> None:
        """Hand free slots to waiting owners that may take them, the one holding fewest first."""
        while self._waiting:
            eligible = [owner for owner in self._waiting if self._may_take(owner)]
            if not eligible:
                return
            owner = min(eligible, key=lambda o: self.held.get(o, 0))
            queue = self._waiting[owner]
            waiter = queue.popleft()
            if not queue:
                del self._waiting[owner]
            self._take(owner)
            waiter.granted = True
            waiter.event.set()

    def _forget(self, waiter: _Waiter) -> None:
        queue = self._waiting.get(waiter.owner)
        if queue is None:
            return
        try:
            queue.remove(waiter)
        except ValueError:
            return
        if not queue:
            del self._waiting[waiter.owner]
