"""Two PostgreSQL store instances on one fresh database: the races between instances."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

from tests import pg


@asynccontextmanager
async def two_postgres_stores(tmp_path) -> AsyncIterator[tuple]:
    """(a, b): two ``PostgresStore`` instances, as two gatewayd processes would have; the database
    is dropped afterwards."""
    from gatewayd.store.postgres import PostgresStore

    name, url = pg.create_database()
    a = await PostgresStore.open(url, pool_size=4, data_dir=tmp_path / "a")
    b = await PostgresStore.open(url, pool_size=4, data_dir=tmp_path / "b")
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()
        pg.drop_database(name)
