"""The daemon's files on this machine: readable by its own user only, and no link planted among them.

The data dir holds the SQLite database (the console's session-signing secret, every key's
hash, every balance), the demo key, the prices file, the instance slot files and, by
default, the admin socket. A local user who can read the database can sign a console
session for any account; one who can add an entry to the directory can plant a symbolic
link that the daemon (perhaps root) would follow and write through. Hence:

- ``serve`` runs with umask 0077: whatever it creates is its own user's only;
- the data dir is created 0700; start-up refuses (one line, exit 2) a data dir owned by
  another user or writable by its group or by everyone, and tightens one readable by others
  to 0700 (with a warning). After that check only the daemon's own user (and root) can add,
  rename or remove an entry in it, so no one else can race the checks below;
- files are opened with ``O_NOFOLLOW``: a link where a file belongs is refused, its target
  untouched. SQLite opens its files by path (Python's ``sqlite3`` cannot pass
  ``SQLITE_OPEN_NOFOLLOW``), so ``check_database_files`` looks at each with ``lstat`` first and
  creates a new database file itself (``O_EXCL | O_NOFOLLOW``, 0600). What remains: SQLite
  later opens those paths (and creates ``-wal``/``-shm``) following links, so a link swapped in
  between the check and the open would be followed; only the daemon's own user or root can do
  that in a directory that passed ``check_directory``.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

DAEMON_UMASK = 0o077
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


class LocalFileRefused(Exception):
    """A data dir or a file in it the daemon will not use; one line naming it and what to do."""


def prepare_data_dir(path: str | os.PathLike, *, tighten: bool) -> list[str]:
    """Create the data dir (0700) or check the one there; returns what was tightened (to log).
    ``serve`` checks before logging is set up (``tighten=False``: a refusal is its one line),
    the daemon again once it logs (``tighten=True``)."""
    Path(path).mkdir(mode=0o700, parents=True, exist_ok=True)
    return check_directory(path, "data dir", tighten=tighten)


def check_directory(path: str | os.PathLike, what: str, *, tighten: bool = False) -> list[str]:
    """Refuse a directory another user owns or others may write to; with ``tighten``, take
    read access away from others. A data dir given as a link is followed (an operator's
    choice, as systemd's ``StateDirectory`` makes), unless another user owns the link."""
    try:
        link = os.lstat(path)
        st = os.stat(path)
    except FileNotFoundError:
        raise LocalFileRefused(f"{what} {path} does not exist") from None
    euid = os.geteuid()
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (euid, 0):
        raise LocalFileRefused(f"{what} {path} is a symbolic link owned by uid {link.st_uid}, not by the user "
                               f"gatewayd runs as (uid {euid}): give the real directory")
    if not stat.S_ISDIR(st.st_mode):
        raise LocalFileRefused(f"{what} {path} is not a directory")
    mode = stat.S_IMODE(st.st_mode)
    shared = _service_group_dir(st, mode)
    if st.st_uid != euid and not (shared and st.st_uid == 0):
        raise LocalFileRefused(f"{what} {path} is owned by uid {st.st_uid}, not by the user gatewayd runs as "
                               f"(uid {euid}): another user could read the database or plant links in it "
                               "(chown it, or choose another --data-dir)")
    if mode & 0o002 or (mode & 0o020 and not shared):
        raise LocalFileRefused(f"{what} {path} is writable by its group or by everyone (mode {mode:04o}): "
                               f"others could plant links in it (chmod 700 {path}; a directory shared with "
                               "gatewayd's own group is accepted with the setgid bit: chmod 2770)")
    if shared:  # the group is gatewayd's own: only what others may do is taken away
        if tighten and mode & 0o007 and st.st_uid == euid:
            os.chmod(path, mode & ~0o007)
            return [f"{what} {path} was mode {mode:04o}, now {mode & ~0o007:04o}"]
        return []
    if tighten and mode & 0o077:
        os.chmod(path, 0o700)
        return [f"{what} {path} was mode {mode:04o}, now 0700"]
    return []


def _service_group_dir(st: os.stat_result, mode: int) -> bool:
    """A directory shared with the service's own group, as Kubernetes' ``fsGroup`` makes a
    volume (mode 2775 or 2770, group = the pod's fsGroup, which the process belongs to): the
    setgid bit keeps every file made in it in that group, and only members of the group
    (gatewayd's own) may write. Group write is accepted on such a directory only."""
    return bool(mode & stat.S_ISGID) and (st.st_gid == os.getegid() or st.st_gid in os.getgroups())


def open_nofollow(path: str | os.PathLike, flags: int, mode: int = 0o600) -> int:
    """``os.open`` that refuses a symbolic link in the last component (``LocalFileRefused``)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise LocalFileRefused(f"{path} is a symbolic link: gatewayd does not follow links among its files "
                                   "(remove it)") from None
        raise


def read_text_nofollow(path: str | os.PathLike) -> str:
    """The file's text; ``FileNotFoundError`` when there is none, ``LocalFileRefused`` for a link."""
    fd = open_nofollow(path, os.O_RDONLY)
    with os.fdopen(fd, "r", encoding="utf-8") as f:
        return f.read()


def write_private(path: str | os.PathLike, data: bytes, *, fsync: bool = False) -> None:
    """Create or overwrite a file (0600) without following a link planted at ``path``."""
    fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def check_database_files(path: str | os.PathLike) -> list[str]:
    """Before SQLite opens ``path`` by name: its directory passes ``check_directory``, the
    database and its ``-wal``/``-shm``/``-journal`` are regular files of ours (never links),
    readable by us only; a missing database is created here, 0600, without following a link.
    Returns what was tightened (to log)."""
    path = str(path)
    notes = check_directory(os.path.dirname(os.path.abspath(path)), "database directory")
    for name in (path, *(path + suffix for suffix in SQLITE_COMPANIONS)):
        try:
            st = os.lstat(name)
        except FileNotFoundError:
            if name == path:
                os.close(open_nofollow(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            continue
        if stat.S_ISLNK(st.st_mode):
            raise LocalFileRefused(f"{name} is a symbolic link: gatewayd opens its database only as a regular file "
                                   "(remove the link, or set [database] url to the real file)")
        if not stat.S_ISREG(st.st_mode):
            raise LocalFileRefused(f"{name} is not a regular file")
        if st.st_uid != os.geteuid():
            raise LocalFileRefused(f"{name} is owned by uid {st.st_uid}, not by the user gatewayd runs as "
                                   f"(uid {os.geteuid()})")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            fd = open_nofollow(name, os.O_RDONLY)
            try:
                os.fchmod(fd, 0o600)
            finally:
                os.close(fd)
            notes.append(f"{name} was mode {mode:04o}, now 0600")
    return notes
