"""Plan diffs: the structured fields, the summary, and matching snapshots to detected regressions."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from jobs.lake import views as duckdb_views
from jobs.lake.io import scan_table, write_table
from jobs.plans.config import PlanDiffConfig
from jobs.plans.diff import (
    attach_plan_diffs,
    diff_plans,
    plan_diff_rows,
    plan_diffs_for_regressions,
    write_plan_diffs,
)
from jobs.plans.history import store_snapshot_rows
from jobs.plans.shape import plan_facts
from jobs.schemas.collected import PLAN_SNAPSHOTS
from tests.support.lakes import detected_regression

INDEX = {
    "Node Type": "Aggregate",
    "Total Cost": 47.7,
    "Plans": [
        {
            "Node Type": "Bitmap Heap Scan",
            "Relation Name": "orders",
            "Total Cost": 47.0,
            "Plan Rows": 12,
            "Plans": [
                {"Node Type": "Bitmap Index Scan", "Index Name": "orders_customer_idx", "Plan Rows": 12}
            ],
        }
    ],
}
SEQ = {
    "Node Type": "Finalize Aggregate",
    "Total Cost": 18554.0,
    "Plans": [
        {
            "Node Type": "Gather",
            "Plans": [
                {
                    "Node Type": "Seq Scan",
                    "Relation Name": "orders",
                    "Parallel Aware": True,
                    "Plan Rows": 5,
                    "Actual Rows": 9000.0,
                }
            ],
        }
    ],
}


def test_diff_plans_reports_nodes_indexes_cost_row_errors_and_caution() -> None:
    diff = diff_plans(json.dumps([{"Plan": INDEX}]), SEQ, before_generic=True)
    assert diff.shape_changed and diff.root_changed
    assert diff.root_before == "Aggregate" and diff.root_after == "Finalize Aggregate"
    assert {"Seq Scan", "Gather"} <= set(diff.node_types_added)
    assert "Bitmap Index Scan" in diff.node_types_removed
    assert diff.indexes_removed == ["orders_customer_idx"] and diff.relations_added == []
    assert diff.cost_moved and diff.cost_ratio is not None and diff.cost_ratio > 300
    assert diff.row_estimate_errors and diff.row_estimate_errors[0]["side"] == "after"
    assert diff.row_estimate_errors[0]["factor"] >= 1000
    assert any("generic plan" in c and "before" in c for c in diff.cautions)
    for needle in ("Bitmap Heap Scan on orders", "Seq Scan on orders", "-orders_customer_idx", "Caution"):
        assert needle in diff.summary
    assert json.loads(diff.to_json())["indexes_removed"] == ["orders_customer_idx"]


def test_diff_plans_same_shape_small_cost_move_is_quiet() -> None:
    cheaper = json.loads(json.dumps(INDEX))
    cheaper["Total Cost"] = 40.0
    diff = diff_plans(INDEX, cheaper, config=PlanDiffConfig(cost_change_ratio=2.0))
    assert not diff.shape_changed and not diff.cost_moved and not diff.cautions
    assert "unchanged" in diff.summary
    assert diff_plans(INDEX, cheaper, config=PlanDiffConfig(cost_change_ratio=1.1)).cost_moved


def _snapshots(rows: list[tuple[int, datetime, str, dict]]) -> pl.DataFrame:
    out = []
    for queryid, at, source, plan in rows:
        facts = plan_facts(plan)
        out.append(
            {
                "instance": "alpha",
                "queryid": queryid,
                "captured_at": at,
                "source": source,
                "is_generic": source == "generic_explain",
                "shape_hash": facts.shape_hash,
                "root_node": facts.root_node,
                "total_cost": facts.total_cost,
                "indexes": facts.indexes,
                "plan_json": json.dumps(plan),
            }
        )
    return pl.DataFrame(out, schema={"instance": pl.String(), **dict(PLAN_SNAPSHOTS.polars_schema)}).select(
        "instance",
        "queryid",
        "captured_at",
        "source",
        "is_generic",
        "shape_hash",
        "root_node",
        "total_cost",
        "indexes",
        "plan_json",
    )


def test_plan_diffs_for_regressions_matches_instance_and_any_queryid() -> None:
    t = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    snaps = _snapshots(
        [
            (11, t - timedelta(minutes=30), "generic_explain", SEQ),  # older, superseded
            (11, t - timedelta(minutes=10), "generic_explain", INDEX),  # the plan before the change
            (22, t + timedelta(minutes=1), "generic_explain", SEQ),  # table recreated: new queryid
        ]
    )
    regressions = pl.DataFrame(
        {
            "instance": ["alpha", "alpha", "beta"],
            "queryid": [22, 33, 22],
            "queryids": ["11,22", "33", "22"],
            "fingerprint": ["fp1", "fp2", "fp1"],
            "series": ["5:fp1", "5:fp2", "5:fp1"],
            "status": ["detected", "detected", "detected"],
            "detected_change_at": [t, t, t],
        }
    )
    diffs = plan_diffs_for_regressions(regressions, snaps)
    assert diffs.height == 3
    first = diffs.row(0, named=True)
    assert first["diff_status"] == "changed" and first["before_captured_at"] == t - timedelta(minutes=10)
    assert "Seq Scan on orders" in first["plan_diff_summary"] and "Caution" in first["plan_diff_summary"]
    assert json.loads(first["plan_diff"])["indexes_removed"] == ["orders_customer_idx"]
    assert diffs["diff_status"].to_list()[1:] == ["no_plans", "no_plans"], "other query / other instance"
    attached = attach_plan_diffs(regressions, diffs)
    assert attached.height == 3 and attached["plan_diff_summary"].null_count() == 0


def test_plan_diffs_skips_non_detected_and_reports_missing_sides() -> None:
    t = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    snaps = _snapshots(
        [(1, t - timedelta(minutes=10), "auto_explain", INDEX), (2, t + timedelta(1), "auto_explain", SEQ)]
    )
    regressions = pl.DataFrame(
        {
            "instance": ["alpha"] * 3,
            "queryid": [1, 2, 1],
            "fingerprint": ["a", "b", "c"],
            "status": ["detected", "detected", "no_regression"],
            "detected_change_at": [t, t, t],
        }
    )
    diffs = plan_diffs_for_regressions(regressions, snaps)
    assert diffs["diff_status"].to_list() == ["no_new_shape", "no_before"]
    assert "generic" not in diffs["plan_diff_summary"][0]


def test_duckdb_views_attach_plan_diff_to_detected_regressions(lake_root: Path) -> None:
    t = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    snaps = _snapshots(
        [
            (1, t - timedelta(minutes=1), "generic_explain", INDEX),
            (1, t + timedelta(1), "generic_explain", SEQ),
        ]
    )
    store_snapshot_rows(lake_root, "alpha", snaps.drop("instance"), "s1")
    regressions = pl.DataFrame(
        {
            "analysis": ["deploy", "deploy"],
            "instance": ["alpha", "alpha"],
            "queryid": [1, 2],
            "fingerprint": ["fp1", "fp2"],
            "status": ["detected", "no_regression"],
            "detected_change_at": [t, t],
        }
    )
    write_table(lake_root, "performance_regressions", regressions, {"date": "2026-11-29"}, "r1")
    write_plan_diffs(lake_root, plan_diffs_for_regressions(regressions, snaps), t)
    conn = duckdb_views.connect(lake_root)
    rows = conn.execute(
        "SELECT fingerprint, diff_status, plan_diff_summary FROM regressions_with_plan_diff"
    ).fetchall()
    assert len(rows) == 1 and rows[0][:2] == ("fp1", "changed") and "Seq Scan on orders" in rows[0][2]
    changes = conn.execute(
        "SELECT root_before, root_after FROM plan_shape_changes ORDER BY changed_at"
    ).fetchall()
    assert changes == [(None, "Aggregate"), ("Aggregate", "Finalize Aggregate")]
    assert conn.execute("SELECT count(*) FROM plans_latest").fetchone() == (1,)


def test_shape_change_shortly_before_a_late_change_point_still_counts() -> None:
    t = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    regression = detected_regression(t, queryid=1, fingerprint="a")
    late = _snapshots(
        [
            (1, t - timedelta(minutes=30), "generic_explain", INDEX),
            (1, t - timedelta(seconds=20), "generic_explain", SEQ),
        ]
    )
    diff = plan_diffs_for_regressions(regression, late, PlanDiffConfig(change_tolerance=timedelta(minutes=1)))
    assert diff["diff_status"].to_list() == ["changed"]
    assert diff["before_captured_at"][0] == t - timedelta(minutes=30)
    strict = plan_diffs_for_regressions(regression, late, PlanDiffConfig(change_tolerance=timedelta(0)))
    assert strict["diff_status"].to_list() == ["no_new_shape"]
    old = _snapshots(
        [
            (1, t - timedelta(minutes=30), "generic_explain", INDEX),
            (1, t - timedelta(minutes=10), "generic_explain", SEQ),
        ]
    )
    diff = plan_diffs_for_regressions(regression, old, PlanDiffConfig(change_tolerance=timedelta(minutes=1)))
    assert diff["diff_status"].to_list() == ["no_new_shape"], "a shape change long before is not the cause"


def test_first_capture_shortly_before_the_change_is_not_a_plan_change() -> None:
    t = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    regression = detected_regression(t, queryid=1, fingerprint="a")
    first = _snapshots([(1, t - timedelta(seconds=20), "generic_explain", INDEX)])
    diff = plan_diffs_for_regressions(
        regression, first, PlanDiffConfig(change_tolerance=timedelta(minutes=1))
    )
    assert diff["diff_status"].to_list() == ["no_new_shape"]
    assert "No plan change recorded" in diff["plan_diff_summary"][0]
    assert "Bitmap Heap Scan on orders" in diff["plan_diff_summary"][0]


def test_a_real_auto_explain_plan_after_the_change_confirms_the_generic_estimate() -> None:
    t = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    snaps = _snapshots(
        [
            (11, t - timedelta(minutes=10), "generic_explain", INDEX),
            (11, t + timedelta(seconds=5), "generic_explain", SEQ),
            (11, t + timedelta(seconds=7), "auto_explain", SEQ),
        ]
    ).with_columns(pl.Series("duration_ms", [None, None, 28.2], dtype=pl.Float64))
    regressions = detected_regression(t, queryid=11, fingerprint="fp")
    row = plan_diffs_for_regressions(regressions, snaps).row(0, named=True)
    assert (
        "Confirmed by a real plan logged by auto_explain at 12:00:07 (same shape, 28.2 ms)"
        in (row["plan_diff_summary"])
    )
    assert json.loads(row["plan_diff"])["real_plan_after"]["same_shape_as_after"] is True
    # A real plan of another shape is reported as disagreeing with the estimate, not as confirmation.
    other = snaps.with_columns(
        pl.when(pl.col("source") == "auto_explain")
        .then(pl.lit("other-shape"))
        .otherwise("shape_hash")
        .alias("shape_hash")
    )
    summary = plan_diffs_for_regressions(regressions, other)["plan_diff_summary"][0]
    assert "differs from the generic estimate" in summary and "Confirmed" not in summary


def test_each_finding_of_a_drop_restore_redrop_diffs_the_plan_just_before_against_the_first_after() -> None:
    """Plans: INDEX before t1, SEQ after t1 (index dropped), INDEX after t2 (restored), SEQ after t3.

    With the latest plan as the "after" side, the t1 finding compared INDEX (t2, restored) with SEQ (t3)
    or, before t3, said "unchanged"; it must be INDEX → SEQ of t1 itself, and so must the t3 finding.
    """
    t1 = datetime(2026, 11, 30, 9, 40, tzinfo=UTC)
    t2, t3 = t1 + timedelta(minutes=7), t1 + timedelta(minutes=13)
    seconds = timedelta(seconds=15)
    snaps = _snapshots(
        [
            (11, t1 - timedelta(minutes=30), "generic_explain", INDEX),
            (11, t1 + seconds, "generic_explain", SEQ),
            (11, t2 + seconds, "generic_explain", INDEX),
            (11, t3 + seconds, "generic_explain", SEQ),
        ]
    )
    regressions = pl.DataFrame(
        {
            "instance": ["alpha", "alpha"],
            "queryid": [11, 11],
            "fingerprint": ["fp", "fp"],
            "status": ["detected", "detected"],
            "detected_change_at": [t1, t3],
        }
    )
    diffs = plan_diffs_for_regressions(regressions, snaps)
    first, second = diffs.row(0, named=True), diffs.row(1, named=True)
    assert first["diff_status"] == second["diff_status"] == "changed"
    assert (first["before_captured_at"], first["after_captured_at"]) == (
        t1 - timedelta(minutes=30),
        t1 + seconds,
    )
    assert (second["before_captured_at"], second["after_captured_at"]) == (t2 + seconds, t3 + seconds)
    for row in (first, second):
        assert "Bitmap Heap Scan on orders" in row["plan_diff_summary"].split("→")[0]
        assert "Seq Scan on orders" in row["plan_diff_summary"].split("→")[1]
        assert json.loads(row["plan_diff"])["indexes_removed"] == ["orders_customer_idx"]
        # The latest plan (t3's SEQ) has the first-after plan's shape: nothing more to say.
        assert "changed again" not in row["plan_diff_summary"]
        assert "latest_plan" not in json.loads(row["plan_diff"])


def test_a_latest_plan_of_another_shape_than_the_first_after_is_named() -> None:
    """After the restore the latest plan is the old one again: the t1 diff still says INDEX → SEQ and
    adds that the plan has since gone back."""
    t1 = datetime(2026, 11, 30, 9, 40, tzinfo=UTC)
    snaps = _snapshots(
        [
            (11, t1 - timedelta(minutes=30), "generic_explain", INDEX),
            (11, t1 + timedelta(seconds=15), "generic_explain", SEQ),
            (11, t1 + timedelta(minutes=7), "generic_explain", INDEX),
        ]
    )
    regression = detected_regression(t1, queryid=11, fingerprint="fp")
    row = plan_diffs_for_regressions(regression, snaps).row(0, named=True)
    assert row["diff_status"] == "changed"
    assert row["after_captured_at"] == t1 + timedelta(seconds=15)
    assert (
        "Later, at 2026-11-30 09:47:00 (generic_explain), the plan changed again to Bitmap Heap Scan on "
        "orders (root node Finalize Aggregate → Aggregate; indexes +orders_customer_idx); the current plan "
        "is the one before the change again." in row["plan_diff_summary"]
    )
    latest = json.loads(row["plan_diff"])["latest_plan"]
    assert latest["same_shape_as_before"] is True and latest["captured_at"] == "2026-11-30T09:47:00+00:00"
    assert latest["root_changed"] is True and latest["indexes_added"] == ["orders_customer_idx"]
    assert (
        "later plan",
        "Finalize Aggregate",
        "Aggregate 2026-11-30T09:47 (the plan before the change again)",
    ) in (plan_diff_rows(row["plan_diff"]))


def test_a_shape_change_shortly_before_a_late_change_point_wins_over_a_later_restore() -> None:
    t = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    snaps = _snapshots(
        [
            (1, t - timedelta(minutes=30), "generic_explain", INDEX),
            (1, t - timedelta(seconds=20), "generic_explain", SEQ),  # the change, located 20 s late
            (1, t + timedelta(minutes=5), "generic_explain", INDEX),  # restored later
        ]
    )
    regression = detected_regression(t, queryid=1, fingerprint="a")
    row = plan_diffs_for_regressions(
        regression, snaps, PlanDiffConfig(change_tolerance=timedelta(minutes=1))
    ).row(0, named=True)
    assert row["diff_status"] == "changed"
    assert (row["before_captured_at"], row["after_captured_at"]) == (
        t - timedelta(minutes=30),
        t - timedelta(seconds=20),
    )
    assert "the current plan is the one before the change again" in row["plan_diff_summary"]


def test_a_shape_change_stamped_at_the_change_point_is_the_after_plan_when_nothing_later_is() -> None:
    """Plans are captured just after their snapshot: the capture stamped with the change point's snapshot
    time can already show the new plan (make demo: the Seq Scan captured in the cycle of the change)."""
    t = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    snaps = _snapshots(
        [
            (11, t - timedelta(minutes=10), "generic_explain", INDEX),
            (11, t, "generic_explain", SEQ),
        ]
    )
    regressions = detected_regression(t, queryid=11, fingerprint="fp1", queryids="11")
    row = plan_diffs_for_regressions(regressions, snaps).row(0, named=True)
    assert row["diff_status"] == "changed", row["plan_diff_summary"]
    assert row["before_captured_at"] == t - timedelta(minutes=10) and row["after_captured_at"] == t
    assert "Seq Scan on orders" in row["plan_diff_summary"]


@pytest.mark.parametrize("restored_after", [timedelta(minutes=8), timedelta(seconds=112)])
def test_a_drop_stamped_at_the_change_point_is_the_after_plan_despite_a_later_restore(
    restored_after: timedelta,
) -> None:
    """Issue 21: the capture of the change point's cycle shows the Seq Scan (index dropped), the index is
    restored 8 minutes later. The finding's diff is the drop (INDEX → SEQ), the restore a separate note;
    the restore once became the "after" and the diff read SEQ → INDEX, the opposite of what happened.
    112 s is the soak test's case: a restore inside the 2-minute tolerance is still farther away than the
    drop's capture, stamped at the change point."""
    t = datetime(2026, 11, 29, 21, 28, tzinfo=UTC)
    snaps = _snapshots(
        [
            (11, t - timedelta(minutes=10), "generic_explain", INDEX),
            (11, t, "generic_explain", SEQ),
            (11, t + restored_after, "generic_explain", INDEX),
        ]
    )
    row = plan_diffs_for_regressions(detected_regression(t, queryid=11, fingerprint="fp"), snaps).row(
        0, named=True
    )
    assert (row["before_captured_at"], row["after_captured_at"]) == (t - timedelta(minutes=10), t)
    summary = row["plan_diff_summary"]
    assert summary.startswith("Plan changed: Bitmap Heap Scan on orders → Seq Scan on orders."), summary
    assert json.loads(row["plan_diff"])["indexes_removed"] == ["orders_customer_idx"]
    later = f"Later, at {t + restored_after:%Y-%m-%d %H:%M:%S}"
    assert later in summary and "the one before the change again" in summary


def test_a_same_shape_cost_change_stored_by_the_capture_is_the_findings_diff(lake_root: Path) -> None:
    """The capture stores a same-shape plan again when its estimated cost moved ×2 or more
    ([plans] cost_change_ratio); the finding's diff then shows that cost change (cost_changed)."""
    t = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    grown = {**INDEX, "Total Cost": 47.7 * 30}
    rows = _snapshots(
        [
            (11, t - timedelta(minutes=10), "generic_explain", INDEX),
            (11, t + timedelta(minutes=1), "generic_explain", grown),
        ]
    )
    for captured_at in rows["captured_at"]:
        one = rows.filter(pl.col("captured_at") == captured_at).drop("instance")
        store_snapshot_rows(lake_root, "alpha", one, f"s{captured_at:%H%M}", cost_change_ratio=2.0)
    snaps = scan_table(lake_root, "plan_snapshots").collect()
    assert snaps.height == 2, "same shape, cost ×30: stored again"
    row = plan_diffs_for_regressions(detected_regression(t, queryid=11, fingerprint="fp"), snaps).row(
        0, named=True
    )
    assert row["diff_status"] == "cost_changed", row["plan_diff_summary"]
    assert row["plan_diff_summary"].startswith("Plan shape unchanged (Bitmap Heap Scan on orders). ")
    assert "Estimated cost 47.7 → 1,431.0 (×30)." in row["plan_diff_summary"]
