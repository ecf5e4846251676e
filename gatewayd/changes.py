"""Changes made on other instances, applied to this instance's key cache.

Every instance authenticates from memory (``Directory``), so a key disabled through one
instance's admin socket must reach the others' memory. The store's change feed says what
changed (PostgreSQL: LISTEN/NOTIFY, delivered at commit; SQLite: nothing, since one
process serves the file and every change is made in it); this module reloads that account
or key from the store and updates the cached object in place. In place, because requests
in flight and the presented-secret cache hold references to those objects: a revoked key
must stop working for them too.

Only the rules are copied (status, limits, expiry, model list, IPs, group, concurrency caps;
name, zone, password, groups, embedding models, what was paid). Money for holds is decided by the
database at hold time, not from these objects.
"""

from __future__ import annotations

import logging

import trio

from gatewayd.directory import Directory
from gatewayd.records import Account, Key, expiry_instant

log = logging.getLogger("gatewayd.changes")

_ACCOUNT_FIELDS = ("email", "name", "timezone", "password_hash", "groups", "embedding_models", "total_paid_nano",
                   "credit_nano", "max_concurrent", "alert_below_nano")
_KEY_FIELDS = ("name", "status", "spend_limit_nano", "spent_nano", "expires_on", "models", "allow_ips", "group",
               "last_used_at", "max_concurrent", "budget_nano", "budget_period", "budget_period_start",
               "budget_spent_nano", "mcp")


def apply_account(directory: Directory, fresh: Account) -> None:
    current = directory.accounts.get(fresh.id)
    if current is None:
        directory._remember_account(fresh)
        return
    old_email, old_zone = current.email.lower(), current.timezone
    for field in _ACCOUNT_FIELDS:
        setattr(current, field, getattr(fresh, field))
    if current.email.lower() != old_email:
        directory.accounts_by_email.pop(old_email, None)
        directory.accounts_by_email[current.email.lower()] = current
    if current.timezone != old_zone:
        for key in directory.keys_by_account.get(current.id, ()):
            key.expires_at = expiry_instant(key.expires_on, current.timezone)


def apply_key(directory: Directory, fresh: Key) -> None:
    current = directory.keys.get(fresh.id)
    if current is None:
        directory._remember_key(fresh)
        return
    if current.status == "deleted":
        return  # revoking is permanent: no reload can bring a key back
    for field in _KEY_FIELDS:
        setattr(current, field, getattr(fresh, field))
    current.expires_at = fresh.expires_at


class ChangeFollower:
    """Applies the store's change feed to a directory. ``applied`` counts changes (for tests and metrics)."""

    def __init__(self, store, directory: Directory) -> None:
        self.store = store
        self.directory = directory
        self.applied = 0

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await self.store.follow_changes(self.apply, task_status=task_status)

    async def apply(self, change) -> None:
        if change.kind == "all":
            accounts, keys = await self.store.load_directory()
            for account in accounts:
                apply_account(self.directory, account)
            for key in keys:
                if key.account_id in self.directory.accounts:
                    apply_key(self.directory, key)
        elif change.kind == "account":
            account = await self.store.load_account(change.id)
            if account is not None:
                apply_account(self.directory, account)
        elif change.kind == "key":
            key = await self.store.load_key(change.id)
            if key is None:
                return
            if key.account_id not in self.directory.accounts:  # a key of an account made elsewhere, just now
                account = await self.store.load_account(key.account_id)
                if account is None:
                    return
                apply_account(self.directory, account)
            apply_key(self.directory, key)
        self.applied += 1
