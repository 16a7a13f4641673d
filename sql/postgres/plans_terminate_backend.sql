-- The watchdog's last resort: a planned function that catches the statement_timeout cancellation (a
-- plpgsql EXCEPTION WHEN query_canceled) would keep the EXPLAIN running; terminating its backend cannot be
-- caught. Only our own session is ever named: same login, so no extra privilege is needed.
SELECT /* pg-regression-radar */ pg_catalog.pg_terminate_backend(%(pid)s)
