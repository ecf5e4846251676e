-- Where a payment comes from (issue 22): operator | code | card | refund | dispute (the last two
-- negative amounts), and its outside identity (a code's id, a Checkout Session, a refund, a
-- dispute). The unique index makes every outside credit exactly once: record_payment inserts
-- with ON CONFLICT DO NOTHING and credits only when its row went in.
ALTER TABLE payments ADD COLUMN source TEXT NOT NULL DEFAULT 'operator';
ALTER TABLE payments ADD COLUMN reference TEXT;
CREATE UNIQUE INDEX payments_source_reference ON payments(source, reference) WHERE reference IS NOT NULL;
