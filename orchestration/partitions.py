"""Partitions shared by the assets: one per UTC day, the same day folders as the lake."""

import dagster as dg

# end_offset=1: today is a partition while it is under way (snapshots land in it as the day goes).
daily = dg.DailyPartitionsDefinition(start_date="2026-01-01", timezone="UTC", end_offset=1)
