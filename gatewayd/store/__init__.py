"""Persistence behind one contract: named operations with typed records, two stores.

``open_store(config)`` picks the store from ``[database] url``: ``sqlite:///path`` (the
embedded default, one process: ``gatewayd.store.sqlite``) or ``postgresql://...`` (any
number of instances on one database: ``gatewayd.store.postgres``). Nothing outside this
package writes SQL or sees a ``sqlite3`` / ``psycopg`` type. Every method below is a
coroutine unless marked; accounts and keys travel as ``gatewayd.records.Account`` /
``Key`` (the directory's cached objects), other values are the frozen records of
``gatewayd.store.base``. ``gatewayd.store.contract.Store`` is the same list as a
``typing.Protocol`` that mypy holds both stores to.

Lifecycle
    ``open_store(config)`` (migrations applied, this instance registered),
    ``close()``, ``maintain()`` (run forever in the nursery: heartbeat, lazy hold rows,
    release of dead instances' holds), ``flush()`` (wait for queued writes),
    ``kind`` ("sqlite" | "postgres"), ``instance_id``, ``ping()`` (readiness).
Directory (accounts, keys)
    ``load_directory() -> (accounts, keys)``, ``load_account(id)``, ``load_key(id)``,
    ``refresh_balance(account)`` / ``refresh_key(key)`` / ``refresh_keys(keys)`` (re-read money
    fields from the truth; a no-op where the process is the truth), ``insert_account(account)``
    (``EmailTaken``), ``update_account(id, name=, timezone=)``, ``set_account_max_concurrent``, ``set_password_hash``,
    ``replace_password_hash(id, old, new) -> bool`` (compare and set),
    ``set_groups``, ``set_embedding_models``, ``add_payment(account, amount, note) -> Payment``
    (the operator's), ``record_payment(account, amount, note, source=, reference=) -> (Payment,
    credited)`` (exactly once per source and reference; refunds and disputes negative),
    ``payments(id)``; redemption codes (``gatewayd.store.redemption_codes``): ``insert_codes``,
    ``redemption_codes()``, ``revoke_code(id, now)``, ``redeem_code(account, hash, now)`` (the code's
    row and its payment in one transaction: once); ``insert_key(key, max_keys)`` (``TooManyKeys``: count and insert
    in one transaction, serialised per account), ``update_key(key)`` (``KeyRevoked``),
    ``set_key_status(id, status) -> stored status`` (a revoke always wins).
Money
    ``reserve(account, key, amount, request_id=, model=, endpoint=, stream=) -> Hold |
    Refusal``: the atomic check-and-hold (balance - open holds >= amount, and the same
    for the key's spend limit); ``StoreUnavailable`` when the database cannot be
    reached (the caller answers 503, nothing held). ``settle(hold, Settlement)``:
    charge + release + usage row + key spend + last-used time in one transaction,
    exactly once per hold; it retries while the database is away (bounded, see
    docs/operations.md). ``audit(cached_accounts, cached_keys) -> dict``.
Usage
    ``usage_rows(UsageQuery, limit)``, ``usage_page(UsageQuery, page, page_size)``,
    ``usage_batch(UsageQuery, before_id, limit)``, ``models_used(account_id)``,
    ``spend_by_quarter_hour(account_id, since)``; for the admin API's filtered export and
    reports: ``usage_export(UsageFilter, before_id=, limit=) -> (rows, next_before)``,
    ``usage_report(UsageFilter) -> dict`` (``gatewayd.store.usage_queries``).
Console state (shared by every instance)
    ``console_secret(candidate) -> secret`` (first one stored wins),
    ``end_session(sid, until, now)``, ``session_ended(sid, now)``,
    ``take_signin_attempt(buckets, now, decide)`` (before the password is checked),
    ``signin_succeeded(cleared, refunded)``, ``unlock_signin(email_buckets)``,
    ``forget_signin_attempts(quiet_since, now)``
    (``gatewayd.store.signin_attempts``).
Changes (the key cache of every instance)
    ``follow_changes(apply)`` (run in the nursery): ``await apply(Change)`` for each account
    or key changed by any instance, ``Change("all")`` after the feed (re)connects; SQLite:
    none, one process makes every change. PostgreSQL: LISTEN/NOTIFY (``pg_changes``).
Rate limits
    ``take_rate_slot(account_id, model_id, requests, window_s) -> None | seconds to wait``
    (PostgreSQL: the sliding log shared by every instance; SQLite keeps it in memory).
Received response ids (``gatewayd.received_ids``: who may name which stored response)
    ``record_received_ids(account_id, ids, expires_at)`` (an upsert: receiving again moves
    the expiry), ``received_ids(account_id, ids, now) -> set`` (those not expired),
    ``forget_received_ids(now) -> int`` (delete expired rows).
Instances
    ``heartbeat()``, ``instances()`` (PostgreSQL), ``release_dead_holds() -> int``
    (holds of instances whose heartbeat stopped are released: ``interrupted`` when the
    instance is known dead, else charged provisionally as ``unsettled``; never a live
    instance's); ``fenced`` (PostgreSQL: True while this instance's lease may be running
    out, it must start no upstream work; ``reserve`` then raises ``Fenced``, a
    ``StoreUnavailable``).
"""

from __future__ import annotations

from gatewayd.config import Config, ConfigError
from gatewayd.store.contract import Store


async def open_store(config: Config, *, worker_index: int = 0) -> Store:
    """The store ``config.database_url`` names, migrated and with this instance registered.

    ``worker_index``: the worker number under ``serve --workers N`` (0 otherwise). On
    PostgreSQL the instance claims a slot file in the data dir, trying that number first
    (``gatewayd.store.instance_slot``): a restarted process releases its previous life's
    holds at once, and a live process's holds are never released by a newcomer."""
    url = config.database_url
    if url.startswith("sqlite:///"):
        from gatewayd.store.sqlite import SQLiteStore

        return SQLiteStore(url[len("sqlite:///"):])
    if url.startswith(("postgresql://", "postgres://")):
        from gatewayd.store.postgres import PostgresStore

        return await PostgresStore.open(url, pool_size=config.database_pool_size, data_dir=config.server.data_dir,
                                        worker_index=worker_index)
    raise ConfigError("database.url: must start with sqlite:/// or postgresql://")
