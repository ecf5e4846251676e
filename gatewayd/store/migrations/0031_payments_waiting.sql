-- Money given back before the money it gives back arrived (issue 31, L-N4): a Stripe refund or
-- dispute whose top-up's webhook has not come yet would take the account's total paid below zero.
-- It waits here, unique by (source, reference) like a payment, and becomes a payment row in the
-- transaction that records the credit it fits under (gatewayd.store.payments_sql).
CREATE TABLE payments_waiting (
    source      TEXT NOT NULL,
    reference   TEXT NOT NULL,
    account_id  TEXT NOT NULL REFERENCES accounts(id),
    amount_nano INTEGER NOT NULL,
    note        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (source, reference)
);
CREATE INDEX payments_waiting_account ON payments_waiting(account_id, created_at);
