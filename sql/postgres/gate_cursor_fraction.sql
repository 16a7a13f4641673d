-- Gate scenarios: the memory reading's cursor is planned as the statement itself (all rows fetched),
-- not for a fast start (cursor_tuple_fraction 0.1 by default), for this transaction only.
SELECT /* pg-regression-radar */ pg_catalog.set_config('cursor_tuple_fraction', '1', true)
