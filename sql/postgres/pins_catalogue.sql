-- /* pg-regression-radar */ the relations a pin's plan used and their valid indexes (issue 30: is the last good
-- plan still producible?). Reads the catalogue only; any role can.
SELECT /* pg-regression-radar */ n.nspname AS schemaname, c.relname, i.relname AS indexname
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_index x ON x.indrelid = c.oid AND x.indisvalid AND x.indisready
LEFT JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
WHERE c.relname = ANY(%(relations)s::text[])
  AND c.relkind IN ('r', 'p', 'm', 't')
