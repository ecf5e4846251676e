"""Console sessions, CSRF tokens and the sign-in throttle.

Sessions live in the browser: a cookie signed with ``itsdangerous`` carries a random
session id, the account id and a fingerprint of the account's password hash. Changing
the password therefore ends every session of that account. What must be shared by
every instance is in the store: the signing secret (from the config, or generated once
by whichever instance starts first), the signed-out session ids, and the sign-in
attempts the throttle counts. So a session opened on one instance is valid on the
others, and a sign-out or a throttle on one applies on all. Every visitor, signed in
or not, gets a session id, so the sign-in form carries a CSRF token too.

CSRF tokens are an HMAC of the session id: tied to one session, nothing to store.

A new key's secret travels from the form's POST to the page that shows it once inside
the cookie, encrypted (an HMAC-SHA256 keystream under a key derived from the signing
secret and a random nonce) and signed with the rest: the redirect may land on another
instance, and the secret is never written to the database. It is dropped from the
cookie when shown, and is good for ``REVEAL_TTL_S`` at most.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import secrets
import time
from typing import Any, Callable

import attrs
import trio
from itsdangerous import BadSignature, URLSafeTimedSerializer

from gatewayd.config import Config

COOKIE = "gatewayd_console"
MAX_AGE_S = 7 * 24 * 3600  # a session lasts a week from its last refresh
REFRESH_AFTER_S = 24 * 3600  # re-sign at most once a day (sliding expiry)
REVEAL_TTL_S = 600  # a new key's secret waits this long at most for the page that shows it


async def load_secret(config: Config, store) -> bytes:
    """``server.console_secret``, or the store's shared secret (made by the first instance to ask)."""
    if config.server.console_secret:
        return config.server.console_secret.encode()
    return (await store.console_secret(secrets.token_hex(32))).encode()


def password_fingerprint(password_hash: str | None) -> str:
    """Short digest of the stored hash: a new password invalidates old sessions."""
    return hashlib.sha256((password_hash or "").encode()).hexdigest()[:16]


@attrs.define
class Session:
    sid: str
    account_id: str | None = None
    fingerprint: str | None = None
    issued_at: float = 0.0
    dirty: bool = False  # the cookie must be (re)written on the response
    reveal: tuple[str, str] | None = None  # (key id, secret) of a key just created, until it is shown
    reveal_at: float = 0.0
    oidc: list | None = None  # an OpenID Connect sign-in under way (gatewayd.oidc.PendingFlow.dump)


class Sessions:
    """Signs and reads session cookies; derives and checks CSRF tokens."""

    def __init__(self, secret: bytes, store, clock=time.time) -> None:
        self._serializer = URLSafeTimedSerializer(secret, salt="gatewayd.console.session")
        self._csrf_key = hmac.new(secret, b"gatewayd.console.csrf", hashlib.sha256).digest()
        self._reveal_key = hmac.new(secret, b"gatewayd.console.reveal", hashlib.sha256).digest()
        self._clock = clock
        self._store = store  # signed-out session ids, shared by every instance

    def new(self) -> Session:
        return Session(sid=secrets.token_urlsafe(18), issued_at=self._clock(), dirty=True)

    async def read(self, cookie: str | None) -> Session:
        """The session a cookie carries, or a fresh anonymous one when it is absent, forged, stale or ended."""
        if cookie:
            try:
                data, issued = self._serializer.loads(cookie, max_age=MAX_AGE_S, return_timestamp=True)
            except BadSignature:
                data = None
            if (isinstance(data, dict) and isinstance(data.get("s"), str)
                    and not await self._store.session_ended(data["s"], self._clock())):
                session = Session(
                    sid=data["s"], account_id=data.get("a"), fingerprint=data.get("p"),
                    issued_at=issued.timestamp(),
                )
                self._read_reveal(session, data.get("r"))
                if isinstance(data.get("o"), list):
                    session.oidc = data["o"]
                if self._clock() - session.issued_at > REFRESH_AFTER_S:
                    session.issued_at = self._clock()
                    session.dirty = True
                return session
        return self.new()

    def dump(self, session: Session) -> str:
        data: dict[str, Any] = {"s": session.sid, "a": session.account_id, "p": session.fingerprint}
        if session.oidc is not None:
            data["o"] = session.oidc
        if session.reveal is not None:
            nonce = secrets.token_bytes(16)
            key_id, secret = session.reveal
            sealed = _xor(secret.encode(), self._keystream(nonce, len(secret.encode())))
            data["r"] = [key_id, _b64(nonce), _b64(sealed), int(session.reveal_at)]
        return self._serializer.dumps(data)

    def park_reveal(self, session: Session, key_id: str, secret: str) -> None:
        """Carry a new key's secret to the page that shows it (in this session's cookie)."""
        session.reveal = (key_id, secret)
        session.reveal_at = self._clock()
        session.dirty = True

    def take_reveal(self, session: Session, key_id: str) -> str | None:
        """The parked secret of ``key_id``, dropped from the session: shown once."""
        if session.reveal is None or session.reveal[0] != key_id:
            return None
        secret = session.reveal[1]
        session.reveal = None
        session.dirty = True
        return secret

    def _keystream(self, nonce: bytes, size: int) -> bytes:
        blocks = (hmac.new(self._reveal_key, nonce + i.to_bytes(4, "big"), hashlib.sha256).digest()
                  for i in range((size + 31) // 32))
        return b"".join(blocks)[:size]

    def _read_reveal(self, session: Session, sealed) -> None:
        if not (isinstance(sealed, list) and len(sealed) == 4 and isinstance(sealed[0], str)
                and isinstance(sealed[3], int)):
            return
        if self._clock() - sealed[3] > REVEAL_TTL_S:
            session.dirty = True  # expired: write the cookie back without it
            return
        try:
            nonce, body = base64.urlsafe_b64decode(sealed[1]), base64.urlsafe_b64decode(sealed[2])
            secret = _xor(body, self._keystream(nonce, len(body))).decode("ascii")
        except (TypeError, ValueError):
            return
        session.reveal, session.reveal_at = (sealed[0], secret), float(sealed[3])

    def signed_in(self, account_id: str, password_hash: str | None) -> Session:
        """A new session id at sign-in, so a session id seen before sign-in is worth nothing after."""
        session = self.new()
        session.account_id = account_id
        session.fingerprint = password_fingerprint(password_hash)
        return session

    async def end(self, session: Session) -> Session:
        """Sign out: this session id is refused from now on, on every instance (until its cookie
        would have expired)."""
        now = self._clock()
        await self._store.end_session(session.sid, now + MAX_AGE_S, now)
        return self.new()

    def csrf_token(self, session: Session) -> str:
        return hmac.new(self._csrf_key, session.sid.encode(), hashlib.sha256).hexdigest()

    def form_refusal(self, session: Session, token: Any) -> tuple[int, str] | None:
        """Why a POSTed form is refused, as (status, message), or None when its CSRF token is
        this session's: one rule for the account holders' console and the operator's."""
        if not token or not isinstance(token, str):
            return 400, "This form arrived without its security token. Reload the page and try again."
        if not self.csrf_valid(session, token):
            return 403, "This form's security token does not match your session. Reload the page and try again."
        return None

    def csrf_valid(self, session: Session, token: str) -> bool:
        return hmac.compare_digest(self.csrf_token(session), token)


def _xor(data: bytes, stream: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, stream))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


class SignInThrottle:
    """Sign-in attempts are taken before the password is checked, from buckets kept in the
    store (so every instance on one database shares them): the email at this client address
    (``limit``, 5) and the address whatever the emails (``address_limit``, 50: one address
    trying many accounts, each attempt costing a slow password hash). An attempt is refused
    when any bucket is locked; taking a bucket's last attempt locks it for ``lockout_s``,
    twice as long at each lockout in a row (at most ``max_lockout_s``), and a bucket left
    quiet for ``forget_s`` starts over. A successful sign-in clears the email's buckets and
    gives its attempt back to the address's.

    There is no bucket for an email from anywhere on sign-in (issue 31, N7: with one, 20
    wrong passwords from anywhere locked the holder out for up to a day, whoever sent them).
    Lockouts lock out the address that failed; guesses spread over many addresses are
    bounded by the global ceiling on password checks (:class:`CheckCeiling`), which makes
    excess attempts wait or answers 429 and never locks an account. ``account_limit`` adds
    that bucket where the guesser is the account itself (the redemption codes: a signed-in
    holder guessing codes), and ``gatewayctl account unlock`` clears an email's buckets.

    The count is taken in the store's transaction (``gatewayd.store.signin_attempts``), so
    of twenty concurrent wrong passwords for one email, five are checked and fifteen refused.

    ``scope`` prefixes the bucket names, so another guess than a password is throttled by the
    same rules with counts of its own (the redemption codes: ``scope="code"``, with the account
    id in place of the email).
    """

    def __init__(self, store, limit: int = 5, account_limit: int | None = None, address_limit: int = 50,
                 window_s: float = 15 * 60, lockout_s: float = 15 * 60, max_lockout_s: float = 24 * 3600,
                 forget_s: float = 24 * 3600, clock=time.time, scope: str = "") -> None:
        self.scope = f"{scope}:" if scope else ""
        self.limit = limit
        self.account_limit = account_limit
        self.address_limit = address_limit
        self.window_s = window_s
        self.lockout_s = lockout_s
        self.max_lockout_s = max_lockout_s
        self.forget_s = forget_s
        self._clock = clock
        self._store = store
        self._forgotten_at = 0.0

    def email_buckets(self, email: str) -> str:
        """The name of the email's own bucket; ``<it>|<address>`` are its buckets per address."""
        return f"{self.scope}e:{email.strip().lower()}"

    def _buckets(self, email: str, address: str) -> dict[str, int]:
        """Bucket name -> its limit."""
        mine = self.email_buckets(email)
        buckets = {f"{mine}|{address}": self.limit, f"{self.scope}a:{address}": self.address_limit}
        if self.account_limit is not None:
            buckets[mine] = self.account_limit
        return buckets

    async def reserve(self, email: str, address: str) -> int | None:
        """Take one attempt: None when the password may be checked now, else the seconds to
        wait (and nothing was taken)."""
        now = self._clock()
        if now - self._forgotten_at > 60:  # quiet buckets are deleted now and then, not at every attempt
            self._forgotten_at = now
            await self._store.forget_signin_attempts(now - self.forget_s, now)
        limits = self._buckets(email, address)
        return await self._store.take_signin_attempt(limits, now, lambda states: self._decide(states, limits, now))

    def _decide(self, states: dict[str, dict], limits: dict[str, int], now: float) -> tuple[dict, int | None]:
        """The policy, on the buckets' locked rows: (the rows to write, None or the wait)."""
        waits = [s["locked_until"] - now for s in states.values() if s["locked_until"] > now]
        if waits:
            return {}, max(1, math.ceil(max(waits)))
        writes = {}
        for bucket, state in states.items():
            state = dict(state)
            if now - state["last_at"] >= self.forget_s:  # quiet long enough: lockouts forgiven
                state["lockouts"] = 0
            if now - state["window_start"] >= self.window_s or state["attempts"] == 0:
                state["attempts"], state["window_start"] = 0, now
            state["attempts"] += 1
            state["last_at"] = now
            if state["attempts"] >= limits[bucket]:  # the last attempt of this window: lock out
                state["locked_until"] = now + min(self.lockout_s * 2 ** min(state["lockouts"], 20), self.max_lockout_s)
                state["lockouts"] += 1
                state["attempts"], state["window_start"] = 0, now
            writes[bucket] = state
        return writes, None

    async def succeeded(self, email: str, address: str) -> None:
        mine = self.email_buckets(email)
        buckets = list(self._buckets(email, address))
        await self._store.signin_succeeded(cleared=[b for b in buckets if b.startswith(mine)],
                                           refunded=[b for b in buckets if not b.startswith(mine)])

    async def give_back(self, email: str, address: str) -> None:
        """An attempt taken but never checked (the ceiling refused it): each bucket's count
        gets it back, so the wait the ceiling asked for never counts as a failure."""
        await self._store.signin_succeeded(cleared=[], refunded=list(self._buckets(email, address)))

    async def unlock(self, email: str) -> int:
        """The operator's unlock: every bucket of ``email`` (at every address) deleted."""
        return await self._store.unlock_signin(self.email_buckets(email))


class CheckCeiling:
    """A ceiling on the rate of password checks in this process, whoever asks: at most
    ``rate()`` a second, a second's worth at once. Excess attempts wait their turn, up to
    ``max_wait_s``; past that they are answered 429 with the wait. It counts checks, not
    failures, and locks nothing: the holder's next attempt is checked as soon as there is
    room. (Each check is a slow scrypt hash in a thread: ``gatewayd.passwords``.)"""

    def __init__(self, rate: Callable[[], float], max_wait_s: float = 5.0,
                 clock: Callable[[], float] | None = None) -> None:
        self.rate = rate
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._next = 0.0  # when the queue of granted checks ends (a token bucket's "theoretical arrival")

    async def take(self) -> int | None:
        """None once a check may run (after waiting, if need be), else the seconds to wait."""
        now = self._clock() if self._clock is not None else trio.current_time()
        rate = self.rate()
        interval = 1.0 / rate
        burst = max(1.0, rate) * interval  # a second's worth of checks may start at once
        start = max(self._next, now)
        wait = start - burst - now + interval
        if wait > self.max_wait_s:
            return max(1, math.ceil(wait))
        self._next = start + interval
        if wait > 0:
            await trio.sleep(wait)
        return None
