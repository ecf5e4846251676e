-- Console sign-in attempts (issue 20): one row per throttle bucket (an email, an address, an
-- email at an address), taken and counted in one transaction BEFORE the password is checked,
-- so concurrent attempts cannot all pass a check of the count (gatewayd/console/session.py).
-- attempts: reserved in the current window (which began at window_start, epoch s);
-- locked_until: no attempt before this instant (epoch s, 0 = not locked); lockouts: how many
-- lockouts in a row (each one twice as long as the one before); last_at: the last attempt,
-- for forgetting a quiet bucket. signin_failures (0002) is no longer written; it stays for
-- instances of the previous version during a rolling upgrade.
CREATE TABLE signin_attempts (
    bucket       TEXT PRIMARY KEY,
    attempts     INTEGER NOT NULL,
    window_start REAL NOT NULL,
    locked_until REAL NOT NULL,
    lockouts     INTEGER NOT NULL,
    last_at      REAL NOT NULL
);
CREATE INDEX signin_attempts_last_at ON signin_attempts(last_at);
-- signed-out sessions are forgotten by their expiry: an index for that DELETE
CREATE INDEX ended_sessions_until ON ended_sessions(until_epoch);
