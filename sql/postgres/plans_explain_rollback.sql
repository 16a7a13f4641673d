-- The end of every EXPLAIN transaction: whatever ran while planning is undone.
ROLLBACK /* pg-regression-radar */
