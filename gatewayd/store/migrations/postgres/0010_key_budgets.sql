-- Periodic key budgets (issue 22, gatewayd/budgets.py): at most budget_nano per budget_period
-- (day | week | month, starting at midnight in the account's zone). budget_period_start is the
-- start of the period the key has counted (UTC text as every timestamp here) and
-- budget_spent_nano what its usage rows dated from then on cost: a trigger on usage keeps it in
-- the transaction that writes or corrects the row (settlement, provisional charge, refund), and
-- gatewayd_hold recounts it when a new period has begun, then checks the budget in the same
-- conditional UPDATE as the spend limit, under the key's row lock: no two instances can both
-- hold the last of a budget.
ALTER TABLE keys ADD COLUMN budget_nano BIGINT;
ALTER TABLE keys ADD COLUMN budget_period TEXT;
ALTER TABLE keys ADD COLUMN budget_period_start TEXT;
ALTER TABLE keys ADD COLUMN budget_spent_nano BIGINT NOT NULL DEFAULT 0;
CREATE INDEX usage_key_created ON usage(key_id, created_at);

-- the start (UTC text) of the day / week (Monday) / month holding instant p_at, in zone p_zone
CREATE FUNCTION gatewayd_period_start(p_at TEXT, p_period TEXT, p_zone TEXT) RETURNS TEXT
LANGUAGE sql STABLE AS $$
    SELECT to_char((date_trunc(p_period, p_at::timestamptz AT TIME ZONE p_zone) AT TIME ZONE p_zone)
                   AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- bring a key's count to the period holding p_at (a recount from the usage rows when that
-- period is newer than the one counted); the caller holds the key's row lock or takes it here
CREATE FUNCTION gatewayd_budget_roll(p_key_id TEXT, p_at TEXT) RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    k_period TEXT;
    zone TEXT;
    cur TEXT;
BEGIN
    SELECT k.budget_period, a.timezone INTO k_period, zone
      FROM keys k JOIN accounts a ON a.id = k.account_id WHERE k.id = p_key_id;
    IF k_period IS NULL THEN
        RETURN;
    END IF;
    cur := gatewayd_period_start(p_at, k_period, zone);
    -- (re-checked under the row lock: of two instances starting a period, the second finds it started)
    UPDATE keys SET budget_period_start = cur,
                    budget_spent_nano = (SELECT coalesce(sum(cost_nano), 0) FROM usage
                                          WHERE key_id = p_key_id AND created_at >= cur)
     WHERE id = p_key_id AND (budget_period_start IS NULL OR budget_period_start < cur);
END $$;

CREATE FUNCTION gatewayd_usage_budget() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta BIGINT;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM keys WHERE id = NEW.key_id AND budget_period IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        delta := NEW.cost_nano;
    ELSE
        delta := NEW.cost_nano - OLD.cost_nano;
    END IF;
    -- one statement: re-evaluated on the latest row if another transaction started the period meanwhile
    UPDATE keys k SET
        budget_spent_nano = CASE
            WHEN k.budget_period_start IS NULL OR k.budget_period_start < p.cur
            THEN (SELECT coalesce(sum(cost_nano), 0) FROM usage WHERE key_id = k.id AND created_at >= p.cur)
            WHEN NEW.created_at >= k.budget_period_start THEN k.budget_spent_nano + delta
            ELSE k.budget_spent_nano END,
        budget_period_start = CASE
            WHEN k.budget_period_start IS NULL OR k.budget_period_start < p.cur THEN p.cur
            ELSE k.budget_period_start END
      FROM (SELECT gatewayd_period_start(NEW.created_at, k2.budget_period, a.timezone) AS cur
              FROM keys k2 JOIN accounts a ON a.id = k2.account_id WHERE k2.id = NEW.key_id) p
     WHERE k.id = NEW.key_id AND k.budget_period IS NOT NULL;
    RETURN NULL;
END $$;

CREATE TRIGGER usage_budget_insert AFTER INSERT ON usage FOR EACH ROW EXECUTE FUNCTION gatewayd_usage_budget();
CREATE TRIGGER usage_budget_update AFTER UPDATE OF cost_nano ON usage FOR EACH ROW
    WHEN (NEW.cost_nano IS DISTINCT FROM OLD.cost_nano) EXECUTE FUNCTION gatewayd_usage_budget();

DROP FUNCTION gatewayd_hold(TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, INTEGER, TEXT);

-- As in 0004, and the key's period budget checked in the same conditional UPDATE as its limit
CREATE FUNCTION gatewayd_hold(
    p_request_id TEXT, p_account_id TEXT, p_key_id TEXT, p_model TEXT, p_endpoint TEXT, p_amount BIGINT,
    p_now TEXT, p_instance_id TEXT, p_host TEXT, p_pid INTEGER, p_slot TEXT,
    OUT refused TEXT, OUT refused_left BIGINT, OUT key_spent BIGINT, OUT key_held BIGINT,
    OUT credit BIGINT, OUT account_held BIGINT, OUT total_paid BIGINT,
    OUT budget_start TEXT, OUT budget_spent BIGINT)
LANGUAGE plpgsql AS $$
BEGIN
    -- keys before accounts, as in gatewayd_settle: one lock order, no deadlock
    PERFORM gatewayd_budget_roll(p_key_id, p_now);
    UPDATE keys SET held_nano = held_nano + p_amount
     WHERE id = p_key_id AND (spend_limit_nano IS NULL OR spend_limit_nano - spent_nano - held_nano >= p_amount)
       AND (budget_nano IS NULL OR budget_period IS NULL
            OR budget_nano - budget_spent_nano - held_nano >= p_amount)
    RETURNING spent_nano, held_nano, budget_period_start, budget_spent_nano
         INTO key_spent, key_held, budget_start, budget_spent;
    IF NOT FOUND THEN
        refused := 'key';
        SELECT least(spend_limit_nano - spent_nano - held_nano,
                     CASE WHEN budget_period IS NOT NULL THEN budget_nano - budget_spent_nano - held_nano END),
               spent_nano, held_nano, budget_period_start, budget_spent_nano
          INTO refused_left, key_spent, key_held, budget_start, budget_spent FROM keys WHERE id = p_key_id;
        RETURN;
    END IF;
    UPDATE accounts SET held_nano = held_nano + p_amount
     WHERE id = p_account_id AND credit_nano - held_nano >= p_amount
    RETURNING credit_nano, held_nano, total_paid_nano INTO credit, account_held, total_paid;
    IF NOT FOUND THEN
        refused := 'account';
        SELECT credit_nano - held_nano INTO refused_left FROM accounts WHERE id = p_account_id;
        -- the key's share goes back in the same transaction (its row is still locked by us)
        UPDATE keys SET held_nano = held_nano - p_amount WHERE id = p_key_id;
        key_spent := NULL;
        key_held := NULL;
        RETURN;
    END IF;
    -- only while our instance row exists, and with it locked (FOR KEY SHARE) so that no other
    -- instance can be releasing us as dead meanwhile; gone: we were released while away
    INSERT INTO holds (request_id, account_id, key_id, model, endpoint, amount_nano, created_at, instance_id)
    SELECT p_request_id, p_account_id, p_key_id, p_model, p_endpoint, p_amount, p_now, id
      FROM instances WHERE id = p_instance_id FOR KEY SHARE;
    IF NOT FOUND THEN
        INSERT INTO instances (id, host, pid, slot, started_at) VALUES (p_instance_id, p_host, p_pid, p_slot, p_now)
            ON CONFLICT (id) DO NOTHING;
        INSERT INTO holds (request_id, account_id, key_id, model, endpoint, amount_nano, created_at, instance_id)
        VALUES (p_request_id, p_account_id, p_key_id, p_model, p_endpoint, p_amount, p_now, p_instance_id);
    END IF;
END $$;

-- The change feed (0008) also tells the other instances when a key's budget changes.
CREATE OR REPLACE FUNCTION gatewayd_notify_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR (NEW.name, NEW.status, NEW.spend_limit_nano, NEW.expires_on, NEW.models, NEW.allow_ips,
                            NEW.group_name, NEW.max_concurrent, NEW.budget_nano, NEW.budget_period)
            IS DISTINCT FROM (OLD.name, OLD.status, OLD.spend_limit_nano, OLD.expires_on, OLD.models, OLD.allow_ips,
                              OLD.group_name, OLD.max_concurrent, OLD.budget_nano, OLD.budget_period) THEN
        PERFORM pg_notify('pg_changes', 'key:' || NEW.id);
    END IF;
    RETURN NULL;
END $$;
