-- Which provider served a request and how many routes were tried (issue 12: routes and failover).
-- Rows from before this migration were all served in one attempt; interrupted rows name no provider.
ALTER TABLE usage ADD COLUMN provider TEXT;
ALTER TABLE usage ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1;
