-- Gate scenarios: the cluster's system identifier (may be refused to a role without the privilege).
SELECT /* pg-regression-radar */ (SELECT system_identifier FROM pg_catalog.pg_control_system())::text
