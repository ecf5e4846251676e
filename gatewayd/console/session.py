"""Console sessions, CSRF tokens and the sign-in throttle.

Sessions live in the browser, not in the database: a cookie signed with
``itsdangerous`` carries a random session id, the account id and a fingerprint of
the account's password hash. Changing the password therefore ends every session
of that account, and the signing secret (from the config, or generated once and
kept in the data dir) lets sessions survive a restart. Every visitor, signed in or
not, gets a session id, so the sign-in form carries a CSRF token too.

CSRF tokens are an HMAC of the session id: tied to one session, nothing to store.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path

import attrs
from itsdangerous import BadSignature, URLSafeTimedSerializer

from gatewayd.config import Config

COOKIE = "gatewayd_console"
MAX_AGE_S = 7 * 24 * 3600  # a session lasts a week from its last refresh
REFRESH_AFTER_S = 24 * 3600  # re-sign at most once a day (sliding expiry)
SECRET_FILE = "console-secret"


def load_secret(config: Config) -> bytes:
    """``server.console_secret``, or a random secret kept in the data dir (mode 0600)."""
    if config.server.console_secret:
        return config.server.console_secret.encode()
    path = Path(config.server.data_dir) / SECRET_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        text = path.read_text().strip()
        if len(text) < 32:
            raise RuntimeError(f"{path}: the console secret is too short; delete the file to make a new one")
        return text.encode()
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    os.chmod(path, 0o600)
    return path.read_text().strip().encode()


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


class Sessions:
    """Signs and reads session cookies; derives and checks CSRF tokens."""

    def __init__(self, secret: bytes, clock=time.time) -> None:
        self._serializer = URLSafeTimedSerializer(secret, salt="gatewayd.console.session")
        self._csrf_key = hmac.new(secret, b"gatewayd.console.csrf", hashlib.sha256).digest()
        self._clock = clock
        self._ended: dict[str, float] = {}  # signed-out session ids -> when their cookie would expire

    def new(self) -> Session:
        return Session(sid=secrets.token_urlsafe(18), issued_at=self._clock(), dirty=True)

    def read(self, cookie: str | None) -> Session:
        """The session a cookie carries, or a fresh anonymous one when it is absent, forged or stale."""
        if cookie:
            try:
                data, issued = self._serializer.loads(cookie, max_age=MAX_AGE_S, return_timestamp=True)
            except BadSignature:
                data = None
            if isinstance(data, dict) and isinstance(data.get("s"), str) and data["s"] not in self._ended:
                session = Session(
                    sid=data["s"], account_id=data.get("a"), fingerprint=data.get("p"),
                    issued_at=issued.timestamp(),
                )
                if self._clock() - session.issued_at > REFRESH_AFTER_S:
                    session.issued_at = self._clock()
                    session.dirty = True
                return session
        return self.new()

    def dump(self, session: Session) -> str:
        return self._serializer.dumps({"s": session.sid, "a": session.account_id, "p": session.fingerprint})

    def signed_in(self, account_id: str, password_hash: str | None) -> Session:
        """A new session id at sign-in, so a session id seen before sign-in is worth nothing after."""
        session = self.new()
        session.account_id = account_id
        session.fingerprint = password_fingerprint(password_hash)
        return session

    def end(self, session: Session) -> Session:
        """Sign out: this session id is refused from now on (until its cookie would have expired)."""
        now = self._clock()
        self._ended = {sid: until for sid, until in self._ended.items() if until > now}
        self._ended[session.sid] = now + MAX_AGE_S
        return self.new()

    def csrf_token(self, session: Session) -> str:
        return hmac.new(self._csrf_key, session.sid.encode(), hashlib.sha256).hexdigest()

    def csrf_valid(self, session: Session, token: str) -> bool:
        return hmac.compare_digest(self.csrf_token(session), token)


class SignInThrottle:
    """At most ``limit`` failed sign-ins per (email, client address) in any ``window_s``, and at
    most ``address_limit`` per client address whatever the emails (one address trying many
    accounts, each attempt costing a slow password hash)."""

    def __init__(self, limit: int = 5, window_s: float = 15 * 60, address_limit: int = 50,
                 clock=time.monotonic) -> None:
        self.limit = limit
        self.address_limit = address_limit
        self.window_s = window_s
        self._clock = clock
        self._failures: dict[tuple[str | None, str], collections.deque[float]] = {}

    def _recent(self, key: tuple[str | None, str]) -> collections.deque[float] | None:
        seen = self._failures.get(key)
        if seen is None:
            return None
        cutoff = self._clock() - self.window_s
        while seen and seen[0] <= cutoff:
            seen.popleft()
        if not seen:
            del self._failures[key]
            return None
        return seen

    def retry_after(self, email: str, address: str) -> int | None:
        """Seconds until another attempt is allowed, or None when it is allowed now."""
        waits = []
        for key, limit in (((email.strip().lower(), address), self.limit), ((None, address), self.address_limit)):
            seen = self._recent(key)
            if seen is not None and len(seen) >= limit:
                waits.append(max(1, int(seen[-limit] + self.window_s - self._clock()) + 1))
        return max(waits) if waits else None

    def failed(self, email: str, address: str) -> None:
        if len(self._failures) > 100_000:  # many distinct emails: drop whatever has aged out
            for key in list(self._failures):
                self._recent(key)
        for key in ((email.strip().lower(), address), (None, address)):
            self._failures.setdefault(key, collections.deque()).append(self._clock())

    def succeeded(self, email: str, address: str) -> None:
        self._failures.pop((email.strip().lower(), address), None)
