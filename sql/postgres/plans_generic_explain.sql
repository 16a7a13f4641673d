-- Prefix for a generic plan of one normalized statement ($1 placeholders allowed); never ANALYZE.
-- The statement text follows on the next line; it has been checked to be one plain SELECT statement.
EXPLAIN (FORMAT JSON, GENERIC_PLAN) /* pg-regression-radar */
