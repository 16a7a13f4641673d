-- /* pg-regression-radar */ setup, in the database the radar's DSN names: the collector reads
-- pg_stat_statements (every database's statements) from there. The library must also be in
-- shared_preload_libraries (a restart), or reading the view fails.
CREATE EXTENSION /* pg-regression-radar */ IF NOT EXISTS pg_stat_statements;
