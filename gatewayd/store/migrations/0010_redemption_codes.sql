-- Redemption codes (issue 22, gatewayd/codes.py): prepaid amounts an account holder redeems in the
-- console. Only the code's SHA-256 is kept (the code is printed once, at creation); hint is its last
-- four characters, for the operator to match a printed code with its row. A code is redeemed by the
-- conditional UPDATE that sets redeemed_at (WHERE it is still unused, unrevoked and unexpired) in the
-- same transaction as its payment (source 'code', reference = the code's id): it credits once.
CREATE TABLE redemption_codes (
    id          TEXT PRIMARY KEY,
    code_hash   TEXT NOT NULL UNIQUE,
    hint        TEXT NOT NULL,
    amount_nano INTEGER NOT NULL,
    note        TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL,
    expires_at  TEXT,
    revoked_at  TEXT,
    redeemed_at TEXT,
    redeemed_by TEXT REFERENCES accounts(id)
);
CREATE INDEX redemption_codes_created ON redemption_codes(created_at);
