"""What the Dagster UI shows: metadata tables that render as tables, partitions that can all be
materialized, owners and freshness on the collection assets (real `dagster.materialize`, real lake files)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from jobs.lake import io as lake
from jobs.publish.markdown import escape_cell, format_ms, format_p_value, format_ratio, markdown_table
from orchestration.partitions import COLLECTION_DAYS, lake_days, register_collection_days
from tests.support.dagster_metadata import parsed_cells
from tests.support.lakes import snapshot_frame, snapshot_row, write_snapshot_files

UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of each table line, split on unescaped pipes (the outer ones dropped)."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    return [UNESCAPED_PIPE.split(line.strip())[1:-1] for line in lines]


def test_cells_are_formatted_for_people() -> None:
    assert format_p_value(1.3472e-31) == "< 1e-10"
    assert format_p_value(1.3472e-6) == "1.3e-06"
    assert format_p_value(0.0421) == "0.0421"
    assert format_ratio(82.4) == "×82"
    assert format_ratio(1.4) == "×1.4"
    assert format_ms(12.34) == "12.3 ms"
    assert format_ms(4560.0) == "4.56 s"
    assert escape_cell("a|b\nc") == "a\\|b ⏎ c"
    assert escape_cell("select * from t where a_b * 2") == "select \\* from t where a\\_b \\* 2"
    assert escape_cell("x" * 300, max_width=20) == "x" * 19 + "…"


def test_markdown_table_parses_with_every_cell_in_its_column() -> None:
    frame = pl.DataFrame(
        {
            "query": ["select a | b from t", "select * from t_1\nunion select <b>2</b> [x](y)"],
            "before_mean_ms": [1.5, 2500.0],
            "slowdown_ratio": [82.0, 1.4],
            "p_value": [1.3472e-31, 2.5e-4],
            "detected_change_at": [datetime(2026, 11, 29, 10, 5, 59, tzinfo=UTC)] * 2,
            "plan_diff_summary": ["Seq Scan → Index Scan; " * 20, None],
        }
    )
    text = markdown_table(frame)
    rows = table_rows(text)
    assert len(rows) == 4 and all(len(row) == len(frame.columns) for row in rows)
    cells = parsed_cells(text)
    assert cells[0] == frame.columns
    assert [len(row) for row in cells] == [6, 6, 6]
    first, second = cells[1], cells[2]
    assert first[0] == "select a | b from t"  # the escaped pipe is text in its cell
    assert first[1:5] == ["1.5 ms", "×82", "< 1e-10", "2026-11-29T10:05Z"]
    assert second[1:4] == ["2.5 s", "×1.4", "2.5e-04"]
    assert first[5].endswith("…") and len(first[5]) <= 120
    assert second[0] == "select * from t_1 ⏎ union select <b>2</b> [x](y)"  # shown as written
    assert second[5] == ""


def test_markdown_table_says_when_it_cuts_and_when_it_is_empty() -> None:
    assert markdown_table(pl.DataFrame({"a": []})) == "_(no rows)_"
    text = markdown_table(pl.DataFrame({"a": list(range(60))}), max_rows=50)
    assert len(table_rows(text)) == 52 and "10 more rows not shown (60 in all)" in text


# ---------------------------------------------------------------------------------------------------------
# Partitions: none that can never be materialized


def test_snapshots_are_now_only_and_samples_partitions_are_the_collected_days(lake_root: Path) -> None:
    from orchestration.assets.samples import query_samples
    from orchestration.assets.snapshots import statement_snapshots
    from orchestration.definitions import defs

    assert statement_snapshots.partitions_def is None  # no past partition to offer as a backfill
    days_def = query_samples.partitions_def
    assert isinstance(days_def, dg.DynamicPartitionsDefinition) and days_def.name == COLLECTION_DAYS
    # Every partitioned asset's partitions are the days on which something was collected: none before.
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        partitions = graph.get(key).partitions_def
        assert partitions is None or isinstance(
            partitions, dg.DynamicPartitionsDefinition | dg.WeeklyPartitionsDefinition
        ), key
    at = datetime(2026, 11, 29, 23, 59, tzinfo=UTC)
    rows = [snapshot_row("db1", at, 1, 10, 1.0), snapshot_row("db1", at + timedelta(minutes=2), 1, 20, 1.0)]
    snapshots = snapshot_frame(rows)
    runs = snapshots.select("instance", "captured_at").unique().with_columns(pl.lit("ok").alias("status"))
    write_snapshot_files(lake_root, snapshots, runs)
    assert lake_days(lake_root) == ["2026-11-29", "2026-11-30"]
    with dg.instance_for_test() as instance:
        assert days_def.get_partition_keys(dynamic_partitions_store=instance) == []
        assert register_collection_days(instance, lake_days(lake_root)) == ["2026-11-29", "2026-11-30"]
        assert register_collection_days(instance, ["2026-11-30"]) == []
        assert days_def.get_partition_keys(dynamic_partitions_store=instance) == ["2026-11-29", "2026-11-30"]


def test_samples_schedule_waits_for_a_collected_day() -> None:
    from orchestration.schedules import samples_schedule, snapshot_schedule

    tick = datetime(2026, 11, 29, 0, 15, tzinfo=UTC)
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(instance=instance, scheduled_execution_time=tick)
        assert isinstance(samples_schedule(context), dg.SkipReason)
        instance.add_dynamic_partitions(COLLECTION_DAYS, ["2026-11-29"])
        request = samples_schedule(
            dg.build_schedule_context(instance=instance, scheduled_execution_time=tick)
        )
        assert isinstance(request, dg.RunRequest) and request.partition_key == "2026-11-29"
        snapshot = snapshot_schedule(
            dg.build_schedule_context(instance=instance, scheduled_execution_time=tick)
        )
    assert isinstance(snapshot, dg.RunRequest) and snapshot.partition_key is None


# ---------------------------------------------------------------------------------------------------------
# Owners, descriptions, freshness


def test_collection_assets_have_owners_descriptions_and_freshness() -> None:
    from orchestration.definitions import defs
    from orchestration.freshness import cron_period, late_after

    assert cron_period("* * * * *") == timedelta(minutes=1)
    assert cron_period("5-59/15 * * * *") == timedelta(minutes=15)
    assert cron_period("30 1 * * *") == timedelta(days=1)
    graph = defs.resolve_asset_graph()
    expected = {
        "statement_snapshots": late_after("* * * * *", 3.0),
        "plan_snapshots": late_after("* * * * *", 3.0),
        "query_samples": late_after("*/15 * * * *", 3.0),
    }
    for name, fail_after in expected.items():
        node = graph.get(dg.AssetKey(name))
        assert node.owners == ["team:dba"], name
        assert node.description and len(node.description) > 40, name
        policy = node.freshness_policy
        assert isinstance(policy, dg.FreshnessPolicy), name
        assert policy.fail_window.to_timedelta() == fail_after, name


@pytest.mark.parametrize("periods", [0.5])
def test_freshness_periods_below_one_is_refused(periods: float) -> None:
    from jobs.config.loader import load_settings
    from jobs.errors import ConfigError

    with pytest.raises(ConfigError, match="freshness_periods"):
        load_settings(None, env={"RADAR_SCHEDULES__FRESHNESS_PERIODS": str(periods)})


def test_lake_days_ignore_empty_day_folders(lake_root: Path) -> None:
    (lake_root / "snapshot_runs" / "instance=db1" / "date=2026-11-01").mkdir(parents=True)
    assert lake_days(lake_root) == []
    assert not lake.table_files(lake_root, "snapshot_runs")
