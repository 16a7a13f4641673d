-- Gate scenarios: end a transaction a failed benchmark statement left open (or the memory reading's
-- cursor transaction), so the session stays usable for the next statement.
ROLLBACK /* pg-regression-radar */
