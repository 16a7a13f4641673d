"""Detection steps after the latency detector: regressions of work, contention vs regression (issue 8)."""
