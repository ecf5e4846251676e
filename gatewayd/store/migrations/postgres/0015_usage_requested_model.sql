-- Aliases (issue 32): a request may name a model by another id ([[aliases]], a model's
-- aliases = [...]); the usage row keeps the catalogue id in model and the id the request
-- named in requested_model (NULL when it named the catalogue id, and on older rows).
-- gatewayd_settle as in 0007, taking the requested id too.
ALTER TABLE usage ADD COLUMN requested_model TEXT;

DROP FUNCTION gatewayd_settle(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTEGER, TEXT, INTEGER, BIGINT, BIGINT, BIGINT,
                              BIGINT, BIGINT, BIGINT, TEXT, INTEGER, BIGINT, TEXT);

CREATE FUNCTION gatewayd_settle(
    p_request_id TEXT, p_account_id TEXT, p_key_id TEXT, p_model TEXT, p_endpoint TEXT, p_now TEXT,
    p_stream INTEGER, p_status TEXT, p_http_status INTEGER, p_input_tokens BIGINT, p_output_tokens BIGINT,
    p_cached_tokens BIGINT, p_cache_write_tokens BIGINT, p_cost BIGINT, p_duration_ms BIGINT, p_provider TEXT,
    p_attempts INTEGER, p_hold BIGINT, p_breakdown TEXT, p_requested_model TEXT,
    OUT settled BOOLEAN, OUT key_spent BIGINT, OUT key_held BIGINT, OUT key_last_used TEXT,
    OUT credit BIGINT, OUT account_held BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    released BIGINT := 0;
    charged BIGINT := 0;  -- what the account was already charged for this request (provisionally)
    prior_id BIGINT;
    prior_status TEXT;
BEGIN
    DELETE FROM holds WHERE request_id = p_request_id RETURNING amount_nano INTO released;
    IF NOT FOUND THEN
        released := 0;
        SELECT id, status INTO prior_id, prior_status FROM usage WHERE request_id = p_request_id
         ORDER BY status IN ('interrupted', 'unsettled') LIMIT 1;
        IF FOUND AND prior_status NOT IN ('interrupted', 'unsettled') THEN
            settled := false;  -- an earlier attempt committed (its answer was lost with the connection)
            RETURN;
        END IF;
        DELETE FROM unsettled WHERE request_id = p_request_id RETURNING amount_nano INTO charged;
        IF NOT FOUND THEN
            charged := 0;
        END IF;
    END IF;
    IF prior_id IS NOT NULL THEN
        -- released by another instance while this one could not reach the database (it looked
        -- dead): that row becomes the real outcome; nothing is left to release
        UPDATE usage SET stream = p_stream, status = p_status, http_status = p_http_status,
               input_tokens = p_input_tokens, output_tokens = p_output_tokens, cached_tokens = p_cached_tokens,
               cache_write_tokens = p_cache_write_tokens, cost_nano = p_cost, duration_ms = p_duration_ms,
               provider = p_provider, attempts = p_attempts, hold_nano = p_hold, breakdown = p_breakdown,
               requested_model = p_requested_model,
               charged_after_release = CASE WHEN prior_status = 'interrupted' AND p_cost > 0 THEN 1 ELSE 0 END
         WHERE id = prior_id;
    ELSE
        INSERT INTO usage (request_id, created_at, account_id, key_id, model, endpoint, stream, status, http_status,
                           input_tokens, output_tokens, cached_tokens, cache_write_tokens, cost_nano, duration_ms,
                           provider, attempts, hold_nano, breakdown, requested_model)
        VALUES (p_request_id, p_now, p_account_id, p_key_id, p_model, p_endpoint, p_stream, p_status, p_http_status,
                p_input_tokens, p_output_tokens, p_cached_tokens, p_cache_write_tokens, p_cost, p_duration_ms,
                p_provider, p_attempts, p_hold, p_breakdown, p_requested_model);
    END IF;
    UPDATE keys SET spent_nano = spent_nano + p_cost - charged, held_nano = held_nano - released, last_used_at = p_now
     WHERE id = p_key_id RETURNING spent_nano, held_nano, last_used_at INTO key_spent, key_held, key_last_used;
    UPDATE accounts SET credit_nano = credit_nano - (p_cost - charged), held_nano = held_nano - released
     WHERE id = p_account_id RETURNING credit_nano, held_nano INTO credit, account_held;
    settled := true;
END $$;
