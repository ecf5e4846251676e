-- Fair shares (issue 20): how many requests an account or a key may have in flight at once.
-- NULL: the server's default ([server] max_concurrent_per_account / max_concurrent_per_key);
-- 0: no cap. Each instance counts its own requests in flight (gatewayd/concurrency.py).
ALTER TABLE accounts ADD COLUMN max_concurrent INTEGER;
ALTER TABLE keys ADD COLUMN max_concurrent INTEGER;

-- The change feed (0002) also tells the other instances when a cap changes.
CREATE OR REPLACE FUNCTION gatewayd_notify_account() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR (NEW.email, NEW.name, NEW.timezone, NEW.password_hash, NEW.total_paid_nano, NEW.groups,
                            NEW.embedding_models, NEW.max_concurrent)
            IS DISTINCT FROM (OLD.email, OLD.name, OLD.timezone, OLD.password_hash, OLD.total_paid_nano, OLD.groups,
                              OLD.embedding_models, OLD.max_concurrent) THEN
        PERFORM pg_notify('pg_changes', 'account:' || NEW.id);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION gatewayd_notify_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR (NEW.name, NEW.status, NEW.spend_limit_nano, NEW.expires_on, NEW.models, NEW.allow_ips,
                            NEW.group_name, NEW.max_concurrent)
            IS DISTINCT FROM (OLD.name, OLD.status, OLD.spend_limit_nano, OLD.expires_on, OLD.models, OLD.allow_ips,
                              OLD.group_name, OLD.max_concurrent) THEN
        PERFORM pg_notify('pg_changes', 'key:' || NEW.id);
    END IF;
    RETURN NULL;
END $$;
