-- Apply, for this session, the superuser-only settings the login was found allowed to set (the first
-- session of an instance; later sessions get them as startup options).
SELECT /* pg-regression-radar */ pg_catalog.set_config(name, value, false)
FROM ROWS FROM (pg_catalog.unnest(%(names)s::text[]), pg_catalog.unnest(%(values)s::text[])) AS s(name, value)
