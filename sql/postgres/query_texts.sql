-- Texts only for the queryids the lake has not seen: the text file can be hundreds of MB, so the
-- snapshot itself reads with showtext := false and this runs only when something new appeared.
SELECT /* pg-regression-radar */ DISTINCT ON (queryid) queryid, dbid, userid,
    (SELECT d.datname FROM pg_database d WHERE d.oid = dbid) AS datname, query
FROM pg_stat_statements(showtext := true)
WHERE queryid = ANY(%(queryids)s::bigint[])
ORDER BY queryid, dbid, userid
