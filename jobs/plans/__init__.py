"""Plans: capture (pg_store_plans, EXPLAIN GENERIC_PLAN, auto_explain logs) and its safety, setup SQL,
shapes, the plan history in the lake, and plan diffs around a regression (``diff``). ``config`` holds the
thresholds (stdlib-only: the config file loader and the CLI import it without psycopg and polars).
"""
