-- Accounts, payments, keys, open holds and the usage log. Money is integer nano-dollars.
CREATE TABLE accounts (
    id               TEXT PRIMARY KEY,
    email            TEXT NOT NULL UNIQUE COLLATE NOCASE,
    name             TEXT NOT NULL DEFAULT '',
    timezone         TEXT NOT NULL DEFAULT 'UTC',
    password_hash    TEXT,
    credit_nano      INTEGER NOT NULL DEFAULT 0,   -- payments - charges (open holds not subtracted)
    total_paid_nano  INTEGER NOT NULL DEFAULT 0,
    groups           TEXT NOT NULL DEFAULT '["default"]',  -- JSON list
    embedding_models TEXT NOT NULL DEFAULT '[]',           -- JSON list
    created_at       TEXT NOT NULL
);

CREATE TABLE payments (
    id          INTEGER PRIMARY KEY,
    account_id  TEXT NOT NULL REFERENCES accounts(id),
    amount_nano INTEGER NOT NULL,
    note        TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL
);
CREATE INDEX payments_account ON payments(account_id, id);

CREATE TABLE keys (
    id               TEXT PRIMARY KEY,
    account_id       TEXT NOT NULL REFERENCES accounts(id),
    name             TEXT NOT NULL,
    secret_hash      TEXT NOT NULL UNIQUE,
    secret_hint      TEXT NOT NULL,                 -- 'sk-abcd...wxyz' for display
    status           TEXT NOT NULL DEFAULT 'enabled', -- enabled | disabled | deleted (expired/used_up are derived)
    spend_limit_nano INTEGER,
    spent_nano       INTEGER NOT NULL DEFAULT 0,
    expires_on       TEXT,                          -- YYYY-MM-DD, end of day in the account's zone
    models           TEXT,                          -- JSON list or NULL (all)
    allow_ips        TEXT,                          -- JSON list or NULL (any)
    group_name       TEXT,
    created_at       TEXT NOT NULL,
    last_used_at     TEXT
);
CREATE INDEX keys_account ON keys(account_id);

CREATE TABLE holds (
    request_id  TEXT PRIMARY KEY,
    account_id  TEXT NOT NULL,
    key_id      TEXT NOT NULL,
    model       TEXT NOT NULL,
    endpoint    TEXT NOT NULL,
    amount_nano INTEGER NOT NULL,
    created_at  TEXT NOT NULL
);

CREATE TABLE usage (
    id                 INTEGER PRIMARY KEY,
    request_id         TEXT NOT NULL,
    created_at         TEXT NOT NULL,
    account_id         TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    model              TEXT NOT NULL,
    endpoint           TEXT NOT NULL,
    stream             INTEGER NOT NULL,
    status             TEXT NOT NULL,               -- ok | incomplete | client_disconnected | upstream_error | interrupted ...
    http_status        INTEGER NOT NULL,
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    cached_tokens      INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    cost_nano          INTEGER NOT NULL DEFAULT 0,
    duration_ms        INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX usage_account ON usage(account_id, id);
CREATE INDEX usage_key ON usage(key_id, id);
