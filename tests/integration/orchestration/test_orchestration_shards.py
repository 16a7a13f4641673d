"""The fleet sharded across Dagster runs (issue 14): 4 shard partitions over real embedded servers and real
lake files. Each shard's run collects and samples only its instances, an empty shard succeeds with nothing
to do, a shard whose instances all fail fails alone, and the fleet-wide analysis reads every shard."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import psycopg
import pytest
from psycopg.types.numeric import Int4

from jobs.collect.shards import shard_of
from jobs.lake import io as lake
from jobs.local.embedded import EmbeddedFleet
from orchestration.assets.deploys import deploy_events
from orchestration.assets.plans import build_plan_snapshots
from orchestration.assets.regressions import build_detection_candidates, build_regressions_and_plan_diffs
from orchestration.assets.samples import build_query_samples
from orchestration.assets.snapshots import build_statement_snapshots
from orchestration.cli_events import cli_partitions
from orchestration.partitions import DAY_DIMENSION, SHARD_DIMENSION, shard_run_requests
from orchestration.resources import DeployInboxResource, FleetResource, LakeResource
from orchestration.sensors import ROUND_TAG, build_shard_analysis_sensor

pytestmark = pytest.mark.postgres

SHARDS = 4
GONE = "db-0001"  # a dead server, alone in its shard: that shard's run fails, no other
SHARD_OF = {"alpha": 2, "beta": 1, GONE: 3}  # shard-0 is empty
FLEET_FILE_ENV, LAKE_ENV = "RADAR_TEST_SHARDS_FLEET_FILE", "RADAR_TEST_SHARDS_LAKE"
ANALYSIS = ["performance_regressions", "resource_regressions", "instance_slowdowns", "plan_diffs", "findings"]


def sharded_definitions(fleet_file: str, lake_root: str, inbox: str) -> dg.Definitions:
    """The collection, samples and analysis assets as `make dev` builds them, for 4 shards."""
    return dg.Definitions(
        assets=[
            build_statement_snapshots(SHARDS),
            build_plan_snapshots(SHARDS),
            build_query_samples(SHARDS),
            deploy_events,
            build_detection_candidates(SHARDS),
            build_regressions_and_plan_diffs(SHARDS),
        ],
        jobs=[
            dg.define_asset_job("shard_snapshots", ["statement_snapshots", "plan_snapshots"]),
            dg.define_asset_job("shard_statement_snapshots", ["statement_snapshots"]),
            dg.define_asset_job("shard_samples", ["query_samples"]),
            dg.define_asset_job("shard_candidates", ["detection_candidates"]),
            dg.define_asset_job("shard_analysis_job", ANALYSIS),
        ],
        executor=dg.multiprocess_executor,
        resources={
            "fleet": FleetResource(fleet_file=fleet_file),
            "lake": LakeResource(root=lake_root),
            "inbox": DeployInboxResource(inbox=inbox),
        },
    )


def _env_definitions() -> dg.Definitions:
    return sharded_definitions(
        os.environ[FLEET_FILE_ENV], os.environ[LAKE_ENV], os.environ[LAKE_ENV] + "-inbox"
    )


# Module-level jobs for dagster.reconstructable: the multiprocess executor rebuilds them in each step's
# process, which finds the fleet file and the lake through the environment it inherits.
def shard_snapshots_job() -> dg.JobDefinition:
    """statement_snapshots alone: one step process per run (plan_snapshots is covered in process)."""
    return _env_definitions().resolve_job_def("shard_statement_snapshots")


def shard_samples_job() -> dg.JobDefinition:
    return _env_definitions().resolve_job_def("shard_samples")


def shard_candidates_job() -> dg.JobDefinition:
    return _env_definitions().resolve_job_def("shard_candidates")


def shard_analysis_job() -> dg.JobDefinition:
    return _env_definitions().resolve_job_def("shard_analysis_job")


def write_fleet_file(fleet: EmbeddedFleet, path: Path) -> Path:
    entries = [(s.name, s.monitor_dsn) for s in fleet.servers] + [
        (GONE, "postgresql://x@127.0.0.1:1/postgres")
    ]
    path.write_text("".join(f'[[instances]]\nname = "{n}"\ndsn = "{d}"\n' for n, d in entries))
    return path


def run_queries(fleet: EmbeddedFleet, round_: int) -> None:
    for server in fleet.servers:
        with psycopg.connect(server.dsn) as conn:
            for i in range(3 + round_):
                conn.execute("select %s::int * 3", [Int4(i)])


def lake_instances(lake_root: Path, table: str) -> set[str]:
    return set(lake.scan_table(lake_root, table).select("instance").unique().collect()["instance"].to_list())


def test_shard_assignment_of_the_test_fleet() -> None:
    assert {name: shard_of(name, SHARDS) for name in SHARD_OF} == SHARD_OF


def test_schedules_request_one_run_per_shard() -> None:
    requests = shard_run_requests(SHARDS, "tick", day="2026-12-01")
    assert [r.partition_key for r in requests] == [f"2026-12-01|shard-{i}" for i in range(SHARDS)]
    assert len({r.run_key for r in requests}) == SHARDS
    assert [r.partition_key for r in shard_run_requests(SHARDS, "tick")] == [f"shard-{i}" for i in range(4)]
    assert [r.partition_key for r in shard_run_requests(1, "tick")] == [None]  # one shard: unpartitioned


@pytest.mark.slow  # about 20 s: 13 runs, each opening the test instance's SQLite storage
def test_sharded_assets_in_process_over_4_shards(
    pg_fleet: EmbeddedFleet, lake_root: Path, tmp_path: Path
) -> None:
    """Each shard's run touches only its instances; the dead instance's shard fails alone; the empty shard
    succeeds; the fleet-wide analysis then reads every shard's samples."""
    fleet_file = write_fleet_file(pg_fleet, tmp_path / "fleet.toml")
    defs = sharded_definitions(str(fleet_file), str(lake_root), str(tmp_path / "inbox"))
    snapshots_job = defs.resolve_job_def("shard_snapshots")
    today = datetime.now(UTC).date().isoformat()
    with dg.instance_for_test() as instance:
        for round_ in range(2):
            run_queries(pg_fleet, round_)
            outcome = {}
            for shard in range(SHARDS):
                result = snapshots_job.execute_in_process(
                    partition_key=f"shard-{shard}", instance=instance, raise_on_error=False
                )
                outcome[shard] = result.success
                if shard in (1, 2):  # exactly its own instance was snapshotted
                    shown = result.asset_materializations_for_node("statement_snapshots")[0].metadata
                    assert (shown["shard"].value, shown["instances_ok"].value) == (f"shard-{shard}", 1)
            assert outcome == {0: True, 1: True, 2: True, 3: False}
            assert lake_instances(lake_root, "statement_snapshots") == {"alpha", "beta"}
        done = instance.get_materialized_partitions(dg.AssetKey("statement_snapshots"))
        assert done == {"shard-0", "shard-1", "shard-2"}  # shard-3 failed, and only shard-3
        samples_job = defs.resolve_job_def("shard_samples")
        per_shard = {}
        for shard in range(SHARDS):
            key = dg.MultiPartitionKey({DAY_DIMENSION: today, SHARD_DIMENSION: f"shard-{shard}"})
            result = samples_job.execute_in_process(partition_key=key, instance=instance)
            assert result.success
            per_shard[shard] = result.asset_materializations_for_node("query_samples")[0].metadata
            if shard == 1:  # shard-1's run sampled beta only: alpha (shard-2) has none yet
                assert lake_instances(lake_root, "query_samples") == {"beta"}
        assert per_shard[1]["instances"].value == per_shard[2]["instances"].value == 1
        assert per_shard[0]["instances"].value == per_shard[3]["instances"].value == 0
        assert per_shard[1]["sample_rows"].value > 0 and per_shard[2]["sample_rows"].value > 0
        assert lake_instances(lake_root, "query_samples") == {"alpha", "beta"}
        # The detection per shard, in two phases; the sensor starts phase 2 once every shard recorded.
        shard_job = dg.define_asset_job("shard_analysis_job", ANALYSIS)
        fleet_job = dg.define_asset_job("fleet_analysis_job", ["regression_alerts"])
        sensor = build_shard_analysis_sensor(SHARDS, 600, shard_job, fleet_job)
        resources = {"lake": LakeResource(root=str(lake_root))}
        candidates = defs.resolve_job_def("shard_candidates")
        for shard in range(SHARDS - 1):
            assert candidates.execute_in_process(partition_key=f"shard-{shard}", instance=instance).success
            waiting = sensor(dg.build_sensor_context(instance=instance, resources=resources))
            assert isinstance(waiting, dg.SkipReason) and "shard-3" in (waiting.skip_message or "")
        assert candidates.execute_in_process(partition_key="shard-3", instance=instance).success
        context = dg.build_sensor_context(instance=instance, resources=resources)
        requests = sensor(context)
        assert isinstance(requests, list)
        assert [(r.job_name, r.partition_key) for r in requests] == [
            ("shard_analysis_job", f"shard-{s}") for s in range(SHARDS)
        ]
        analysis = defs.resolve_job_def("shard_analysis_job")
        for request in requests:
            result = analysis.execute_in_process(
                partition_key=request.partition_key, instance=instance, tags=request.tags
            )
            assert result.success  # the empty shard and the dead instance's shard too
            shown = result.asset_materializations_for_node("regressions_and_plan_diffs")[0].metadata
            assert shown["shard"].value == request.partition_key
            assert shown["shards_without_candidates"].value == "none"
        then = dg.build_sensor_context(instance=instance, resources=resources, cursor=context.cursor)
        fleet = sensor(then)
        assert isinstance(fleet, list) and [(r.job_name, r.tags[ROUND_TAG]) for r in fleet] == [
            ("fleet_analysis_job", requests[0].tags[ROUND_TAG])
        ]
        nothing_new = dg.build_sensor_context(instance=instance, resources=resources, cursor=then.cursor)
        assert isinstance(sensor(nothing_new), dg.SkipReason)
    # Each shard's detection read its own instances' samples; together, the fleet's.
    parents = defs.resolve_asset_graph().get(dg.AssetKey("performance_regressions")).parent_keys
    assert {dg.AssetKey("query_samples"), dg.AssetKey("detection_candidates")} <= parents
    assert lake_instances(lake_root, "performance_regressions") == {"alpha", "beta"}


@pytest.mark.slow  # each step of each run is a fresh Python process importing dagster and polars
def test_sharded_assets_with_the_multiprocess_executor_over_4_shards(
    pg_fleet: EmbeddedFleet, lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same runs out of process (dagster.execute_job, multiprocess executor, persistent instance): one
    run per shard, the dead instance's shard fails alone, then the fleet-wide analysis over every shard."""
    fleet_file = write_fleet_file(pg_fleet, tmp_path / "fleet.toml")
    monkeypatch.setenv(FLEET_FILE_ENV, str(fleet_file))
    monkeypatch.setenv(LAKE_ENV, str(lake_root))
    today = datetime.now(UTC).date().isoformat()
    snapshots, samples = shard_snapshots_job(), shard_samples_job()
    with dg.instance_for_test() as instance:  # persistent: SQLite in its own temp DAGSTER_HOME

        def run(job: object, definition: dg.JobDefinition, key: str | None) -> dg.ExecutionResult:
            tags = definition.get_tags_for_partition_key(key, None) if key else None
            return dg.execute_job(dg.reconstructable(job), instance=instance, tags=tags)  # type: ignore[arg-type]

        # The first snapshot of each shard in process (samples need two), the second out of process.
        run_queries(pg_fleet, 0)
        for shard in range(SHARDS):
            snapshots.execute_in_process(
                partition_key=f"shard-{shard}", instance=instance, raise_on_error=False
            )
        run_queries(pg_fleet, 1)
        outcome = {s: run(shard_snapshots_job, snapshots, f"shard-{s}").success for s in (3, 0, 1, 2)}
        assert outcome == {3: False, 0: True, 1: True, 2: True}  # the failing shard first, then the rest
        results = {}
        for shard in range(SHARDS):
            key = dg.MultiPartitionKey({DAY_DIMENSION: today, SHARD_DIMENSION: f"shard-{shard}"})
            results[shard] = run(shard_samples_job, samples, key)
            assert results[shard].success
        assert lake_instances(lake_root, "query_samples") == {"alpha", "beta"}
        samples_done = instance.get_materialized_partitions(dg.AssetKey("query_samples"))
        assert samples_done == {f"{today}|shard-{s}" for s in range(SHARDS)}
        phase_one, phase_two = shard_candidates_job(), shard_analysis_job()
        for shard in range(SHARDS):
            assert run(shard_candidates_job, phase_one, f"shard-{shard}").success
        analysis = {s: run(shard_analysis_job, phase_two, f"shard-{s}") for s in range(SHARDS)}
        assert all(result.success for result in analysis.values())
        engine = [e for e in analysis[1].all_events if e.event_type_value == "ENGINE_EVENT"]
        assert any("multiprocess" in (e.message or "").lower() for e in engine)  # not in-process
        done = instance.get_materialized_partitions(dg.AssetKey("performance_regressions"))
        assert done == {f"shard-{s}" for s in range(SHARDS)}
    assert lake_instances(lake_root, "performance_regressions") == {"alpha", "beta"}


def test_cli_runs_report_every_shards_partition() -> None:
    """A `radar snapshot` / `radar samples` run covers the whole fleet: its events name every shard."""
    assert cli_partitions("statement_snapshots", ["2026-12-01"], 1) == [None]
    assert cli_partitions("query_samples", ["2026-12-01"], 1) == ["2026-12-01"]
    assert cli_partitions("statement_snapshots", ["2026-12-01"], 2) == ["shard-0", "shard-1"]
    assert cli_partitions("query_samples", ["2026-12-01"], 2) == ["2026-12-01|shard-0", "2026-12-01|shard-1"]
    assert cli_partitions("findings", ["2026-12-01"], 2) == ["shard-0", "shard-1"]  # `radar detect`: all
    assert cli_partitions("regression_alerts", ["2026-12-01"], 2) == [None]  # fleet-wide


PROBE = """
from datetime import UTC, datetime
import dagster as dg
from orchestration.definitions import defs
from orchestration.schedules import analysis_schedule, samples_schedule, snapshot_schedule
print(defs.resolve_job_def("snapshot_job").partitions_def.get_partition_keys())
print(type(defs.resolve_job_def("samples_job").partitions_def).__name__)
print(defs.resolve_job_def("analysis_job").partitions_def.get_partition_keys())
print(defs.resolve_job_def("shard_analysis_job").partitions_def.get_partition_keys())
print(defs.resolve_job_def("fleet_analysis_job").partitions_def)
print(sorted(s.name for s in defs.sensors))
with dg.instance_for_test() as instance:
    tick = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    context = dg.build_schedule_context(instance=instance, scheduled_execution_time=tick)
    print([r.partition_key for r in snapshot_schedule(context)])
    instance.add_dynamic_partitions("collection_days", ["2026-12-01"])
    print([r.partition_key for r in samples_schedule(context)])
    print([r.partition_key for r in analysis_schedule(context)])
"""


@pytest.mark.slow  # a fresh process loading the definitions (about 5 s)
def test_definitions_load_sharded_from_the_config_file(tmp_path: Path) -> None:
    """shard_count is read when the definitions load: the jobs, the partitions and the schedules follow."""
    config = tmp_path / "radar.toml"
    config.write_text("[schedules]\nshard_count = 4\n")
    env = {**os.environ, "RADAR_CONFIG": str(config)}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    keys = [f"shard-{i}" for i in range(4)]
    assert out.stdout.splitlines() == [
        str(keys),
        "MultiPartitionsDefinition",
        str(keys),  # phase 1 of the detection, per shard
        str(keys),  # phase 2, per shard
        "None",  # alerts and drift: fleet-wide
        str(["deploy_inbox_sensor", "shard_analysis_sensor"]),
        str(keys),
        str([f"2026-12-01|{k}" for k in keys]),
        str(keys),
    ]
