-- Response and conversation ids each account received through gatewayd (issue 19): a
-- Responses request may name one (previous_response_id, conversation) only if its own
-- account received it. Rows expire after 30 days (OpenAI keeps a response 30 days);
-- gatewayd.received_ids deletes expired rows hourly.
CREATE TABLE received_ids (
    account_id  TEXT NOT NULL,
    response_id TEXT NOT NULL,              -- a response id, or a conversation id
    expires_at  BIGINT NOT NULL,            -- epoch seconds
    PRIMARY KEY (account_id, response_id)
);
CREATE INDEX received_ids_expiry ON received_ids(expires_at);
