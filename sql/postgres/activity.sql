-- The instance's sessions at this snapshot (pg_stat_activity), aggregated on the server: one row, however
-- many connections. The radar's own session is left out. A backend with no wait event is running on a CPU
-- or waiting for one: that count is the CPU demand the contention step reads (jobs/detect/load.py).
-- Needs pg_read_all_stats (pg_monitor): without it other roles' sessions show no backend_type or state
-- (counted as hidden, and the collector records no row rather than wrong counts).
SELECT /* pg-regression-radar */
    count(*) FILTER (WHERE backend_type = 'client backend') AS backends,
    count(*) FILTER (WHERE backend_type = 'client backend' AND state = 'active') AS active,
    count(*) FILTER (
        WHERE backend_type = 'client backend' AND state = 'active' AND wait_event_type IS NULL
    ) AS active_on_cpu,
    count(*) FILTER (
        WHERE backend_type = 'client backend' AND state = 'active' AND wait_event_type = 'Lock'
    ) AS waiting_lock,
    count(*) FILTER (
        WHERE backend_type = 'client backend' AND state = 'active' AND wait_event_type = 'LWLock'
    ) AS waiting_lwlock,
    count(*) FILTER (
        WHERE backend_type = 'client backend' AND state = 'active' AND wait_event_type = 'IO'
    ) AS waiting_io,
    count(*) FILTER (
        WHERE backend_type = 'client backend' AND state = 'active'
            AND wait_event_type NOT IN ('Lock', 'LWLock', 'IO')
    ) AS waiting_other,
    count(*) FILTER (WHERE backend_type = 'parallel worker') AS parallel_workers,
    extract(epoch FROM max(clock_timestamp() - query_start) FILTER (
        WHERE backend_type = 'client backend' AND state = 'active'
    ))::float8 AS oldest_active_s,
    count(*) FILTER (WHERE backend_type IS NULL) AS hidden
FROM pg_stat_activity
WHERE pid <> pg_backend_pid()
