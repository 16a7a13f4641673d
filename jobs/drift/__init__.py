"""Distribution drift: the design's scorer (``scorer``, per-execution samples, PASS / WARN / BLOCK), its CI
payload contract (``contract``), anchored baselines (``baselines``), the scoring run (``execution``), its
checks (``checks``), drift flags on findings (``finding_flags``) and the per-interval latency drift of
pg_stat_statements means (``interval``, the labelled cheaper proxy), with their thresholds in ``config``
(stdlib-only, so the config file loader imports no numpy or polars).
"""
