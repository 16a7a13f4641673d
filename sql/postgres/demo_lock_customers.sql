-- The demo's harmless latency bump: row locks on a tenth of the customers, held briefly in a loop.
-- Writers of those rows wait inside the executor, so the wait shows in total_exec_time (a table LOCK
-- would not: it is taken at parse analysis, before execution is timed).
SELECT id FROM demo_customers WHERE id <= 2000 FOR UPDATE
