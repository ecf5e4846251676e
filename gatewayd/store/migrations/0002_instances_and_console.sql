-- Instances and the console's shared state (issue 11): holds carry the process that took
-- them; console sessions that were signed out, failed sign-ins, and the session secret.
ALTER TABLE holds ADD COLUMN instance_id TEXT;

CREATE TABLE instances (
    id            TEXT PRIMARY KEY,
    host          TEXT NOT NULL,
    pid           INTEGER NOT NULL,
    started_at    TEXT NOT NULL,
    heartbeat_at  REAL NOT NULL             -- epoch seconds
);

CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE ended_sessions (
    session_id  TEXT PRIMARY KEY,
    until_epoch REAL NOT NULL
);

CREATE TABLE signin_failures (
    bucket   TEXT NOT NULL,
    at_epoch REAL NOT NULL
);
CREATE INDEX signin_failures_bucket ON signin_failures(bucket, at_epoch);
