-- The end of every EXPLAIN transaction: whatever ran while planning is undone. Session-level advisory
-- locks are the one thing a planned function can take that a rollback does not release: release them.
ROLLBACK /* pg-regression-radar */;
SELECT /* pg-regression-radar */ pg_catalog.pg_advisory_unlock_all()
