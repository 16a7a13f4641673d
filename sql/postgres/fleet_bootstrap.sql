-- Run once when an embedded fleet server starts: the view is readable from the first snapshot on.
CREATE EXTENSION IF NOT EXISTS pg_stat_statements
