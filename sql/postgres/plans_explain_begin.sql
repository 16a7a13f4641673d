-- Every EXPLAIN runs in a transaction of its own, READ ONLY from its first statement, with the safety
-- settings re-asserted (a function the planner evaluates may have changed the session's defaults with
-- set_config(..., false)); the caller always rolls it back. {statement_timeout}, {lock_timeout} and
-- {idle_timeout} are composed as literals by the caller.
BEGIN TRANSACTION READ ONLY /* pg-regression-radar */;
SET LOCAL /* pg-regression-radar */ statement_timeout = {statement_timeout};
SET LOCAL /* pg-regression-radar */ lock_timeout = {lock_timeout};
SET LOCAL /* pg-regression-radar */ idle_in_transaction_session_timeout = {idle_timeout};
SET LOCAL /* pg-regression-radar */ default_transaction_read_only = on
