"""Throwaway PostgreSQL databases on the machine's server (127.0.0.1:5432, trust auth).

Other people share this server, so every database made here has a unique name
(``gwtest_<pid>_<random>``) and is dropped when the test (or the run) is done.

Most in-process PostgreSQL tests want a database with gatewayd's schema
(``create_database(migrated=True)``). Making one is copying this process's migrated
template (``CREATE DATABASE ... TEMPLATE``: some 8 MB written to the server's WAL, 30 ms
on a quiet disk, 300 ms and more on a busy one), so a thread of this process copies a
few ahead while the tests run, and a test takes one ready.
"""

from __future__ import annotations

import atexit
import functools
import os
import queue
import secrets
import threading

ADMIN_URL = os.environ.get("GATEWAY_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
SPARES = 2  # migrated databases kept ready
_made: set[str] = set()


@functools.cache  # asked before every PostgreSQL test; the server does not come and go in a run
def available() -> bool:
    try:
        import psycopg

        with psycopg.connect(ADMIN_URL, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True
    except Exception:  # noqa: BLE001 - any failure means: no server to test against here
        return False


def create_database(template: str | None = None, *, migrated: bool = False) -> tuple[str, str]:
    """A new empty (or ``template``-copied) database: (name, url). ``migrated``: with
    gatewayd's schema already in place, one of the copies made ahead (module docstring)."""
    if migrated:
        name = _spares.take()
        return name, url_of(name)
    return _create(template)


def _admin(statement: str) -> None:
    """One statement on the server's maintenance database (CREATE, ALTER and DROP DATABASE
    run outside a transaction)."""
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(statement)


def _create(template: str | None) -> tuple[str, str]:
    name = f"gwtest_{os.getpid()}_{secrets.token_hex(4)}"
    _admin(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    _made.add(name)
    return name, url_of(name)


class _Spares:
    """Copies of a migrated template, made by a thread of their own ahead of need.

    The thread starts when a test first asks for one (a run without PostgreSQL tests
    makes nothing) and stops at exit; an error of its own is raised in the test that
    waits for its copy."""

    def __init__(self) -> None:
        self.ready: queue.Queue[str] = queue.Queue(maxsize=SPARES)
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.failure: BaseException | None = None

    def take(self) -> str:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="pg-spares", daemon=True)
            self.thread.start()
        while True:
            try:
                return self.ready.get(timeout=0.5)
            except queue.Empty:
                if not self.thread.is_alive():
                    raise RuntimeError("the thread making test databases stopped") from self.failure

    def _run(self) -> None:
        from gatewayd.store.postgres import migrate

        try:
            template, url = _create(None)
            migrate(url)
            # a copy waits while anything (autovacuum) is connected to its template
            _admin(f'ALTER DATABASE "{template}" WITH ALLOW_CONNECTIONS false')
            while not self.stopping.is_set():
                name, _ = _create(template)
                while not self._offer(name):
                    if self.stopping.is_set():
                        return
        except BaseException as e:  # noqa: BLE001 - handed to the test waiting in take()
            self.failure = e

    def _offer(self, name: str) -> bool:
        try:
            self.ready.put(name, timeout=0.2)
            return True
        except queue.Full:
            return False

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(10)


_spares = _Spares()



def url_of(name: str) -> str:
    return f"{ADMIN_URL.rsplit('/', 1)[0]}/{name}"


def drop_database(name: str) -> None:
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _made.discard(name)


@atexit.register
def _drop_leftovers() -> None:
    _spares.stop()
    for name in list(_made):
        try:
            drop_database(name)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
