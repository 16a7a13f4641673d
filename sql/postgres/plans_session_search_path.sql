-- explain_mode = session only: resolve the EXPLAINed text with its owner's search_path, for this
-- transaction only.
SELECT /* pg-regression-radar */ pg_catalog.set_config('search_path', %(search_path)s, true)
