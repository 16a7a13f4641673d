-- /* pg-regression-radar */ the pin session writes as the pin role only (issue 30; radar setup-sql --pins).
SET /* pg-regression-radar */ ROLE {pin_role}
