-- Fair shares (issue 20): how many requests an account or a key may have in flight at once.
-- NULL: the server's default ([server] max_concurrent_per_account / max_concurrent_per_key);
-- 0: no cap.
ALTER TABLE accounts ADD COLUMN max_concurrent INTEGER;
ALTER TABLE keys ADD COLUMN max_concurrent INTEGER;
