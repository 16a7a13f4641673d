"""Dagster run config: every asset's settings are typed run config whose defaults are the config file's;
a run's values change what it computes and are checked as the file's are; nothing comes from the
environment when the definitions load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import pytest

from jobs.detect.findings import latest_states
from jobs.lake import io as lake
from jobs.schemas.analysed import ANALYSIS_RUNS, FINDING_STATES
from orchestration.assets.regressions import regressions_and_plan_diffs
from orchestration.assets.snapshots import statement_snapshots
from orchestration.definitions import defs
from orchestration.resources import FleetResource, LakeResource
from tests.support.lakes import write_step_change_lake

REPO = Path(__file__).resolve().parents[3]
ANALYSIS = "regressions_and_plan_diffs"


def analyse(lake_root: Path, config: dict[str, Any] | None = None) -> dg.ExecuteInProcessResult:
    with dg.instance_for_test() as instance:
        return dg.materialize(
            [regressions_and_plan_diffs],
            resources={"lake": LakeResource(root=str(lake_root))},
            instance=instance,
            run_config={"ops": {ANALYSIS: {"config": config or {}}}},
            raise_on_error=False,
        )


def detected_deploy_queries(lake_root: Path) -> list[int]:
    files = lake.usable_files(lake_root, "performance_regressions")
    latest = lake.read_file(lake_root, "performance_regressions", max(files, key=lambda p: p.name))
    detected = latest.filter((pl.col("status") == "detected") & (pl.col("analysis") == "deploy"))
    return sorted(detected["queryid"].to_list())


def metadata(result: dg.ExecuteInProcessResult, key: str) -> dict[str, Any]:
    by_key = {
        m.asset_key.to_user_string(): m.metadata for m in result.asset_materializations_for_node(ANALYSIS)
    }
    return {name: value.value for name, value in by_key[key].items()}


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    failures = [e for e in result.all_events if e.is_step_failure]
    assert failures, "the run did not fail"
    data = failures[0].step_failure_data
    user = data.user_failure_data
    return " ".join(
        part for part in (data.error.message if data.error else "", user and user.description) if part
    )


def test_analysis_run_config_threshold_changes_the_result(tmp_path: Path) -> None:
    default_lake, strict_lake = tmp_path / "default", tmp_path / "strict"
    write_step_change_lake(default_lake)
    write_step_change_lake(strict_lake)

    default = analyse(default_lake)
    assert default.success
    assert detected_deploy_queries(default_lake) == [111]  # the ×10 step at the deploy
    assert metadata(default, "performance_regressions")["detected"] >= 1

    # The same lake, a run whose stage 0 needs a ×21 change: the ×10 step is no longer a regression.
    strict = analyse(strict_lake, {"latency_change_threshold": 20.0})
    assert strict.success
    assert detected_deploy_queries(strict_lake) == []
    assert metadata(strict, "performance_regressions")["detected"] == 0
    # Its work per call also stepped ×10: that stays a finding, of kind work (issue 24), not latency.
    assert metadata(strict, "findings")["open"] == 1
    states = latest_states(lake.read_table(strict_lake, FINDING_STATES))
    assert states["kind"].to_list() == ["work"]


def test_a_changed_threshold_re_examines_what_was_analysed(lake_root: Path) -> None:
    """Changed settings make the run a full one (their digest differs from the last run's); full_run
    re-examines everything with unchanged settings too."""
    write_step_change_lake(lake_root)
    assert analyse(lake_root).success
    assert metadata(analyse(lake_root), "findings")["open"] == 1  # nothing new: the finding stays open
    strict = analyse(lake_root, {"latency_change_threshold": 20.0})
    assert strict.success
    assert detected_deploy_queries(lake_root) == []
    assert analyse(lake_root, {"latency_change_threshold": 20.0, "full_run": True}).success
    runs = lake.read_table(lake_root, ANALYSIS_RUNS).sort("computed_at")
    assert runs["mode"].to_list() == ["full", "incremental", "full", "full"]


def test_nested_run_config_reaches_the_detector(tmp_path: Path) -> None:
    # [detector.resource] ratio_threshold: work per call ×10 is a resource regression at 2, not at 20.
    lakes = {ratio: tmp_path / str(ratio) for ratio in (2.0, 20.0)}
    found = {}
    for ratio, root in lakes.items():
        write_step_change_lake(root)
        result = analyse(root, {"resource": {"ratio_threshold": ratio}})
        assert result.success
        found[ratio] = metadata(result, "resource_regressions")["detected"]
    assert found[2.0] == 2 and found[20.0] == 0


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"window_before": "30x"}, "window_before"),
        ({"window_before": "30"}, "window_before"),
        ({"p_value_threshold": 2.0}, "p_value_threshold"),
        ({"changepoint": {"test": "magic"}}, "test"),
    ],
)
def test_bad_run_config_fails_the_run_naming_the_key(
    lake_root: Path, config: dict[str, Any], named: str
) -> None:
    write_step_change_lake(lake_root)
    result = analyse(lake_root, config)
    assert not result.success
    message = failure_message(result)
    assert named in message and "Traceback" not in message
    assert not lake.table_files(lake_root, "performance_regressions")  # nothing written


def test_unknown_or_mistyped_run_config_is_rejected_before_the_run(lake_root: Path) -> None:
    with pytest.raises(dg.DagsterInvalidConfigError, match="latency_change_threshld"):
        analyse(lake_root, {"latency_change_threshld": 0.3})
    with pytest.raises(dg.DagsterInvalidConfigError, match="latency_change_threshold"):
        analyse(lake_root, {"latency_change_threshold": "high"})


def test_bad_collector_run_config_fails_before_any_server_is_read(lake_root: Path, tmp_path: Path) -> None:
    fleet_file = tmp_path / "fleet.toml"  # nothing listens on port 1: reading it would be a failed row
    fleet_file.write_text('[[instances]]\nname = "db1"\ndsn = "postgresql://radar@127.0.0.1:1/postgres"\n')
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [statement_snapshots],
            resources={
                "fleet": FleetResource(fleet_file=str(fleet_file)),
                "lake": LakeResource(root=str(lake_root)),
            },
            instance=instance,
            run_config={"ops": {"statement_snapshots": {"config": {"statement_timeout_ms": 60_000}}}},
            raise_on_error=False,
        )
    assert not result.success
    assert "statement_timeout_ms" in failure_message(result)
    assert not lake.table_files(lake_root, "statement_snapshots")
    assert not lake.table_files(lake_root, "snapshot_runs")


def test_plan_snapshots_is_always_in_the_snapshot_job_and_off_by_default() -> None:
    job = defs.resolve_job_def("snapshot_job")
    assert {"statement_snapshots", "plan_snapshots"} <= set(job.graph.node_names())
    plans = op_config_defaults("plan_snapshots")
    assert (plans["capture_plans"], plans["ingest_auto_explain"]) == (False, False)
    assert "diff" not in plans  # [plans.diff] is the analysis' run config, not capture's


def op_config_defaults(op: str, definitions: dg.Definitions = defs) -> dict[str, Any]:
    """The run config defaults the launchpad shows for one op (asset or multi-asset)."""
    (assets_def,) = [a for a in definitions.resolve_asset_graph().assets_defs if a.node_def.name == op]
    return assets_def.op.config_schema.as_field().default_value


DEFINITIONS_PROBE = """
import json
from orchestration.definitions import defs
from tests.integration.orchestration.test_orchestration_config import op_config_defaults as defaults
print(json.dumps({
    "detector": defaults("regressions_and_plan_diffs"),
    "plans": defaults("plan_snapshots"),
    "samples": defaults("query_samples"),
    "collector": defaults("statement_snapshots"),
    "lake": defaults("compacted_lake"),
    "deploys": defaults("deploy_events"),
    "drift": defaults("latency_drift"),
    "report": defaults("weekly_regression_report"),
    "lake_root": defs.resources["lake"].root,
    "inbox": defs.resources["inbox"].inbox,
    "reports": defs.resources["reports"].root,
    "snapshot_cron": defs.get_schedule_def("snapshot_schedule").cron_schedule,
}))
"""


def load_definitions(cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    """Import orchestration.definitions in a fresh interpreter (the code location's load) and return its
    run config defaults and resource locations."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RADAR_")}
    done = subprocess.run(
        [sys.executable, "-c", DEFINITIONS_PROBE],
        cwd=cwd,
        env={**clean, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_definitions_take_their_defaults_from_the_config_file_and_none_from_the_environment(
    tmp_path: Path,
) -> None:
    config = tmp_path / "prod.toml"
    config.write_text(
        '[detector]\nlatency_change_threshold = 0.35\nwindow_before = "45m"\n'
        "[detector.findings]\nrecovery_samples = 9\n"
        "[plans]\ncapture_plans = true\ntop_n = 50\n"
        "[samples]\nmin_executions = 3\n"
        "[collector]\nstatement_timeout_ms = 4000\n"
        '[lake]\nroot = "/srv/radar/lake"\nanalysis_retention_days = 90\n'
        '[deploys]\ninbox = "/srv/radar/deploys"\nmax_events_per_file = 77\n'
        "[drift]\nbins = 30\n"
        '[report]\nout = "/srv/radar/reports"\nmax_regressions = 7\n'
        '[schedules]\nsnapshot = "*/2 * * * *"\n'
    )
    # Every kind of setting variable there is, old and new: none may reach the definitions.
    noise = {
        "RADAR_DETECTOR__LATENCY_CHANGE_THRESHOLD": "0.9",
        "RADAR_PLANS__CAPTURE_PLANS": "false",
        "RADAR_SAMPLES__MIN_EXECUTIONS": "8",
        "RADAR_LAKE__ROOT": "/env/lake",
        "RADAR_CAPTURE_PLANS": "0",
        "RADAR_LAKE_ROOT": "/env/lake",
        "RADAR_DEPLOY_INBOX": "/env/deploys",
        "RADAR_REPORT_ROOT": "/env/reports",
        "RADAR_SNAPSHOT_CRON": "* * * * *",
    }
    loaded = load_definitions(tmp_path, {"RADAR_CONFIG": str(config), **noise})
    detector = loaded["detector"]
    assert (detector["latency_change_threshold"], detector["window_before"]) == (0.35, "45m")
    assert detector["findings"]["recovery_samples"] == 9
    assert detector["window_after"] == "30m" and detector["full_run"] is False  # not in the file: default
    assert (loaded["plans"]["capture_plans"], loaded["plans"]["top_n"]) == (True, 50)
    assert loaded["samples"]["min_executions"] == 3
    assert loaded["collector"]["statement_timeout_ms"] == 4000
    assert loaded["lake"]["analysis_retention_days"] == 90 and "root" not in loaded["lake"]
    assert loaded["deploys"]["max_events_per_file"] == 77 and "inbox" not in loaded["deploys"]
    assert loaded["drift"]["bins"] == 30
    assert loaded["report"]["max_regressions"] == 7 and "out" not in loaded["report"]
    assert (loaded["lake_root"], loaded["inbox"], loaded["reports"]) == (
        "/srv/radar/lake",
        "/srv/radar/deploys",
        "/srv/radar/reports",
    )
    assert loaded["snapshot_cron"] == "*/2 * * * *"


def test_definitions_without_a_config_file_use_the_built_in_defaults(tmp_path: Path) -> None:
    loaded = load_definitions(tmp_path, {"RADAR_DETECTOR__P_VALUE_THRESHOLD": "0.5", "RADAR_LAKE_ROOT": "/x"})
    assert loaded["detector"]["p_value_threshold"] == 0.05
    assert loaded["plans"]["capture_plans"] is False
    assert loaded["lake_root"] == "data/lake"


def test_a_bad_config_file_stops_the_definitions_loading_naming_file_and_key(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()  # the default file, data/radar.toml under the working directory
    (tmp_path / "data" / "radar.toml").write_text("[detector]\nlatency_change_threshld = 0.3\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RADAR_")}
    done = subprocess.run(
        [sys.executable, "-c", "import orchestration.definitions"],
        cwd=tmp_path,
        env={**clean, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "config file data/radar.toml: unknown key 'latency_change_threshld'" in done.stderr
    assert "did you mean" in done.stderr


def test_secrets_never_become_run_config() -> None:
    from jobs.alerts.config import AlertsConfig
    from jobs.config.sections import RadarSettings
    from orchestration.run_config import section_config, section_from_config

    secret = "https://hooks.slack.com/services/T000/B000/XXXXSECRET"
    settings = RadarSettings(
        alerts=AlertsConfig(slack_webhook_url=secret, webhook_url=secret, max_attempts=3)
    )
    model = section_config("alerts", settings=settings)
    assert {"slack_webhook_url", "webhook_url"}.isdisjoint(model.model_fields)
    assert secret not in json.dumps(model().model_dump())
    assert model().model_dump()["max_attempts"] == 3
    # A run still uses the file's secret (it is not run config, so it is not changed either).
    alerts = section_from_config("alerts", model(max_attempts=4), "regression_alerts", settings=settings)
    assert (alerts.slack_webhook_url, alerts.max_attempts) == (secret, 4)


def test_the_launchpad_shows_each_key_with_the_reference_text() -> None:
    fields = regressions_and_plan_diffs.op.config_schema.config_type.fields
    assert fields["latency_change_threshold"].description.startswith("Stage 0: a relative change")
    assert fields["findings"].description.startswith("Finding identity")
    assert "rank" in fields["changepoint"].config_type.fields["test"].description
    assert "after changing a threshold" in fields["full_run"].description


def test_pileup_thresholds_are_regression_alerts_run_config() -> None:
    from orchestration.assets.alerts import AlertsRunConfig, regression_alerts
    from orchestration.run_config import section_from_config

    fields = regression_alerts.op.config_schema.config_type.fields
    assert "pile-up" in fields["pileups"].description
    config = AlertsRunConfig(pileups={"min_backends": 5})  # type: ignore[call-arg]
    pileups = section_from_config("pileups", config.pileups, "regression_alerts")  # type: ignore[attr-defined]
    assert pileups.min_backends == 5
    with pytest.raises(dg.Failure, match=r"\[pileups\]"):
        section_from_config(
            "pileups",
            AlertsRunConfig(pileups={"min_backends": -1}).pileups,  # type: ignore[call-arg,attr-defined]
            "regression_alerts",
        )


def test_pinning_is_plan_pins_run_config_checked_as_the_file_is(lake_root: Path) -> None:
    from orchestration.assets.pins import PinningRunConfig, plan_pins
    from orchestration.run_config import section_from_config

    fields = plan_pins.op.config_schema.config_type.fields
    assert "propose" in fields["mode"].description
    assert "query id" in fields["gone_after"].description
    config = PinningRunConfig(mode="apply", apply_instances=["db1"], deny=["db1:-42"], gone_after="2h")  # type: ignore[call-arg]
    pinning = section_from_config("pinning", config, "plan_pins")
    assert pinning.applies_on("db1") and pinning.query_allowed("db1", -42) is not None
    assert pinning.gone_after == timedelta(hours=2)
    with pytest.raises(dg.Failure, match=r"\[pinning\]\): mode must be one of"):
        section_from_config("pinning", PinningRunConfig(mode="force"), "plan_pins")  # type: ignore[call-arg]
    with pytest.raises(dg.Failure, match=r"\[pinning\] allow entries"):
        section_from_config("pinning", PinningRunConfig(allow=["x"]), "plan_pins")  # type: ignore[call-arg]
    # With no finding in the lake the asset records nothing (and reads no server).
    with dg.instance_for_test() as instance:  # its own instance, as every materialization here
        result = dg.materialize(
            [plan_pins],
            resources={"lake": LakeResource(root=str(lake_root)), "fleet": FleetResource()},
            instance=instance,
            run_config={"ops": {"plan_pins": {"config": {"mode": "propose"}}}},
            raise_on_error=True,
        )
    metadata = result.asset_materializations_for_node("plan_pins")[0].metadata
    assert metadata["rows_written"].value == 0 and metadata["findings_looked_at"].value == 0


@pytest.mark.slow  # two full analyses of a simulated fleet, one in six passes of their own processes
def test_a_memory_budget_in_the_run_config_splits_the_analysis_and_finds_the_same(tmp_path: Path) -> None:
    """`regressions_and_plan_diffs` with `memory.budget_mib` in its run config (the Dagster way to keep a
    full run within a machine's memory): the instances are analysed in chunks, each chunk's passes in
    processes of their own started from the Dagster run, and every analysis row is that of one pass."""
    from dataclasses import asdict, replace
    from datetime import UTC, datetime

    from jobs.detect.samples_job import run_samples_job
    from jobs.local.simulate.writer import write_fleet
    from tests.support.budget_lakes import SHAPE, budget_of_two_instances

    # ending now: the asset analyses up to the wall clock, as a scheduled run does
    start = (datetime.now(UTC) - timedelta(minutes=SHAPE.minutes)).replace(second=0, microsecond=0)
    shape = replace(SHAPE, start=start)
    whole, chunked = tmp_path / "whole", tmp_path / "chunked"
    for root in (whole, chunked):  # snapshots, and the samples the samples asset builds before a full run
        write_fleet(root, shape)
        run_samples_job(root)
    memory = asdict(budget_of_two_instances(chunked))
    one = analyse(whole, {"full_run": True})
    split = analyse(chunked, {"full_run": True, "memory": memory})
    assert one.success and split.success, failure_message(split if one.success else one)
    assert metadata(split, "performance_regressions")["instance_chunks"] == 3
    assert metadata(one, "performance_regressions")["instance_chunks"] == 0  # one pass, not chunked
    # The rows of every analysis, as one pass wrote them (the batch's own columns aside).
    batch = ["run_id", "computed_at", "fdr_method", "window_start", "window_end", "date"]
    for table in ("performance_regressions", "resource_regressions", "instance_slowdowns"):
        rows = [lake.read_table(r, table).drop(batch, strict=False) for r in (whole, chunked)]
        rows = [r.sort(r.columns, nulls_last=True) for r in rows]
        assert rows[0].equals(rows[1]), table
        assert rows[0].height > 0 or table == "instance_slowdowns", table  # no contention simulated
    detected = lake.read_table(whole, "performance_regressions").filter(pl.col("status") == "detected")
    assert detected.height > 0, "the simulated regressions must be found"
