-- MCP tool access per key (issue 37, gatewayd/mcp/access.py): a JSON list of servers and
-- server:tool patterns the key may use through /mcp; NULL: every configured MCP server.
ALTER TABLE keys ADD COLUMN mcp TEXT;

-- The change feed (0010) also tells the other instances when a key's MCP list changes.
CREATE OR REPLACE FUNCTION gatewayd_notify_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR (NEW.name, NEW.status, NEW.spend_limit_nano, NEW.expires_on, NEW.models, NEW.allow_ips,
                            NEW.group_name, NEW.max_concurrent, NEW.budget_nano, NEW.budget_period, NEW.mcp)
            IS DISTINCT FROM (OLD.name, OLD.status, OLD.spend_limit_nano, OLD.expires_on, OLD.models, OLD.allow_ips,
                              OLD.group_name, OLD.max_concurrent, OLD.budget_nano, OLD.budget_period, OLD.mcp) THEN
        PERFORM pg_notify('pg_changes', 'key:' || NEW.id);
    END IF;
    RETURN NULL;
END $$;
