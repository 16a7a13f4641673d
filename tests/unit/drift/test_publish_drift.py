"""Per-execution drift made visible: the DuckDB views, flags next to each query, ANALYZE before a change."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from jobs.drift.finding_flags import (
    DRIFT_FLAG_COLUMNS,
    PLAN_CHANGED_COLUMN,
    drift_flags_text,
    latest_execution_drift,
    with_drift_flags,
)
from jobs.drift.scorer import query_hash
from jobs.lake import views as duckdb_views
from jobs.plans.analyses import analyses_before, analyze_note, table_analyses
from jobs.plans.diff import plan_diffs_for_regressions
from jobs.plans.shape import plan_facts
from jobs.schemas.collected import PLAN_SNAPSHOTS
from tests.support.drift_frames import (
    SCORED,
    drift_frame,
    drift_row,
    stats_frame,
    stats_row,
    write_drift,
    write_stats,
)

LATER = SCORED + timedelta(minutes=10)


def _history() -> list[dict]:
    return [
        drift_row("fp-a", "latency", "BLOCK", js=0.4),
        drift_row("fp-a", "latency", "PASS", scored_at=LATER),  # cleared: the latest counts
        drift_row("fp-a", "cost", "WARN", scored_at=LATER),
        drift_row("fp-b", "latency", "WARN", reason="insufficient_samples", n=20, scored_at=LATER),
        drift_row("fp-b", "latency", "PASS", instance="db2", scored_at=LATER),
    ]


def test_latest_view_keeps_insufficient_samples_and_counts_by_flag_and_metric(lake_root: Path) -> None:
    write_drift(lake_root, _history())
    conn = duckdb_views.connect(lake_root)
    latest = conn.execute(
        "select instance, fingerprint, metric, flag, reason from execution_drift_latest "
        "order by instance, fingerprint, metric"
    ).fetchall()
    assert latest == [
        ("db1", "fp-a", "cost", "WARN", "js_warn"),
        ("db1", "fp-a", "latency", "PASS", "within_bands"),
        ("db1", "fp-b", "latency", "WARN", "insufficient_samples"),
        ("db2", "fp-b", "latency", "PASS", "within_bands"),
    ]
    counts = conn.execute(
        "select metric, flag, pairs, insufficient_samples from execution_drift_counts"
    ).fetchall()
    assert counts == [("cost", "WARN", 1, 0), ("latency", "WARN", 1, 1), ("latency", "PASS", 2, 0)]
    # The pure twin says the same.
    pure = latest_execution_drift(drift_frame(_history()))
    pure = pure.sort("instance", "fingerprint", "metric")
    assert pure.select("instance", "fingerprint", "metric", "flag").rows() == [r[:4] for r in latest]


def test_views_on_a_lake_without_drift_or_stats_are_empty_not_errors(lake_root: Path) -> None:
    conn = duckdb_views.connect(lake_root)
    for view in ("execution_drift_latest", "execution_drift_counts", "table_analyses", "table_last_analysed"):
        assert conn.execute(f"select count(*) from {view}").fetchone() == (0,)
    assert latest_execution_drift(None).is_empty()


def test_table_analyses_are_the_changes_of_last_analyze_between_snapshots(lake_root: Path) -> None:
    t0 = SCORED
    a1, a2, auto = t0 - timedelta(days=1), t0 + timedelta(minutes=7), t0 + timedelta(minutes=12)
    rows = [
        stats_row(t0, "orders", last_analyze=a1),
        stats_row(t0 + timedelta(minutes=5), "orders", last_analyze=a1),  # unchanged: no new analysis
        stats_row(t0 + timedelta(minutes=10), "orders", last_analyze=a2),  # moved: ANALYZE in between
        stats_row(t0 + timedelta(minutes=15), "orders", last_analyze=a2, last_autoanalyze=auto),
        stats_row(t0, "items", relid=16400),  # never analysed
    ]
    write_stats(lake_root, rows)
    conn = duckdb_views.connect(lake_root)
    seen = conn.execute(
        "select relname, kind, analysed_at, first_seen_at from table_analyses order by analysed_at"
    ).fetchall()
    assert [(r[0], r[1], r[2], r[3]) for r in seen] == [
        ("orders", "manual", a1, t0),
        ("orders", "manual", a2, t0 + timedelta(minutes=10)),
        ("orders", "auto", auto, t0 + timedelta(minutes=15)),
    ]
    last = conn.execute(
        "select relname, last_analysed_at, kind, analyses_seen from table_last_analysed"
    ).fetchall()
    assert last == [("orders", auto, "auto", 3)]
    pure = table_analyses(stats_frame(rows))
    assert pure.select("relname", "kind", "analysed_at", "first_seen_at").rows() == seen


def test_drift_flags_join_by_fingerprint_hash_and_unscored_is_null() -> None:
    findings = pl.DataFrame(
        {
            "instance": ["db1", "db1", "db2", "db1"],
            "fingerprint": ["fp-a", "fp-b", "fp-a", None],
            "x": [1, 2, 3, 4],
        }
    )
    out = with_drift_flags(findings, drift_frame(_history()))
    assert out.columns == ["instance", "fingerprint", "x", *DRIFT_FLAG_COLUMNS, PLAN_CHANGED_COLUMN]
    assert out.select("x", *DRIFT_FLAG_COLUMNS).rows() == [
        (1, "WARN", "PASS", None),  # fp-a on db1: cost WARN, latency cleared to PASS, cardinality unscored
        (2, None, "WARN", None),  # insufficient_samples is a WARN, shown
        (3, None, None, None),  # fp-a never scored on db2
        (4, None, None, None),  # no fingerprint
    ]
    assert drift_flags_text(out.row(0, named=True)) == "cost WARN · latency PASS · cardinality –"
    empty = with_drift_flags(findings, None)
    assert empty.height == 4 and empty.select(DRIFT_FLAG_COLUMNS).null_count().row(0) == (4, 4, 4)
    assert with_drift_flags(findings.clear(), None).columns[-4:] == [*DRIFT_FLAG_COLUMNS, PLAN_CHANGED_COLUMN]
    assert query_hash("fp-a") == drift_frame(_history())["query_hash"][0]


BEFORE = {
    "Node Type": "Index Scan",
    "Relation Name": "orders",
    "Index Name": "orders_pkey",
    "Total Cost": 8.0,
}
AFTER = {"Node Type": "Seq Scan", "Relation Name": "orders", "Total Cost": 1800.0}


def _plans(change: object, after: dict = AFTER) -> pl.DataFrame:
    rows = []
    # the before plan is stored when first seen (an hour before the change), the after plan just after it
    for at, plan in ((change - timedelta(minutes=60), BEFORE), (change + timedelta(minutes=1), after)):  # type: ignore[operator]
        facts = plan_facts(plan)
        rows.append(
            {
                "instance": "db1",
                "queryid": 111,
                "captured_at": at,
                "source": "generic_explain",
                "is_generic": False,
                "shape_hash": facts.shape_hash,
                "dbname": "app",
                "relations": ["orders"],
                "plan_json": json.dumps(plan),
            }
        )
    schema = {"instance": pl.String(), **dict(PLAN_SNAPSHOTS.polars_schema)}
    return pl.DataFrame(rows, schema={k: schema[k] for k in rows[0]})


def test_plan_diff_names_an_analyze_of_the_querys_table_within_the_window() -> None:
    change = SCORED
    regression = pl.DataFrame(
        {"instance": ["db1"], "queryid": [111], "fingerprint": ["fp"], "status": ["detected"],
         "detected_change_at": [change]}
    )  # fmt: skip

    def diff_with(
        minutes_before: float,
        relname: str = "orders",
        instance: str = "db1",
        before_plan_at: datetime | None = None,
    ) -> dict:
        analysed = change - timedelta(minutes=minutes_before)
        stats = stats_frame(
            [
                stats_row(change - timedelta(hours=2), relname, instance=instance),
                stats_row(
                    change + timedelta(minutes=5), relname, instance=instance, last_autoanalyze=analysed
                ),
            ]
        )
        plans = _plans(change)
        if before_plan_at is not None:
            first = pl.col("captured_at") == pl.col("captured_at").min()
            plans = plans.with_columns(
                pl.when(first)
                .then(pl.lit(before_plan_at))
                .otherwise(pl.col("captured_at"))
                .alias("captured_at")
            )
        diffs = plan_diffs_for_regressions(regression, plans, analyses=table_analyses(stats))
        return diffs.row(0, named=True)

    row = diff_with(18)
    assert row["diff_status"] == "changed"
    assert (
        "ANALYZE of public.orders (autoanalyze) at 2026-11-30 09:42:00 UTC, 18 min before the plan change."
        in row["plan_diff_summary"]
    )
    assert json.loads(row["plan_diff"])["analyze_before_change"] == [
        {
            "table": "public.orders",
            "kind": "auto",
            "analysed_at": "2026-11-30T09:42:00+00:00",
            "minutes_before": 18.0,
        }
    ]
    assert "ANALYZE" in diff_with(30)["plan_diff_summary"], "the window's edge is inside"
    for quiet in (diff_with(31), diff_with(-2), diff_with(5, relname="items"), diff_with(5, instance="db2")):
        assert "ANALYZE" not in quiet["plan_diff_summary"]
        assert "analyze_before_change" not in json.loads(quiet["plan_diff"])
    # An ANALYZE before the before plan was captured cannot explain the change: that plan was still
    # chosen with its statistics (issue 21).
    assert "ANALYZE" not in diff_with(18, before_plan_at=change - timedelta(minutes=10))["plan_diff_summary"]
    assert "ANALYZE" in diff_with(18, before_plan_at=change - timedelta(minutes=20))["plan_diff_summary"]
    # Only the relations of the two diffed plans count, not those of an older plan of the query.
    older = (
        _plans(change)
        .head(1)
        .with_columns(
            pl.lit(change - timedelta(hours=3)).alias("captured_at"),
            pl.lit(["items"]).alias("relations"),
            pl.lit("older").alias("shape_hash"),
        )
    )
    items_stats = stats_frame(
        [
            stats_row(change - timedelta(hours=2), "items"),
            stats_row(change + timedelta(minutes=5), "items", last_autoanalyze=change - timedelta(minutes=5)),
        ]
    )
    with_older = plan_diffs_for_regressions(
        regression, pl.concat([older, _plans(change)]), analyses=table_analyses(items_stats)
    ).row(0, named=True)
    assert with_older["diff_status"] == "changed" and "ANALYZE" not in with_older["plan_diff_summary"]
    unchanged = plan_diffs_for_regressions(regression, _plans(change)).row(0, named=True)
    assert "ANALYZE" not in unchanged["plan_diff_summary"], "no table stats: nothing said"
    stats = stats_frame([stats_row(change, "orders", last_analyze=change - timedelta(minutes=4))])
    same_shape = plan_diffs_for_regressions(
        regression, _plans(change, after={**BEFORE, "Total Cost": 9.0}), analyses=table_analyses(stats)
    ).row(0, named=True)
    assert same_shape["diff_status"] == "unchanged"
    assert same_shape["plan_diff_summary"].endswith("4 min before the change."), "no plan change to name"


def test_analyze_note_words_and_window_edges() -> None:
    change = SCORED
    analyses = table_analyses(
        stats_frame([stats_row(change, "orders", last_analyze=change - timedelta(minutes=3))])
    )
    found = analyses_before(analyses, "db1", ["public.orders"], change, timedelta(minutes=30))
    assert analyze_note(found, change, plan_changed=False) == (
        "ANALYZE of public.orders at 2026-11-30 09:57:00 UTC, 3 min before the change."
    )
    assert analyses_before(analyses, "db1", ["orders"], change, timedelta(minutes=2)) == []
    assert analyses_before(analyses, "db1", ["orders"], change, timedelta(minutes=30), dbname="other") == []
    assert analyze_note([], change) == ""


def test_findings_view_and_table_show_the_drift_flags(lake_root: Path) -> None:
    from rich.console import Console

    from jobs.lake.io import write_table
    from jobs.publish.console import findings_table
    from tests.support.drift_frames import SCORED as AT

    findings = pl.DataFrame(
        {"finding_id": ["f1", "f2"], "status": ["open", "open"], "instance": ["db1", "db1"],
         "fingerprint": ["fp-a", "fp-z"], "query": ["select a", "select z"], "onset": [AT, AT],
         "computed_at": [AT, AT], "run_id": ["r", "r"], "detected_change_at": [AT, AT]}
    )  # fmt: skip
    write_table(lake_root, "finding_states", findings, {"date": "2026-11-30"}, "f")
    write_drift(lake_root, _history())
    conn = duckdb_views.connect(lake_root)
    rows = conn.execute(
        "select finding_id, drift_cost, drift_latency, drift_cardinality from findings_with_drift order by 1"
    ).fetchall()
    assert rows == [("f1", "WARN", "PASS", None), ("f2", None, None, None)]
    console = Console(width=400, record=True)
    console.print(findings_table(with_drift_flags(findings, drift_frame(_history()))))
    text = console.export_text()
    assert "cost WARN · latency PASS · cardinality –" in text
    assert "cost – · latency – · cardinality –" in text
    console = Console(width=400, record=True)
    console.print(findings_table(findings))
    assert "drift" not in console.export_text(), "no drift read: no column"


def test_a_detection_run_names_the_analyze_in_the_finding_and_its_plan_diff(lake_root: Path) -> None:
    from jobs.config.sections import RadarSettings
    from jobs.drift.config import DriftConfig, SampleDriftConfig
    from jobs.lake import io as lake
    from jobs.pipeline.detection import run_detection
    from tests.support.lakes import write_step_change_lake

    deploy_at = write_step_change_lake(lake_root)  # queryid 111 ten times slower from the deploy on
    plans = _plans(deploy_at).with_columns(pl.lit(5, pl.Int64()).alias("dbid")).drop("instance")
    lake.write_table(lake_root, PLAN_SNAPSHOTS, plans, {"instance": "db1", "date": "2026-11-02"}, "p1")
    analysed = deploy_at - timedelta(minutes=12)
    write_stats(
        lake_root,
        [
            stats_row(deploy_at - timedelta(hours=1), "orders"),
            stats_row(deploy_at - timedelta(minutes=5), "orders", last_analyze=analysed),
        ],
    )
    outcome = run_detection(lake_root)
    (finding,) = outcome.findings.filter(pl.col("queryid") == 111).rows(named=True)
    assert "ANALYZE of public.orders at 2026-11-02 10:18:00 UTC" in finding["plan_diff_summary"]
    assert "min before the plan change" in finding["plan_diff_summary"]
    assert "analyze_before_change" in outcome.plan_diffs["plan_diff"][0]
    # The window is [drift.samples] analyze_before_plan_change, carried into the detection config.
    narrow = RadarSettings(
        drift=DriftConfig(samples=SampleDriftConfig(analyze_before_plan_change=timedelta(minutes=5)))
    )
    config = narrow.detection_config(incremental=False)
    assert config.analyze_before_plan_change == timedelta(minutes=5)
    assert RadarSettings().detection_config().analyze_before_plan_change == timedelta(minutes=30)
    quiet = run_detection(lake_root, config)
    assert all("ANALYZE" not in (s or "") for s in quiet.plan_diffs["plan_diff_summary"].to_list())
