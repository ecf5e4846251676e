"""An instance's previous life, known locally and safely: slot files in the data dir.

A PostgreSQL instance that restarts (kill -9, crash, a ``--workers`` worker replaced)
should release the holds its previous process left at once rather than 15 s later. Who
that previous process was must never be guessed from names (host, socket path, worker
number): two live processes can share a name, and the newcomer would release the holds
of streams that are still running.

So each instance claims a slot in its data dir: ``instance-N.lock``, locked with an
exclusive ``flock`` for the whole life of the process. The kernel drops the lock when the
process ends, however it ends (kill -9 included). Hence:

- a slot whose lock is held belongs to a live process: the newcomer leaves it alone and
  tries the next number;
- a slot whose lock can be taken belongs to no live process: the instance id recorded
  beside it (``instance-N.id``) is a previous life, certainly dead, and its holds can be
  released at once.

The data dir must be the machine's own (not shared between machines), as for SQLite. The
slot files are opened without following links (``gatewayd.local_files``): a link planted
where one goes is refused, its target untouched.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import attrs

from gatewayd.local_files import open_nofollow, read_text_nofollow, write_private

MAX_SLOTS = 1024  # more live gatewayd processes than this on one data dir is a mistake


class SlotsExhausted(Exception):
    """Every slot file in the data dir is locked by a live process."""


@attrs.define
class Slot:
    directory: Path
    number: int
    fd: int | None
    previous: str | None  # the instance id of the slot's previous (dead) owner, if any

    @property
    def name(self) -> str:
        return f"{self.directory}|{self.number}"

    def record(self, instance_id: str) -> None:
        """Write this process's instance id for the next owner (atomically: a crash leaves the old one or the new)."""
        final = self.directory / f"instance-{self.number}.id"
        tmp = final.with_suffix(".id.tmp")
        write_private(tmp, (instance_id + "\n").encode(), fsync=True)
        os.replace(tmp, final)  # replaces a link at ``final`` itself, never its target

    def release(self) -> None:
        """Give the slot up (the process is stopping); its recorded id stays for the next owner."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def claim_slot(directory: str | Path, first: int = 0) -> Slot:
    """The first free slot from ``first`` on (a ``--workers`` worker starts at its own number)."""
    where = Path(directory).resolve()
    where.mkdir(parents=True, exist_ok=True)
    for number in range(first, first + MAX_SLOTS):
        fd = open_nofollow(where / f"instance-{number}.lock", os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # a live process owns this one
            continue
        try:
            previous = read_text_nofollow(where / f"instance-{number}.id").strip() or None
        except FileNotFoundError:
            previous = None
        except BaseException:
            os.close(fd)
            raise
        return Slot(where, number, fd, previous)
    raise SlotsExhausted(f"{MAX_SLOTS} gatewayd processes already hold slots in {where}")
