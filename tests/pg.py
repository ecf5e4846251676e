"""Throwaway PostgreSQL databases on the machine's server (127.0.0.1:5432, trust auth).

Other people share this server, so every database made here has a unique name
(``gwtest_<pid>_<random>``) and is dropped when the test (or the run) is done.
"""

from __future__ import annotations

import atexit
import os
import secrets

ADMIN_URL = os.environ.get("GATEWAY_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
_made: set[str] = set()


def available() -> bool:
    try:
        import psycopg

        with psycopg.connect(ADMIN_URL, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True
    except Exception:  # noqa: BLE001 - any failure means: no server to test against here
        return False


def create_database(template: str | None = None) -> tuple[str, str]:
    """A new empty (or ``template``-copied) database: (name, url)."""
    import psycopg

    name = f"gwtest_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    _made.add(name)
    return name, url_of(name)


def url_of(name: str) -> str:
    return f"{ADMIN_URL.rsplit('/', 1)[0]}/{name}"


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _made.discard(name)


@atexit.register
def _drop_leftovers() -> None:
    for name in list(_made):
        try:
            drop_database(name)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
