-- Aliases (issue 32): a request may name a model by another id ([[aliases]], a model's
-- aliases = [...]); the usage row keeps the catalogue id in model and the id the request
-- named in requested_model (NULL when it named the catalogue id, and on older rows).
ALTER TABLE usage ADD COLUMN requested_model TEXT;
