"""Detection steps after the latency detector: work per call (work.py), contention (contention.py)."""
