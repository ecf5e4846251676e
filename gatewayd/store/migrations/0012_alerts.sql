-- Alerts (issue 22, gatewayd/alerts.py): an outbox row is written by a trigger in the very
-- transaction that moved the money, whatever path moved it (settlement, provisional charge,
-- payment, refund), so there is never a charge that crossed a threshold without its row, and
-- never a row without its charge. Crossings are judged from the row's old and new values, so
-- each crossing writes one row and the next charge below writes none (see docs/funding.md).
-- The delivery task (gatewayd/alert_delivery.py) claims rows, sends them and marks them.
ALTER TABLE accounts ADD COLUMN alert_below_nano INTEGER;
CREATE TABLE alert_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at      TEXT NOT NULL,
    kind            TEXT NOT NULL,       -- balance_below | key_spend_limit | key_budget | payment
    account_id      TEXT NOT NULL,
    key_id          TEXT,
    level           INTEGER,             -- key alerts: 80 or 100 (percent reached)
    amount_nano     INTEGER NOT NULL,    -- the balance / the spend / the payment's amount
    threshold_nano  INTEGER,             -- the threshold / the limit / the budget
    period_start    TEXT,                -- key_budget: the budget period's start (UTC)
    payment_id      INTEGER,
    source          TEXT,                -- payment: the payment's source (operator, code, card, refund, dispute)
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL DEFAULT 0,   -- epoch s
    claimed_until   REAL NOT NULL DEFAULT 0,   -- epoch s: a deliverer owns the row until then
    claim           TEXT,
    email_done      INTEGER NOT NULL DEFAULT 0,
    webhook_done    INTEGER NOT NULL DEFAULT 0,
    finished_at     TEXT,
    outcome         TEXT,                -- delivered | expired
    last_error      TEXT
);
CREATE INDEX alert_outbox_due ON alert_outbox(next_attempt_at) WHERE finished_at IS NULL;
CREATE INDEX alert_outbox_account ON alert_outbox(account_id, id);

CREATE TRIGGER alert_balance_below AFTER UPDATE OF credit_nano ON accounts
WHEN NEW.alert_below_nano IS NOT NULL AND OLD.credit_nano >= NEW.alert_below_nano
     AND NEW.credit_nano < NEW.alert_below_nano
BEGIN
    INSERT INTO alert_outbox (created_at, kind, account_id, amount_nano, threshold_nano)
    VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'balance_below', NEW.id, NEW.credit_nano, NEW.alert_below_nano);
END;

-- 80% of an amount L is reached at ceil(0.8 L) = L - L / 5 (integer division; no overflow)
CREATE TRIGGER alert_key_spend_limit AFTER UPDATE OF spent_nano ON keys
WHEN NEW.spend_limit_nano IS NOT NULL AND NEW.spend_limit_nano > 0 AND NEW.spent_nano > OLD.spent_nano
     AND ((OLD.spent_nano < NEW.spend_limit_nano - NEW.spend_limit_nano / 5
           AND NEW.spent_nano >= NEW.spend_limit_nano - NEW.spend_limit_nano / 5)
          OR (OLD.spent_nano < NEW.spend_limit_nano AND NEW.spent_nano >= NEW.spend_limit_nano))
BEGIN
    INSERT INTO alert_outbox (created_at, kind, account_id, key_id, level, amount_nano, threshold_nano)
    VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'key_spend_limit', NEW.account_id, NEW.id,
            CASE WHEN NEW.spent_nano >= NEW.spend_limit_nano THEN 100 ELSE 80 END, NEW.spent_nano,
            NEW.spend_limit_nano);
END;

-- a new period starts from nothing: its first crossing alerts again
CREATE TRIGGER alert_key_budget AFTER UPDATE OF budget_spent_nano ON keys
WHEN NEW.budget_nano IS NOT NULL AND NEW.budget_nano > 0 AND NEW.budget_period IS NOT NULL
     AND NEW.budget_period_start IS NOT NULL
     AND NEW.budget_spent_nano > (CASE WHEN OLD.budget_period_start IS NEW.budget_period_start
                                       THEN OLD.budget_spent_nano ELSE 0 END)
     AND (((CASE WHEN OLD.budget_period_start IS NEW.budget_period_start THEN OLD.budget_spent_nano ELSE 0 END)
            < NEW.budget_nano - NEW.budget_nano / 5 AND NEW.budget_spent_nano >= NEW.budget_nano - NEW.budget_nano / 5)
          OR ((CASE WHEN OLD.budget_period_start IS NEW.budget_period_start THEN OLD.budget_spent_nano ELSE 0 END)
              < NEW.budget_nano AND NEW.budget_spent_nano >= NEW.budget_nano))
BEGIN
    INSERT INTO alert_outbox (created_at, kind, account_id, key_id, level, amount_nano, threshold_nano, period_start)
    VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'key_budget', NEW.account_id, NEW.id,
            CASE WHEN NEW.budget_spent_nano >= NEW.budget_nano THEN 100 ELSE 80 END, NEW.budget_spent_nano,
            NEW.budget_nano, NEW.budget_period_start);
END;

CREATE TRIGGER alert_payment AFTER INSERT ON payments
BEGIN
    INSERT INTO alert_outbox (created_at, kind, account_id, amount_nano, payment_id, source)
    VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'payment', NEW.account_id, NEW.amount_nano, NEW.id, NEW.source);
END;
