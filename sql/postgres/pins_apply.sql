-- /* pg-regression-radar */ apply a plan pin (issue 30): the last good plan's hints for every later execution of
-- the query id. A plain INSERT: it fails when the query id already has a row for that application_name, so a pin
-- never overwrites a hint someone else wrote, and deleting this row restores the table exactly.
INSERT INTO hint_plan.hints (query_id, application_name, hints) VALUES ({query_id}, {application_name}, {hints});
