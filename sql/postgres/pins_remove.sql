-- /* pg-regression-radar */ remove a plan pin (issue 30): only the row the pin inserted, and only while it still
-- holds the pin's hints (a row someone changed since is left alone).
DELETE FROM hint_plan.hints WHERE query_id = {query_id} AND application_name = {application_name} AND hints = {hints};
