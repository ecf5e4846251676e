"""The console's sign-in attempts in the store: taken before the password is checked.

A sign-in attempt is counted first and checked second, in that order, so that twenty
concurrent wrong passwords cannot all read "four failures so far" and all be checked (the
race of counting failures after the check). ``take`` is one transaction: it locks the row
of every bucket the attempt belongs to (created when missing, by an upsert that takes the
row lock in PostgreSQL; SQLite has one writer), hands their states to the throttle's
``decide`` (the policy: ``gatewayd.console.session.SignInThrottle``) and writes what it
returns. Rows are locked in sorted order, so two attempts never wait on each other in a
cycle. Every instance on one PostgreSQL database therefore shares one count.

The jobs here take a ``Tx`` (``gatewayd.store.sql``): the same SQL on both stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:
    from gatewayd.store.sql import Tx

FIELDS = ("attempts", "window_start", "locked_until", "lockouts", "last_at")

# A missing bucket is created empty; an existing one is "updated" to itself, which in
# PostgreSQL locks its row until the transaction ends and returns its latest committed state.
_LOCK_ROW = (
    "INSERT INTO signin_attempts (bucket, attempts, window_start, locked_until, lockouts, last_at)"
    " VALUES (?, 0, ?, 0, 0, ?) ON CONFLICT (bucket) DO UPDATE SET bucket = excluded.bucket"
    " RETURNING attempts, window_start, locked_until, lockouts, last_at"
)
_WRITE_ROW = ("UPDATE signin_attempts SET attempts = ?, window_start = ?, locked_until = ?, lockouts = ?, last_at = ?"
              " WHERE bucket = ?")

BucketStates = dict[str, dict[str, Any]]  # bucket -> its row (FIELDS)
Decide = Callable[[BucketStates], tuple[BucketStates, Any]]


def take(tx: Tx, buckets: Iterable[str], now: float, decide: Decide) -> Any:
    """Lock each bucket's row, let ``decide(states) -> (new states, result)`` judge, write, return result."""
    states = {}
    for bucket in sorted(set(buckets)):
        row = tx.one(_LOCK_ROW, (bucket, now, now))
        states[bucket] = {name: row[name] for name in FIELDS}
    writes, result = decide(states)
    for bucket in sorted(writes):
        state = writes[bucket]
        tx.run(_WRITE_ROW, (*(state[name] for name in FIELDS), bucket))
    return result


def settle_success(tx: Tx, cleared: Iterable[str], refunded: Iterable[str]) -> None:
    """A successful sign-in: ``cleared`` buckets start over (lockouts forgiven too); each of
    ``refunded`` gives back the attempt it lent (an address is not held to its successes)."""
    cleared, refunded = set(cleared), set(refunded) - set(cleared)
    for bucket in sorted(cleared | refunded):
        if bucket in cleared:
            tx.run("DELETE FROM signin_attempts WHERE bucket = ?", (bucket,))
        else:
            tx.run("UPDATE signin_attempts SET attempts = attempts - 1 WHERE bucket = ? AND attempts > 0", (bucket,))


def unlock(tx: Tx, email_buckets: str) -> int:
    """Delete every bucket of one email (``e:<email>``, and ``e:<email>|<address>`` for every
    address): the operator's ``gatewayctl account unlock``. Returns how many there were."""
    pattern = email_buckets.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "|%"
    return tx.run("DELETE FROM signin_attempts WHERE bucket = ? OR bucket LIKE ? ESCAPE '\\'",
                  (email_buckets, pattern))


def forget(tx: Tx, quiet_since: float, now: float, *, skip_locked: bool) -> int:
    """Delete the buckets with no attempt since ``quiet_since`` and no lockout running.
    ``skip_locked`` (PostgreSQL): rows an attempt holds are left for next time, so this
    never waits on an attempt that might be waiting on it."""
    if skip_locked:
        return tx.run("DELETE FROM signin_attempts WHERE bucket IN (SELECT bucket FROM signin_attempts"
                      " WHERE last_at < ? AND locked_until < ? FOR UPDATE SKIP LOCKED)", (quiet_since, now))
    return tx.run("DELETE FROM signin_attempts WHERE last_at < ? AND locked_until < ?", (quiet_since, now))
