-- Role names by oid: a captured text is EXPLAINed with its owner's default search_path ("$user", public),
-- so "$user" must be the name of the role that ran it (pg_stat_statements.userid).
SELECT /* pg-regression-radar */ oid::bigint AS userid, rolname
FROM pg_catalog.pg_roles
WHERE oid = ANY(%(userids)s::oid[])
