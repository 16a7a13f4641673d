"""Live pile-ups from tiny inline snapshots (jobs.detect.pileups)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from jobs.detect.pileups import LOCK_QUEUE, OPEN, RESOLVED, SLOW, PileupConfig, live_pileups

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
EVERY = timedelta(seconds=5)


def snaps(count: int) -> pl.DataFrame:
    return pl.DataFrame({"instance": ["a"] * count, "captured_at": [T0 + i * EVERY for i in range(count)]})


def running(rows: list[tuple[int, int, int, int, float, float]]) -> pl.DataFrame:
    """(snapshot number, queryid, backends, waiting_lock, longest_s, median_s) per row."""
    return pl.DataFrame(
        [
            {
                "instance": "a",
                "captured_at": T0 + n * EVERY,
                "dbid": 5,
                "userid": 10,
                "fingerprint": f"pg:{q}",
                "queryid": q,
                "query": f"select {q} from t where id = $1",
                "backends": b,
                "waiting_lock": w,
                "longest_s": longest,
                "median_s": median,
                "wait_event": "Lock:relation" if w else "CPU",
                "blocker_pid": 42 if w else None,
                "blocker_state": "idle in transaction" if w else None,
                "blocker_queryid": 7 if w else None,
                "blocker_query": "lock table t in access exclusive mode" if w else None,
                "blocker_xact_s": 30.0 if w else None,
            }
            for n, q, b, w, longest, median in rows
        ],
        schema_overrides={"blocker_pid": pl.Int64, "blocker_queryid": pl.Int64, "blocker_xact_s": pl.Float64},
    )


def samples(usual_ms: dict[int, float]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "instance": "a", "dbid": 5, "userid": 10, "queryid": q,
                "interval_end": T0 - timedelta(minutes=1), "calls": 100, "total_exec_time": ms * 100,
            }
            for q, ms in usual_ms.items()
        ]
    )  # fmt: skip


def test_a_lock_queue_opens_once_it_has_waited_and_resolves_at_the_first_snapshot_without_it() -> None:
    queue = [(n, 1, 4, 4, 5.0 * (n - 1), 2.0 * (n - 1)) for n in range(2, 7)]  # waited 5, 10, ..., 25 s
    found = live_pileups(snaps(10), running(queue), samples({1: 2.0}))
    assert found.height == 1
    row = found.row(0, named=True)
    assert (row["cause"], row["status"]) == (LOCK_QUEUE, RESOLVED)
    assert row["first_seen"] == T0 + 3 * EVERY  # the first snapshot where the longest had waited 10 s
    assert row["resolved_at"] == T0 + 7 * EVERY and row["longest_s"] == 25.0
    assert row["blocker_state"] == "idle in transaction" and row["blocker_pid"] == 42


def test_slow_is_judged_against_the_querys_usual_latency() -> None:
    now = [(n, q, 3, 0, 21.0, 20.0) for n in (7, 8, 9) for q in (2, 3, 4)]
    # q2 usually 100 ms: 20 s is 200x; q3 usually 5 s: the bar is 50 s; q4 has no samples: 10 s is the bar
    found = live_pileups(snaps(10), running(now), samples({2: 100.0, 3: 5000.0}))
    assert sorted(found["queryid"].to_list()) == [2, 4]
    assert set(found["status"]) == {OPEN} and set(found["cause"]) == {SLOW}
    assert found.filter(pl.col("queryid") == 2)["usual_ms"].item() == 100.0


def test_two_backends_or_a_short_wait_are_no_pile_up() -> None:
    rows = [(5, 1, 2, 2, 60.0, 60.0), (6, 2, 5, 5, 4.0, 3.0)]
    assert live_pileups(snaps(10), running(rows), samples({})).height == 0


def test_an_open_episode_keeps_its_id_as_snapshots_arrive_and_a_gap_starts_another() -> None:
    first = [(n, 1, 4, 4, 12.0, 11.0) for n in (3, 4)]
    before = live_pileups(snaps(5), running(first), samples({}))
    later = live_pileups(snaps(7), running([*first, (5, 1, 4, 4, 17.0, 16.0)]), samples({}))
    assert before["status"].to_list() == [OPEN] and later["status"].to_list() == [RESOLVED]
    assert before["pileup_id"].to_list() == later["pileup_id"].to_list()
    again = live_pileups(snaps(10), running([*first, (8, 1, 4, 4, 12.0, 11.0)]), samples({}))
    assert again.height == 2 and again["pileup_id"].n_unique() == 2


def test_a_queue_without_query_ids_is_one_statement_by_its_fingerprint() -> None:
    rows = running([(n, 1, 4, 4, 5.0 * n, 5.0 * n) for n in (2, 3, 4)]).with_columns(
        pl.lit(None, dtype=pl.Int64).alias("queryid")  # queued during parse analysis: no query_id yet
    )
    found = live_pileups(snaps(10), rows, samples({1: 2.0}))
    assert found.height == 1 and found["queryid"].to_list() == [None]
    assert found["query"].to_list() == ["select 1 from t where id = $1"] and found["usual_ms"].to_list() == [
        None
    ]


def test_a_higher_min_backends_from_the_config_is_read() -> None:
    rows = [(5, 1, 4, 4, 60.0, 60.0)]
    assert live_pileups(snaps(10), running(rows), samples({}), PileupConfig(min_backends=5)).height == 0
