-- The PostgreSQL schema: the SQLite one, plus what several instances need. Money is integer
-- nano-dollars (BIGINT). held_nano columns carry the open holds, so a hold is one conditional
-- UPDATE: credit_nano - held_nano must cover it (and the key's limit - spent - held).
CREATE TABLE accounts (
    id               TEXT PRIMARY KEY,
    email            TEXT NOT NULL,
    name             TEXT NOT NULL DEFAULT '',
    timezone         TEXT NOT NULL DEFAULT 'UTC',
    password_hash    TEXT,
    credit_nano      BIGINT NOT NULL DEFAULT 0,    -- payments - charges
    held_nano        BIGINT NOT NULL DEFAULT 0,    -- sum of this account's open holds
    total_paid_nano  BIGINT NOT NULL DEFAULT 0,
    groups           TEXT NOT NULL DEFAULT '["default"]',
    embedding_models TEXT NOT NULL DEFAULT '[]',
    created_at       TEXT NOT NULL
);
CREATE UNIQUE INDEX accounts_email ON accounts (lower(email));

CREATE TABLE payments (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id  TEXT NOT NULL REFERENCES accounts(id),
    amount_nano BIGINT NOT NULL,
    note        TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL
);
CREATE INDEX payments_account ON payments(account_id, id);

CREATE TABLE keys (
    id               TEXT PRIMARY KEY,
    account_id       TEXT NOT NULL REFERENCES accounts(id),
    name             TEXT NOT NULL,
    secret_hash      TEXT NOT NULL UNIQUE,
    secret_hint      TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'enabled',
    spend_limit_nano BIGINT,
    spent_nano       BIGINT NOT NULL DEFAULT 0,
    held_nano        BIGINT NOT NULL DEFAULT 0,    -- sum of this key's open holds
    expires_on       TEXT,
    models           TEXT,
    allow_ips        TEXT,
    group_name       TEXT,
    created_at       TEXT NOT NULL,
    last_used_at     TEXT
);
CREATE INDEX keys_account ON keys(account_id);

CREATE TABLE instances (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    slot         TEXT NOT NULL,   -- host|admin socket|worker number: a restart finds its previous life
    started_at   TEXT NOT NULL,
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()   -- the database's clock, not the host's
);

CREATE INDEX instances_slot ON instances(slot);

CREATE TABLE holds (
    request_id  TEXT PRIMARY KEY,
    account_id  TEXT NOT NULL,
    key_id      TEXT NOT NULL,
    model       TEXT NOT NULL,
    endpoint    TEXT NOT NULL,
    amount_nano BIGINT NOT NULL,
    created_at  TEXT NOT NULL,
    instance_id TEXT NOT NULL
);
CREATE INDEX holds_instance ON holds(instance_id);

CREATE TABLE usage (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_id         TEXT NOT NULL,
    created_at         TEXT NOT NULL,
    account_id         TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    model              TEXT NOT NULL,
    endpoint           TEXT NOT NULL,
    stream             INTEGER NOT NULL,
    status             TEXT NOT NULL,
    http_status        INTEGER NOT NULL,
    input_tokens       BIGINT NOT NULL DEFAULT 0,
    output_tokens      BIGINT NOT NULL DEFAULT 0,
    cached_tokens      BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    cost_nano          BIGINT NOT NULL DEFAULT 0,
    duration_ms        BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX usage_account ON usage(account_id, id);
CREATE INDEX usage_key ON usage(key_id, id);
CREATE INDEX usage_request ON usage(request_id);  -- settlement retries look for their own row

CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE ended_sessions (
    session_id  TEXT PRIMARY KEY,
    until_epoch DOUBLE PRECISION NOT NULL
);

CREATE TABLE signin_failures (
    bucket   TEXT NOT NULL,
    at_epoch DOUBLE PRECISION NOT NULL
);
CREATE INDEX signin_failures_bucket ON signin_failures(bucket, at_epoch);
