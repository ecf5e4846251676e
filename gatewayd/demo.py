"""The demo account, and why it never serves outside ``--demo``.

``gatewayd serve --demo`` creates ``demo@example.com`` with a published password, $10 and a
key whose secret sits in the data dir. Its data dir is ``var/demo`` by default (not the
``var`` a plain ``serve`` uses), but an operator can still point a real daemon at a demo's
database (``--data-dir``, the config file, a copied file). There the demo key would reach the
real providers on the demo's balance, and anyone knowing the published password could sign
in to the console and make more keys. So a start without ``--demo`` that finds the account
retires it: every enabled key of it disabled, its console password removed (which also ends
its console sessions: they carry a fingerprint of the password), and a warning naming it. It
is not deleted: its usage and payments stay for the operator. A later ``--demo`` start on the
same data dir gives the account its password and its demo key back.
"""

from __future__ import annotations

import logging

from gatewayd import logs
from gatewayd.records import Account

DEMO_EMAIL = "demo@example.com"
DEMO_PASSWORD = "demo-password"  # the demo account's console password (--demo only)


async def retire_demo_account(directory) -> None:
    """A start without ``--demo``: the demo account, if this database has one, cannot be used."""
    account = directory.accounts_by_email.get(DEMO_EMAIL.lower())
    if account is None:
        return
    disabled = [key for key in directory.keys_by_account.get(account.id, []) if key.status == "enabled"]
    for key in disabled:
        await directory.set_key_status(key, "disabled")
    had_password = account.password_hash is not None
    if had_password:
        await directory.store.set_password_hash(account.id, None)
        account.password_hash = None
    if disabled or had_password:
        logs.event(
            f"gatewayd: the demo account {DEMO_EMAIL} ({account.id}) is in this database and this is not a --demo "
            f"start: {len(disabled)} of its keys disabled, its console password removed",
            logging.WARNING, account=account.id, email=DEMO_EMAIL,
            disabled_keys=[key.id for key in disabled],
        )


async def restore_demo_key(directory, account: Account, secret: str) -> None:
    """A ``--demo`` start: the demo key a previous non-demo start disabled works again."""
    key = directory.key_for_secret(secret)
    if key is not None and key.account_id == account.id and key.status == "disabled":
        await directory.set_key_status(key, "enabled")


__all__ = ["DEMO_EMAIL", "DEMO_PASSWORD", "restore_demo_key", "retire_demo_account"]
