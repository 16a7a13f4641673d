-- Gate scenarios: the parallel workers of one backend right now (read from a second, monitor session).
SELECT /* pg-regression-radar */ pid FROM pg_catalog.pg_stat_activity WHERE leader_pid = $1 AND pid <> $1
