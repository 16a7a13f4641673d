-- /* pg-regression-radar */ setup, once per server [PG14+]: EXPLAIN checks SELECT privilege on every
-- relation a query reads; pg_read_all_data gives exactly that (and USAGE on every schema), nothing more.
GRANT /* pg-regression-radar */ pg_read_all_data TO {explain_role};
