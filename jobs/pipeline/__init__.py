"""Runs that span stages: the collection cycle, the detection run, the sharded detection."""
