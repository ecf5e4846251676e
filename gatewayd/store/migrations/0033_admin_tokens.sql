-- The operator's remote control (issue 33, gatewayd/admin/): admin tokens, the admin audit log and
-- the operator's console password.
-- An admin token (gwa-...) is kept as its SHA-256 only (shown once, at creation); scopes is a
-- comma-separated list (read, write, money, keys, admin); allow_ips a JSON list of CIDRs or NULL (any).
CREATE TABLE admin_tokens (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    token_hash   TEXT NOT NULL UNIQUE,
    hint         TEXT NOT NULL,
    scopes       TEXT NOT NULL,
    allow_ips    TEXT,
    created_at   TEXT NOT NULL,
    created_by   TEXT NOT NULL,
    expires_at   TEXT,
    revoked_at   TEXT,
    last_used_at TEXT
);
-- Every admin call (socket, HTTP, console): who, what, when, from where, and for a change the
-- target's state before and after (JSON text).
CREATE TABLE admin_audit (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at          TEXT NOT NULL,
    actor       TEXT NOT NULL,
    actor_name  TEXT NOT NULL,
    via         TEXT NOT NULL,
    address     TEXT,
    method      TEXT NOT NULL,
    path        TEXT NOT NULL,
    status      INTEGER NOT NULL,
    target      TEXT,
    request     TEXT,
    before      TEXT,
    after       TEXT
);
CREATE INDEX admin_audit_at ON admin_audit(at);
-- Operator settings shared by every instance: the console password's scrypt hash.
CREATE TABLE operator_settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
-- Each instance's route health (Router.report), published every few seconds, so the admin API and
-- the operator console can show the routes as every instance sees them.
CREATE TABLE route_reports (
    instance_id TEXT PRIMARY KEY,
    host        TEXT NOT NULL,
    report      TEXT NOT NULL,
    reported_at TEXT NOT NULL
);
