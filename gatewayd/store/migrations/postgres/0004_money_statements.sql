-- A hold and a settlement as one statement each. Each was a transaction of three to five
-- statements, every one a round trip from a worker thread, plus BEGIN and COMMIT; called
-- as a function in autocommit mode each is one round trip and still one transaction.
-- The rules are those the statements had (gatewayd/store/postgres.py says them).

CREATE FUNCTION gatewayd_hold(
    p_request_id TEXT, p_account_id TEXT, p_key_id TEXT, p_model TEXT, p_endpoint TEXT, p_amount BIGINT,
    p_now TEXT, p_instance_id TEXT, p_host TEXT, p_pid INTEGER, p_slot TEXT,
    OUT refused TEXT, OUT refused_left BIGINT, OUT key_spent BIGINT, OUT key_held BIGINT,
    OUT credit BIGINT, OUT account_held BIGINT, OUT total_paid BIGINT)
LANGUAGE plpgsql AS $$
BEGIN
    -- keys before accounts, as in gatewayd_settle: one lock order, no deadlock
    UPDATE keys SET held_nano = held_nano + p_amount
     WHERE id = p_key_id AND (spend_limit_nano IS NULL OR spend_limit_nano - spent_nano - held_nano >= p_amount)
    RETURNING spent_nano, held_nano INTO key_spent, key_held;
    IF NOT FOUND THEN
        refused := 'key';
        SELECT spend_limit_nano - spent_nano - held_nano, spent_nano, held_nano
          INTO refused_left, key_spent, key_held FROM keys WHERE id = p_key_id;
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

CREATE FUNCTION gatewayd_settle(
    p_request_id TEXT, p_account_id TEXT, p_key_id TEXT, p_model TEXT, p_endpoint TEXT, p_now TEXT,
    p_stream INTEGER, p_status TEXT, p_http_status INTEGER, p_input_tokens BIGINT, p_output_tokens BIGINT,
    p_cached_tokens BIGINT, p_cache_write_tokens BIGINT, p_cost BIGINT, p_duration_ms BIGINT, p_provider TEXT,
    p_attempts INTEGER,
    OUT settled BOOLEAN, OUT key_spent BIGINT, OUT key_held BIGINT, OUT key_last_used TEXT,
    OUT credit BIGINT, OUT account_held BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    released BIGINT := 0;
    prior_id BIGINT;
    prior_status TEXT;
BEGIN
    DELETE FROM holds WHERE request_id = p_request_id RETURNING amount_nano INTO released;
    IF NOT FOUND THEN
        released := 0;
        SELECT id, status INTO prior_id, prior_status FROM usage WHERE request_id = p_request_id
         ORDER BY status = 'interrupted' LIMIT 1;
        IF FOUND AND prior_status <> 'interrupted' THEN
            settled := false;  -- an earlier attempt committed (its answer was lost with the connection)
            RETURN;
        END IF;
    END IF;
    IF prior_id IS NOT NULL THEN
        -- released by another instance while this one could not reach the database (it looked
        -- dead): that row becomes the real outcome, charged now; nothing is left to release
        UPDATE usage SET stream = p_stream, status = p_status, http_status = p_http_status,
               input_tokens = p_input_tokens, output_tokens = p_output_tokens, cached_tokens = p_cached_tokens,
               cache_write_tokens = p_cache_write_tokens, cost_nano = p_cost, duration_ms = p_duration_ms,
               provider = p_provider, attempts = p_attempts
         WHERE id = prior_id;
    ELSE
        INSERT INTO usage (request_id, created_at, account_id, key_id, model, endpoint, stream, status, http_status,
                           input_tokens, output_tokens, cached_tokens, cache_write_tokens, cost_nano, duration_ms,
                           provider, attempts)
        VALUES (p_request_id, p_now, p_account_id, p_key_id, p_model, p_endpoint, p_stream, p_status, p_http_status,
                p_input_tokens, p_output_tokens, p_cached_tokens, p_cache_write_tokens, p_cost, p_duration_ms,
                p_provider, p_attempts);
    END IF;
    UPDATE keys SET spent_nano = spent_nano + p_cost, held_nano = held_nano - released, last_used_at = p_now
     WHERE id = p_key_id RETURNING spent_nano, held_nano, last_used_at INTO key_spent, key_held, key_last_used;
    UPDATE accounts SET credit_nano = credit_nano - p_cost, held_nano = held_nano - released
     WHERE id = p_account_id RETURNING credit_nano, held_nano INTO credit, account_held;
    settled := true;
END $$;
