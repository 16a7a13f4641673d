"""Dagster assets materialized for real: embedded fleet in, lake files out."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl
import psycopg
import pytest
from psycopg.types.numeric import Int4

from jobs.lake import io as lake
from jobs.local.embedded import EmbeddedFleet
from orchestration.assets.deploys import deploy_events
from orchestration.assets.samples import query_samples
from orchestration.assets.snapshots import statement_snapshots
from orchestration.definitions import defs
from orchestration.resources import DeployInboxResource, FleetResource, LakeResource
from orchestration.schedules import snapshot_schedule
from orchestration.sensors import deploy_inbox_sensor
from tests.support.dagster_metadata import check_regressions_metadata
from tests.support.lakes import write_step_change_lake

pytestmark = pytest.mark.postgres


def resources(fleet: EmbeddedFleet, lake_root: Path, inbox: Path) -> dict[str, object]:
    return {
        "fleet": FleetResource(embedded_root=str(fleet.root)),
        "lake": LakeResource(root=str(lake_root)),
        "inbox": DeployInboxResource(inbox=str(inbox)),
    }


def test_definitions_load() -> None:
    assert defs.resolve_job_def("snapshot_job") is not None
    keys = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"statement_snapshots", "query_samples", "deploy_events"} <= keys


def test_snapshot_and_samples_assets_materialize_on_real_lake_files(
    pg_fleet: EmbeddedFleet, lake_root: Path, tmp_path: Path
) -> None:
    today = datetime.now(UTC).date().isoformat()
    res = resources(pg_fleet, lake_root, tmp_path / "inbox")
    with psycopg.connect(pg_fleet.server("alpha").dsn, autocommit=True) as conn:
        conn.execute("create table if not exists orchestration_stats_t (i int)")
    with dg.instance_for_test() as instance:
        for round_ in range(3):
            with psycopg.connect(pg_fleet.server("alpha").dsn) as conn:
                for i in range(5 + round_):
                    conn.execute("select %s::int * 2", [Int4(i)])
            result = dg.materialize([statement_snapshots], resources=res, instance=instance)
            assert result.success
        materialization = result.asset_materializations_for_node("statement_snapshots")[0]
        assert materialization.metadata["instances_ok"].value == 2
        assert materialization.metadata["table_stats_rows"].value >= 1  # the snapshot's table statistics
        assert instance.get_dynamic_partitions("collection_days") == [today]  # registered by the run
        samples = dg.materialize(
            [query_samples],
            partition_key=today,
            resources=res,
            instance=instance,
            selection=[query_samples],
        )
        assert samples.success
    snapshots = lake.scan_table(lake_root, "statement_snapshots").collect()
    # 3 runs x 2 instances (per instance: two servers may stamp the same microsecond, as once in CI)
    assert snapshots.select("instance", "captured_at").unique().height == 6
    stats = lake.scan_table(lake_root, "table_stats_snapshots").collect()
    assert "orchestration_stats_t" in stats["relname"].to_list()
    assert set(stats["captured_at"].unique()) <= set(snapshots["captured_at"].unique())  # stamped with them
    sample_frame = lake.scan_table(lake_root, "query_samples").collect()
    assert sample_frame.height > 0
    assert set(sample_frame["instance"].unique()) <= {"alpha", "beta"}


def test_snapshot_asset_names_failed_and_degraded_instances(
    pg_fleet: EmbeddedFleet, lake_root: Path, tmp_path: Path
) -> None:
    alpha = pg_fleet.server("alpha")
    with psycopg.connect(alpha.dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS radar_nobody")
        conn.execute("CREATE ROLE radar_nobody LOGIN")  # no pg_read_all_stats: rows hidden, degraded
        conn.execute("SELECT 1")
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(
        f'[[instances]]\nname = "alpha"\ndsn = "{alpha.dsn_for(user="radar_nobody")}"\n'
        '[[instances]]\nname = "gone"\ndsn = "postgresql://x@127.0.0.1:1/postgres"\n'
    )
    res = {**resources(pg_fleet, lake_root, tmp_path), "fleet": FleetResource(fleet_file=str(fleet_file))}
    with dg.instance_for_test() as instance:
        result = dg.materialize([statement_snapshots], resources=res, instance=instance)
    metadata = result.asset_materializations_for_node("statement_snapshots")[0].metadata
    assert (metadata["instances_ok"].value, metadata["instances_failed"].value) == (1, 1)
    assert metadata["instances_degraded"].value == 1
    assert str(metadata["failed_instances"].value).startswith("gone: instance gone:")
    assert "alpha: " in str(metadata["degraded_instances"].value)
    assert "pg_read_all_stats" in str(metadata["degraded_instances"].value)


def test_snapshot_asset_offers_no_backfill() -> None:
    """pg_stat_statements has no history: the asset has no partitions, so no past day can be asked for
    (tests/integration/orchestration/test_dagster_metadata.py checks the collected-days partitions of the
    assets downstream)."""
    assert statement_snapshots.partitions_def is None
    assert defs.resolve_job_def("snapshot_job").partitions_def is None  # the schedule's job: "now" too


def test_deploy_inbox_sensor_and_asset(pg_fleet: EmbeddedFleet, lake_root: Path, tmp_path: Path) -> None:
    inbox = tmp_path / "deploys"
    inbox.mkdir()
    res = resources(pg_fleet, lake_root, inbox)
    context = dg.build_sensor_context(resources={"inbox": res["inbox"]})
    assert isinstance(deploy_inbox_sensor(context), dg.SkipReason)
    (inbox / "release.csv").write_text("instance,version,deployed_at\nalpha,v42,2026-11-01T10:00:00Z\n")
    request = deploy_inbox_sensor(dg.build_sensor_context(resources={"inbox": res["inbox"]}))
    assert isinstance(request, dg.RunRequest)
    with dg.instance_for_test() as instance:
        assert dg.materialize([deploy_events], resources=res, instance=instance).success
    events = lake.scan_table(lake_root, "deploy_events").collect()
    assert events["version"].to_list() == ["v42"]
    assert not (inbox / "release.csv").exists()
    # The asset checks names against the fleet resource's instances: a typo is rejected, not recorded.
    (inbox / "typo.csv").write_text("instance,version,deployed_at\nalhpa,v43,2026-11-01T11:00:00Z\n")
    assert isinstance(
        deploy_inbox_sensor(dg.build_sensor_context(resources={"inbox": res["inbox"]})), dg.RunRequest
    )
    with dg.instance_for_test() as instance:
        result = dg.materialize([deploy_events], resources=res, instance=instance)
    assert result.asset_materializations_for_node("deploy_events")[0].metadata["files_rejected"].value == 1
    assert "unknown instance 'alhpa'" in (inbox / "rejected" / "typo.csv.error.txt").read_text()
    assert lake.scan_table(lake_root, "deploy_events").collect()["version"].to_list() == ["v42"]


def test_snapshot_schedule_runs_now() -> None:
    tick = datetime(2026, 11, 29, 23, 59, tzinfo=UTC)
    request = snapshot_schedule(dg.build_schedule_context(scheduled_execution_time=tick))
    assert isinstance(request, dg.RunRequest)
    assert request.partition_key is None and request.run_key == tick.isoformat()


def test_regressions_asset_and_its_check_on_real_lake_files(lake_root: Path) -> None:
    from orchestration.assets.regressions import (
        detected_regressions_are_consistent,
        regressions_and_plan_diffs,
    )

    deploy_at = write_step_change_lake(lake_root)
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [regressions_and_plan_diffs, detected_regressions_are_consistent],
            resources={"lake": LakeResource(root=str(lake_root))},
            instance=instance,
        )
        assert result.success
        checks = result.get_asset_check_evaluations()
        assert [c.passed for c in checks] == [True]
    regressions = lake.scan_table(lake_root, "performance_regressions").collect()
    detected = regressions.filter((pl.col("status") == "detected") & (pl.col("analysis") == "deploy"))
    assert detected["queryid"].to_list() == [111]
    change = detected["detected_change_at"][0]
    assert abs((change - deploy_at).total_seconds()) <= 120
    assert detected["work_evidence"][0].startswith("shared blocks per call ×10")
    metadata = result.asset_materializations_for_node("regressions_and_plan_diffs")
    by_key = {m.asset_key.to_user_string(): m.metadata for m in metadata}
    check_regressions_metadata(by_key)  # the metadata tables render as tables, cells formatted
    assert by_key["resource_regressions"]["detected"].value == 2  # the deploy's step, found by both analyses
    # ...and one finding (both analyses of one step), written to finding_states.
    assert by_key["findings"]["open"].value == 1 and by_key["findings"]["changed"].value == 1
    states = lake.scan_table(lake_root, "finding_states").collect()
    assert states.select("status", "analysis", "deploy_version").rows() == [("open", "deploy", "v9")]
    resources = lake.scan_table(lake_root, "resource_regressions").collect()
    found = resources.filter((pl.col("status") == "detected") & (pl.col("analysis") == "deploy"))
    assert found.select("queryid", "metric").rows() == [(111, "shared_blocks")]
    assert found["summary"][0].startswith("shared blocks per call ×10 (75 → 750) at deploy v9, latency ×")


def plan_run_config(**values: object) -> dict[str, object]:
    return {"ops": {"plan_snapshots": {"config": values}}}


def test_plan_snapshots_asset_captures_generic_plans(
    pg_fleet: EmbeddedFleet, lake_root: Path, tmp_path: Path
) -> None:
    from orchestration.assets.plans import plan_snapshots

    server = pg_fleet.server("beta")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("create table if not exists plan_probe (id int primary key, v int)")
        for i in range(3):
            conn.execute("select v from plan_probe where id = %s", [Int4(i)])
    res = resources(pg_fleet, lake_root, tmp_path)
    with dg.instance_for_test() as instance:
        assert dg.materialize([statement_snapshots], resources=res, instance=instance).success
        result = dg.materialize(
            [plan_snapshots], resources=res, instance=instance, run_config=plan_run_config(capture_plans=True)
        )
        assert result.success
    assert result.asset_materializations_for_node("plan_snapshots")[0].metadata["capture"].value == "plans"
    plans = lake.scan_table(lake_root, "plan_snapshots").collect()
    probe = plans.filter(pl.col("relations").list.contains("plan_probe"))
    assert probe.height >= 1
    assert probe["source"].unique().to_list() == ["generic_explain"]


def test_plan_snapshots_with_capture_off_captures_nothing(
    pg_fleet: EmbeddedFleet, lake_root: Path, tmp_path: Path
) -> None:
    from orchestration.assets.plans import plan_snapshots

    with psycopg.connect(pg_fleet.server("beta").dsn, autocommit=True) as conn:
        conn.execute("create table if not exists plan_probe (id int primary key, v int)")
        conn.execute("select v from plan_probe where id = %s", [Int4(1)])
    res = resources(pg_fleet, lake_root, tmp_path)
    with dg.instance_for_test() as instance:
        # The snapshot job as the schedule runs it: its defaults (the config file's [plans]: off here).
        job = defs.resolve_job_def("snapshot_job")
        run = job.execute_in_process(instance=instance, resources=res)
        assert run.success
        # ...and the asset alone, both switches given off explicitly.
        alone = dg.materialize(
            [plan_snapshots],
            resources=res,
            instance=instance,
            run_config=plan_run_config(capture_plans=False, ingest_auto_explain=False),
        )
        assert alone.success
    assert lake.table_files(lake_root, "statement_snapshots")  # the snapshot itself ran
    for result in (run, alone):
        metadata = result.asset_materializations_for_node("plan_snapshots")[0].metadata
        assert metadata["capture"].value == "off"
        assert metadata["plans_captured"].value == 0
    assert not lake.table_files(lake_root, "plan_snapshots")
    assert not lake.table_files(lake_root, "plan_capture_log")


def test_query_samples_backfill_is_one_run_over_the_range(lake_root: Path) -> None:
    from tests.support.midnight_lakes import write_midnight_lake

    write_midnight_lake(lake_root)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("collection_days", ["2026-11-29", "2026-11-30"])
        job = dg.define_asset_job("samples_backfill", selection=[query_samples]).resolve(
            asset_graph=dg.Definitions(
                assets=[query_samples], resources={"lake": LakeResource(root=str(lake_root))}
            ).resolve_asset_graph()
        )
        result = job.execute_in_process(
            instance=instance,
            resources={"lake": LakeResource(root=str(lake_root))},
            tags={
                "dagster/asset_partition_range_start": "2026-11-29",
                "dagster/asset_partition_range_end": "2026-11-30",
            },
        )
        assert result.success
        runs = instance.get_runs()
    assert len(runs) == 1
    samples = lake.scan_table(lake_root, "query_samples").collect().sort("interval_end")
    assert samples["date"].to_list() == ["2026-11-29", "2026-11-30"]


def test_samples_and_analysis_schedules() -> None:
    from orchestration.schedules import analysis_schedule, samples_schedule

    tick = datetime(2026, 11, 29, 0, 15, tzinfo=UTC)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("collection_days", ["2026-11-29"])
        samples = samples_schedule(
            dg.build_schedule_context(instance=instance, scheduled_execution_time=tick)
        )
    assert isinstance(samples, dg.RunRequest) and samples.partition_key == "2026-11-29"
    analysis = analysis_schedule(dg.build_schedule_context(scheduled_execution_time=tick))
    assert isinstance(analysis, dg.RunRequest) and analysis.partition_key is None
    names = {s.name for s in defs.schedules or []}
    assert names == {
        "snapshot_schedule",
        "samples_schedule",
        "analysis_schedule",
        "weekly_report_schedule",
        "compaction_schedule",
        "detection_schedule",
    }


def test_inbox_limits_are_deploy_events_run_config(lake_root: Path, tmp_path: Path) -> None:
    inbox = tmp_path / "deploys"
    inbox.mkdir()
    (inbox / "two.csv").write_text(
        "instance,version,deployed_at\nalpha,v1,2026-11-01T10:00:00Z\nalpha,v2,2026-11-01T11:00:00Z\n"
    )
    res = {
        "inbox": DeployInboxResource(inbox=str(inbox)),
        "lake": LakeResource(root=str(lake_root)),
        "fleet": FleetResource(fleet_file=str(tmp_path / "no-fleet.toml")),
    }
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [deploy_events],
            resources=res,
            instance=instance,
            run_config={"ops": {"deploy_events": {"config": {"max_events_per_file": 1}}}},
        )
    assert result.asset_materializations_for_node("deploy_events")[0].metadata["files_rejected"].value == 1
    assert (inbox / "rejected" / "two.csv").exists()
    assert not lake.table_files(lake_root, "deploy_events")
