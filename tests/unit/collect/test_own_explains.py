"""The collector tells the plan capture's own EXPLAIN rows from the EXPLAINs other sessions ran: the
detector design's skipped-EXPLAIN counter counts the first, ``explain_rows_dropped`` the second."""

from __future__ import annotations

from datetime import UTC, datetime

from jobs.collect.collector import count_own_explains, drop_own_rows, statements_frame

AT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
IDENTITY = {"captured_at": AT, "system_identifier": 7, "postmaster_start": AT}


def test_own_explains_others_explains_and_own_statements_are_counted_apart() -> None:
    rows = [
        {"queryid": 1, "calls": 5},  # the workload
        {"queryid": 2, "calls": 1},  # the capture's EXPLAIN (marker + EXPLAIN)
        {"queryid": 3, "calls": 1},  # the collector's own snapshot query (marker only)
        {"queryid": 4, "calls": 1},  # somebody's EXPLAIN
    ]
    own, explain = {2, 3}, {2, 4}
    assert count_own_explains(rows, own, explain) == 1
    kept, own_dropped = drop_own_rows(rows, own)
    statements, others_explain, hidden = statements_frame(kept, IDENTITY, None, explain)
    assert (own_dropped, others_explain, hidden) == (2, 1, 0)
    assert statements["queryid"].to_list() == [1]
