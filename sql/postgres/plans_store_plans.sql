-- The plan pg_store_plans recorded for each wanted queryid: one row per (dbid, queryid), the plan used
-- most recently (the view keeps one row per planid). {relation} is composed as an identifier by the
-- caller (default pg_store_plans; the tests point it at the fixture view radar_fixture.pg_store_plans).
-- The session sets pg_store_plans.plan_format = json (a user-settable parameter) so that plan is JSON.
SELECT /* pg-regression-radar */ DISTINCT ON (dbid, queryid)
    queryid,
    dbid::bigint AS dbid,
    userid::bigint AS userid,
    planid,
    plan,
    calls,
    total_time,
    last_call
FROM {relation}
WHERE queryid = ANY(%(queryids)s::bigint[])
ORDER BY dbid, queryid, last_call DESC NULLS LAST, calls DESC
