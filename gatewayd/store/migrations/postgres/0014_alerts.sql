-- Alerts (issue 22, gatewayd/alerts.py); as the SQLite store's 0012_alerts.sql: an outbox row
-- written by a trigger in the transaction that moved the money (gatewayd_settle, a payment, a
-- provisional charge or its correction), judged from the row's old and new values under the
-- row's lock, so two instances charging one account at once see one crossing between them.
ALTER TABLE accounts ADD COLUMN alert_below_nano BIGINT;
CREATE TABLE alert_outbox (
    id              BIGSERIAL PRIMARY KEY,
    created_at      TEXT NOT NULL,
    kind            TEXT NOT NULL,
    account_id      TEXT NOT NULL,
    key_id          TEXT,
    level           INTEGER,
    amount_nano     BIGINT NOT NULL,
    threshold_nano  BIGINT,
    period_start    TEXT,
    payment_id      BIGINT,
    source          TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at DOUBLE PRECISION NOT NULL DEFAULT 0,
    claimed_until   DOUBLE PRECISION NOT NULL DEFAULT 0,
    claim           TEXT,
    email_done      INTEGER NOT NULL DEFAULT 0,
    webhook_done    INTEGER NOT NULL DEFAULT 0,
    finished_at     TEXT,
    outcome         TEXT,
    last_error      TEXT
);
CREATE INDEX alert_outbox_due ON alert_outbox(next_attempt_at) WHERE finished_at IS NULL;
CREATE INDEX alert_outbox_account ON alert_outbox(account_id, id);

CREATE FUNCTION gatewayd_alert_now() RETURNS TEXT LANGUAGE sql STABLE AS $$
    SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- the percent level (80 or 100) of amount p_limit that p_new reached and p_old had not; NULL: none
CREATE FUNCTION gatewayd_alert_level(p_old BIGINT, p_new BIGINT, p_limit BIGINT) RETURNS INTEGER
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN p_limit IS NULL OR p_limit <= 0 OR p_new <= p_old THEN NULL
        WHEN p_old < p_limit AND p_new >= p_limit THEN 100
        WHEN p_old < p_limit - p_limit / 5 AND p_new >= p_limit - p_limit / 5 THEN
            CASE WHEN p_new >= p_limit THEN 100 ELSE 80 END
        END
$$;

CREATE FUNCTION gatewayd_alert_balance() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO alert_outbox (created_at, kind, account_id, amount_nano, threshold_nano)
    VALUES (gatewayd_alert_now(), 'balance_below', NEW.id, NEW.credit_nano, NEW.alert_below_nano);
    RETURN NULL;
END $$;
CREATE TRIGGER alert_balance_below AFTER UPDATE OF credit_nano ON accounts FOR EACH ROW
    WHEN (NEW.alert_below_nano IS NOT NULL AND OLD.credit_nano >= NEW.alert_below_nano
          AND NEW.credit_nano < NEW.alert_below_nano)
    EXECUTE FUNCTION gatewayd_alert_balance();

CREATE FUNCTION gatewayd_alert_key() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    prior BIGINT;
    lvl INTEGER;
BEGIN
    lvl := gatewayd_alert_level(OLD.spent_nano, NEW.spent_nano, NEW.spend_limit_nano);
    IF lvl IS NOT NULL THEN
        INSERT INTO alert_outbox (created_at, kind, account_id, key_id, level, amount_nano, threshold_nano)
        VALUES (gatewayd_alert_now(), 'key_spend_limit', NEW.account_id, NEW.id, lvl, NEW.spent_nano,
                NEW.spend_limit_nano);
    END IF;
    IF NEW.budget_period IS NOT NULL AND NEW.budget_period_start IS NOT NULL THEN
        -- a new period starts from nothing: its first crossing alerts again
        prior := CASE WHEN OLD.budget_period_start IS NOT DISTINCT FROM NEW.budget_period_start
                      THEN OLD.budget_spent_nano ELSE 0 END;
        lvl := gatewayd_alert_level(prior, NEW.budget_spent_nano, NEW.budget_nano);
        IF lvl IS NOT NULL THEN
            INSERT INTO alert_outbox (created_at, kind, account_id, key_id, level, amount_nano, threshold_nano,
                                      period_start)
            VALUES (gatewayd_alert_now(), 'key_budget', NEW.account_id, NEW.id, lvl, NEW.budget_spent_nano,
                    NEW.budget_nano, NEW.budget_period_start);
        END IF;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER alert_key_spend AFTER UPDATE OF spent_nano, budget_spent_nano ON keys FOR EACH ROW
    WHEN (NEW.spent_nano > OLD.spent_nano OR NEW.budget_spent_nano IS DISTINCT FROM OLD.budget_spent_nano
          OR NEW.budget_period_start IS DISTINCT FROM OLD.budget_period_start)
    EXECUTE FUNCTION gatewayd_alert_key();

CREATE FUNCTION gatewayd_alert_payment() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO alert_outbox (created_at, kind, account_id, amount_nano, payment_id, source)
    VALUES (gatewayd_alert_now(), 'payment', NEW.account_id, NEW.amount_nano, NEW.id, NEW.source);
    RETURN NULL;
END $$;
CREATE TRIGGER alert_payment AFTER INSERT ON payments FOR EACH ROW EXECUTE FUNCTION gatewayd_alert_payment();

-- The change feed (0008) also tells the other instances when an account's threshold changes.
CREATE OR REPLACE FUNCTION gatewayd_notify_account() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR (NEW.email, NEW.name, NEW.timezone, NEW.password_hash, NEW.total_paid_nano, NEW.groups,
                            NEW.embedding_models, NEW.max_concurrent, NEW.alert_below_nano)
            IS DISTINCT FROM (OLD.email, OLD.name, OLD.timezone, OLD.password_hash, OLD.total_paid_nano, OLD.groups,
                              OLD.embedding_models, OLD.max_concurrent, OLD.alert_below_nano) THEN
        PERFORM pg_notify('pg_changes', 'account:' || NEW.id);
    END IF;
    RETURN NULL;
END $$;
