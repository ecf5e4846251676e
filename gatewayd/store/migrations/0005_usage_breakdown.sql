-- What each usage row was charged for (issue 19): the hold it settled and the bill's lines.
-- hold_nano: the amount held for the request (NULL on rows written before this migration).
-- breakdown: the bill as JSON, {"lines": [{dimension, quantity, unit_nano, nano}], "tier", "long_context"};
-- its lines add up to cost_nano (NULL before this migration).
-- charged_after_release: 1 when the charge came after the hold had been released as interrupted
-- (PostgreSQL only: an instance that lost the database; the audit allows for it).
ALTER TABLE usage ADD COLUMN hold_nano INTEGER;
ALTER TABLE usage ADD COLUMN breakdown TEXT;
ALTER TABLE usage ADD COLUMN charged_after_release INTEGER NOT NULL DEFAULT 0;
