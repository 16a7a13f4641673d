-- Gate: the plan of one workload statement with its first parameter set ($n bound, so a custom plan),
-- and its query identifier (VERBOSE, with compute_query_id on) to find it in pg_stat_statements.
-- Never ANALYZE: the statement itself is not executed. The statement text follows on the next line.
EXPLAIN /* pg-regression-radar */ (VERBOSE, FORMAT JSON)
