-- Periodic key budgets (issue 22, gatewayd/budgets.py): at most budget_nano per budget_period
-- (day | week | month, starting at midnight in the account's zone). budget_period_start is the
-- start of the period the key has counted (UTC text as every timestamp here) and
-- budget_spent_nano what its usage rows dated from then on cost. The triggers below keep the
-- count in the transaction that writes or corrects a usage row, whatever path writes it;
-- gatewayd_period_start is a function the store registers on each of its connections.
ALTER TABLE keys ADD COLUMN budget_nano INTEGER;
ALTER TABLE keys ADD COLUMN budget_period TEXT;
ALTER TABLE keys ADD COLUMN budget_period_start TEXT;
ALTER TABLE keys ADD COLUMN budget_spent_nano INTEGER NOT NULL DEFAULT 0;
-- the recount at the start of a period, and the audit's sum of each key's period
CREATE INDEX usage_key_created ON usage(key_id, created_at);
CREATE TRIGGER usage_budget_insert AFTER INSERT ON usage
BEGIN
    UPDATE keys SET
        budget_spent_nano = CASE
            WHEN budget_period_start IS NULL OR budget_period_start < gatewayd_period_start(NEW.created_at,
                    budget_period, (SELECT timezone FROM accounts WHERE id = keys.account_id))
            THEN (SELECT coalesce(sum(cost_nano), 0) FROM usage WHERE key_id = keys.id AND created_at >=
                    gatewayd_period_start(NEW.created_at, budget_period,
                                          (SELECT timezone FROM accounts WHERE id = keys.account_id)))
            WHEN NEW.created_at >= budget_period_start THEN budget_spent_nano + NEW.cost_nano
            ELSE budget_spent_nano END,
        budget_period_start = CASE
            WHEN budget_period_start IS NULL OR budget_period_start < gatewayd_period_start(NEW.created_at,
                    budget_period, (SELECT timezone FROM accounts WHERE id = keys.account_id))
            THEN gatewayd_period_start(NEW.created_at, budget_period,
                                       (SELECT timezone FROM accounts WHERE id = keys.account_id))
            ELSE budget_period_start END
    WHERE id = NEW.key_id AND budget_period IS NOT NULL;
END;
CREATE TRIGGER usage_budget_update AFTER UPDATE OF cost_nano ON usage WHEN NEW.cost_nano != OLD.cost_nano
BEGIN
    UPDATE keys SET budget_spent_nano = budget_spent_nano + NEW.cost_nano - OLD.cost_nano
    WHERE id = NEW.key_id AND budget_period IS NOT NULL AND budget_period_start IS NOT NULL
      AND NEW.created_at >= budget_period_start;
END;
