-- The change feed: a NOTIFY on channel pg_changes ('account:<id>' / 'key:<id>') when an
-- account's or key's rules change, delivered at commit. Money moved by requests (credit,
-- holds, key spend, last-used time) does not notify: every instance reads it from here.
CREATE FUNCTION gatewayd_notify_account() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR (NEW.email, NEW.name, NEW.timezone, NEW.password_hash, NEW.total_paid_nano, NEW.groups,
                            NEW.embedding_models)
            IS DISTINCT FROM (OLD.email, OLD.name, OLD.timezone, OLD.password_hash, OLD.total_paid_nano, OLD.groups,
                              OLD.embedding_models) THEN
        PERFORM pg_notify('pg_changes', 'account:' || NEW.id);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER accounts_changed AFTER INSERT OR UPDATE ON accounts
    FOR EACH ROW EXECUTE FUNCTION gatewayd_notify_account();

CREATE FUNCTION gatewayd_notify_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR (NEW.name, NEW.status, NEW.spend_limit_nano, NEW.expires_on, NEW.models, NEW.allow_ips,
                            NEW.group_name)
            IS DISTINCT FROM (OLD.name, OLD.status, OLD.spend_limit_nano, OLD.expires_on, OLD.models, OLD.allow_ips,
                              OLD.group_name) THEN
        PERFORM pg_notify('pg_changes', 'key:' || NEW.id);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER keys_changed AFTER INSERT OR UPDATE ON keys
    FOR EACH ROW EXECUTE FUNCTION gatewayd_notify_key();

-- Per-model rate limits shared by every instance: the admitted start times (epoch seconds,
-- the database's clock) of one account and model within the window, updated under the row lock.
CREATE TABLE rate_windows (
    account_id TEXT NOT NULL,
    model_id   TEXT NOT NULL,
    times      DOUBLE PRECISION[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (account_id, model_id)
);
