"""Account passwords (the console's sign-in): scrypt at OWASP's current parameters.

A stored hash names its own parameters (``scrypt$N$r$p$salt$digest``), so hashes made
with older, cheaper parameters still verify; the console replaces such a hash with a
new one when its owner signs in with the right password (``needs_rehash``).

One hash at N=2^17, r=8 takes 128 MiB and about half a second of one core, so hashing
runs in worker threads, at most ``HASHING`` at a time: a burst of sign-ins queues here
and the API's event loop never waits for it. The sign-in throttle
(``gatewayd.console.session.SignInThrottle``) is what bounds how many are tried at all.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os

import trio

# OWASP Password Storage Cheat Sheet: scrypt with N=2^17, r=8, p=1
N, R, P = 2**17, 8, 1
# hashlib's default maxmem (32 MiB) refuses N=2^17: scrypt needs 128 * r * (N + p + 2) bytes.
# A stored hash asking for more than this is not tried (no hash of ours ever does).
MAX_MEMORY = 256 * 1024 * 1024
HASHING = trio.CapacityLimiter(2)


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    needed = 128 * r * (n + p + 2) + 65536
    if needed > MAX_MEMORY:
        raise ValueError(f"scrypt parameters N={n} r={r} p={p} need more than {MAX_MEMORY} bytes")
    return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=32, maxmem=needed)


def hash_password(password: str, *, n: int = N, r: int = R, p: int = P) -> str:
    salt = os.urandom(16)
    return f"scrypt${n}${r}${p}${salt.hex()}${_scrypt(password, salt, n, r, p).hex()}"


def check_password(password: str, stored: str | None) -> bool:
    if not stored:
        return False
    try:
        _, n, r, p, salt, digest = stored.split("$")
        candidate = _scrypt(password, bytes.fromhex(salt), int(n), int(r), int(p))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(candidate.hex(), digest)


def needs_rehash(stored: str) -> bool:
    """A hash made with other parameters than today's: replace it at the next sign-in."""
    parts = stored.split("$")
    return len(parts) != 6 or parts[:4] != ["scrypt", str(N), str(R), str(P)]


@functools.cache
def decoy_hash() -> str:
    """Checked against when the email is unknown: the same work, so timing does not tell which
    emails exist (made once, on first use, in a worker thread)."""
    return hash_password("a password nobody has")


async def hashed(password: str) -> str:
    return await trio.to_thread.run_sync(hash_password, password, limiter=HASHING)


async def matches(password: str, stored: str | None) -> bool:
    """``stored`` None (no such account, or no password set): checked against the decoy."""
    if stored:
        return await trio.to_thread.run_sync(check_password, password, stored, limiter=HASHING)
    await trio.to_thread.run_sync(lambda: check_password(password, decoy_hash()), limiter=HASHING)
    return False
