"""The config file: every key accepted, strict errors naming file and key, provenance, behaviour."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.collect.deploys import DeployEvent, events_frame
from jobs.collect.fleet import CollectorConfig, FleetConfig, InstanceConfig
from jobs.config.flags import Override
from jobs.config.loader import leaves, load_settings, plain, setting_override
from jobs.config.reference import example_toml
from jobs.config.sections import SECRET_KEYS, RadarSettings
from jobs.durations import format_duration, parse_duration
from jobs.errors import ConfigError
from jobs.pipeline.detection import detect_from_frames
from jobs.schemas.collected import PLAN_SNAPSHOTS
from tests.support.lakes import SERIES_DEPLOY_AT, series_samples, series_texts

ROOT = Path(__file__).resolve().parents[3]


def toml_value(value: object) -> str:
    from jobs.config.reference import _toml_value

    return _toml_value(value)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "radar.toml"
    path.write_text(text)
    return path


def every_key_file(values: dict[str, object]) -> str:
    """A config file setting every key of the reference (``values`` by dotted key, else its default)."""
    tables: dict[str, list[str]] = {}
    for leaf in leaves():
        key = ".".join(leaf.key)
        value = values.get(key, leaf.default)
        tables.setdefault(".".join(leaf.key[:-1]), []).append(f"{leaf.key[-1]} = {toml_value(value)}")
    return "\n".join(f"[{table}]\n" + "\n".join(lines) + "\n" for table, lines in tables.items())


def test_every_key_of_the_reference_is_accepted_at_its_default(tmp_path: Path) -> None:
    loaded = load_settings(write(tmp_path, every_key_file({})), env={})
    assert loaded.settings == RadarSettings()
    keys = {".".join(leaf.key) for leaf in leaves()}
    assert set(loaded.sources) == keys and set(loaded.sources.values()) == {f"file {tmp_path / 'radar.toml'}"}
    assert len(keys) > 150  # every threshold that is a config field (sections of every stage)


def test_every_key_set_in_the_file_reaches_the_settings(tmp_path: Path) -> None:
    """Each key, changed from its default to another valid value, is that value in the loaded settings."""
    changed: dict[str, object] = {}
    for leaf in leaves():
        key, default = ".".join(leaf.key), leaf.default
        if key in SECRET_KEYS:
            changed[key] = "https://hooks.example/secret"
        elif isinstance(default, bool):
            changed[key] = not default
        elif isinstance(default, timedelta):
            changed[key] = default + timedelta(minutes=1)
    settings = load_settings(write(tmp_path, every_key_file(changed)), env={}).settings
    for key, value in changed.items():
        current: object = settings
        for part in key.split("."):
            current = getattr(current, part)
        assert current == value, key


def test_unknown_keys_and_tables_are_rejected_with_the_closest_valid_one(tmp_path: Path) -> None:
    path = write(tmp_path, "[detector]\nlatency_treshold = 0.3\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    message = str(caught.value)
    assert str(path) in message and "'latency_treshold'" in message
    assert "did you mean 'latency_change_threshold'" in message
    with pytest.raises(ConfigError, match=r"'detecter' in the top level \(did you mean 'detector'\?\)"):
        load_settings(write(tmp_path, "[detecter]\n"), env={})
    with pytest.raises(ConfigError, match=r"\[detector.changepoint\].*did you mean 'max_p_value'"):
        load_settings(write(tmp_path, "[detector.changepoint]\nmax_pvalue = 0.1\n"), env={})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[detector]\nwindow_before = 30\n", r"\[detector\] window_before must be a duration .* bare number"),
        ('[detector]\nwindow_before = "30 parsecs"\n', r"\[detector\] window_before: '30 parsecs' is not a"),
        ("[detector]\np_value_threshold = 2\n", r"\[detector\] p_value_threshold must be in \(0, 1\]"),
        ("[drift]\ntail_quantile = 1.5\n", r"\[drift\] tail_quantile must be in \(0, 1\], not 1.5"),
        ("[gate]\nconfidence = 0\n", r"\[gate\] confidence must be in \(0, 1\], not 0"),
        ('[detector]\nlatency_change_threshold = "big"\n', r"latency_change_threshold must be a number"),
        ("[collector]\nstatement_timeout_ms = -5\n", r"\[collector\] statement_timeout_ms must be >= 0"),
        ("[samples]\nmin_executions = 1.5\n", r"\[samples\] min_executions must be an integer"),
        ('[gate]\noutlier_method = "tukee"\n', r"outlier_method must be one of .*did you mean 'tukey'"),
        ("[plans]\ncapture_plans = 1\n", r"\[plans\] capture_plans must be true or false"),
        ("[plans]\ncost_change_ratio = 0.5\n", r"\[plans\] cost_change_ratio must be 0 \(off\) or greater"),
        ("[detector]\nchangepoint = 3\n", r"\[detector.changepoint\] must be a table"),
        # a section's own rule, across keys: the error names the section and where the values came from
        (
            "[detector]\nmin_samples_per_side = 2\n",
            r"\[detector\] min_samples_per_side must be >= ",
        ),
        (
            "[collector]\nstatement_timeout_ms = 40000\n",
            r"\[collector\] statement_timeout_ms .* must be below",
        ),
        ("[detector\n", r"invalid TOML"),
        # values the file accepted and a run regretted (issue 28)
        ("[samples]\nmin_executions = 9223372036854775808\n", r"min_executions must be at most 9,223,"),
        ('[detector]\nwindow_before = "99999999999d"\n', r"longer than any duration"),
        ('[detector]\nwindow_before = "40000d"\n', r"window_before must be at most 36,500 days"),
        ('[alerts]\nwebhook_url = "ftp://hooks.example.com/x"\n', r"\[alerts\] webhook_url is not an http"),
        ('[alerts]\nslack_webhook_url = "https:///no-host"\n', r"slack_webhook_url is not an http"),
    ],
)
def test_bad_config_files_are_rejected_naming_the_file_and_the_key(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=expected) as caught:
        load_settings(path, env={})
    assert str(path) in str(caught.value)


def test_a_nested_table_keeps_its_parents_defaults_for_keys_it_does_not_set(tmp_path: Path) -> None:
    """[detector.changepoint] defaults are the detector's (no serial correction), not the change point
    module's own; setting one key of it keeps the rest."""
    loaded = load_settings(write(tmp_path, "[detector.changepoint]\nmax_p_value = 0.005\n"), env={})
    changepoint = loaded.settings.detector.changepoint
    assert changepoint.max_p_value == 0.005
    assert changepoint.serial_correction is RadarSettings().detector.changepoint.serial_correction is False


def test_a_named_config_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file not found: .*nope.toml"):
        load_settings(tmp_path / "nope.toml", env={})
    with pytest.raises(ConfigError, match=r"config file not found: .*env.toml"):
        load_settings(env={"RADAR_CONFIG": str(tmp_path / "env.toml")})


def test_provenance_default_file_env_flag(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[detector]\nlatency_change_threshold = 0.25\np_value_threshold = 0.01\n"
        '[alerts]\nslack_webhook_url = "https://hooks.slack.com/services/T0/B0/secret-xyz"\n',
    )
    env = {
        "RADAR_DETECTOR__LATENCY_CHANGE_THRESHOLD": "0.3",
        "RADAR_DETECTOR__WINDOW_BEFORE": "20m",
        "RADAR_LAKE_ROOT": "ignored: no double underscore",
    }
    flag = [Override("detector.window_before", timedelta(minutes=10), "flag --window-minutes")]
    loaded = load_settings(path, env=env, overrides=flag)
    detector = loaded.settings.detector
    assert detector.latency_change_threshold == 0.3  # env beats file
    assert detector.p_value_threshold == 0.01  # file beats default
    assert detector.window_before == timedelta(minutes=10)  # flag beats env
    rows = {row["key"]: row for row in loaded.rows()}
    assert rows["detector.latency_change_threshold"] == {
        "key": "detector.latency_change_threshold",
        "value": 0.3,
        "source": "environment variable RADAR_DETECTOR__LATENCY_CHANGE_THRESHOLD",
    }
    assert rows["detector.p_value_threshold"]["source"] == f"file {path}"
    assert rows["detector.window_before"] == {
        "key": "detector.window_before",
        "value": "10m",
        "source": "flag --window-minutes",
    }
    assert rows["detector.fdr_q"]["source"] == "default"
    assert rows["alerts.slack_webhook_url"]["value"] == "<set>"
    assert "secret-xyz" not in repr(loaded.rows())


def test_every_key_is_reachable_by_a_set_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """`--set KEY=VALUE`: any key, read as in a RADAR_ variable, before or after the command, checked."""
    import json

    from jobs.cli.main import main

    for leaf in leaves():  # every key: its default, written as text, comes back as the same value
        key = ".".join(leaf.key)
        text = plain(leaf.default)
        as_text = text if isinstance(text, str) else json.dumps(text)  # JSON scalars and arrays are TOML
        override = setting_override(f"{key}={as_text}")
        assert override.value == leaf.default, key
    code = main(
        [
            "--set",
            "drift.samples.stale_block_share=0.2",
            "config",
            "show",
            "--format",
            "json",
            "--set",
            "drift.samples.stale_window=15m",
        ]
    )
    rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)}
    assert code == 0
    assert rows["drift.samples.stale_block_share"]["value"] == 0.2
    assert rows["drift.samples.stale_block_share"]["source"] == "flag --set drift.samples.stale_block_share"
    assert rows["drift.samples.stale_window"]["value"] == "15m"
    assert main(["config", "show", "--set", "drift.samples.stale_windo=15m"]) == 2
    assert "did you mean 'drift.samples.stale_window'" in "".join(capsys.readouterr())
    assert main(["config", "show", "--set", "drift.samples.stale_block_share=2"]) == 2
    assert "stale_block_share must be in (0, 1]" in "".join(capsys.readouterr())
    assert main(["config", "show", "--set", "no-equals-sign"]) == 2
    assert "expected KEY=VALUE" in "".join(capsys.readouterr())


def test_environment_variables_are_checked_like_the_file() -> None:
    with pytest.raises(
        ConfigError, match=r"RADAR_DETECTOR__LATENCY_TRESHOLD: no such setting.*LATENCY_CHANGE"
    ):
        load_settings(env={"RADAR_DETECTOR__LATENCY_TRESHOLD": "0.3"})
    with pytest.raises(ConfigError, match=r"RADAR_DETECTOR__P_VALUE_THRESHOLD.*must be in"):
        load_settings(env={"RADAR_DETECTOR__P_VALUE_THRESHOLD": "7"})
    loaded = load_settings(env={"RADAR_PLANS__CAPTURE_PLANS": "true", "RADAR_REPORT__OUT": "/srv/reports"})
    assert loaded.settings.plans.capture_plans is True and loaded.settings.report.out == "/srv/reports"


def test_the_drift_designs_key_names_are_accepted_everywhere(tmp_path: Path) -> None:
    """js_block_threshold, psi_block_threshold, smoothing_epsilon (issue 27): the design's names of the
    scorer's keys, in the file, the environment and --set; both names at once is an error."""
    path = write(tmp_path, "[drift.score]\njs_block_threshold = 0.3\nsmoothing_epsilon = 1e-8\nn_bins = 16\n")
    score = load_settings(path, env={}).settings.drift.score
    assert (score.js_block, score.smoothing, score.n_bins) == (0.3, 1e-8, 16)
    env = load_settings(env={"RADAR_DRIFT__SCORE__PSI_BLOCK_THRESHOLD": "0.4"}).settings.drift.score
    assert env.psi_block == 0.4
    flag = load_settings(env={}, overrides=[setting_override("drift.score.psi_block_threshold=0.5")])
    assert flag.settings.drift.score.psi_block == 0.5
    both = write(tmp_path, "[drift.score]\njs_block_threshold = 0.3\njs_block = 0.2\n")
    with pytest.raises(ConfigError, match="sets js_block twice"):
        load_settings(both, env={})


def test_the_fleet_files_collector_table_yields_to_keys_the_config_sets(tmp_path: Path) -> None:
    fleet = FleetConfig(
        instances=(InstanceConfig(name="a", dsn="postgresql://x@h/db"),),
        collector=CollectorConfig(statement_timeout_ms=3000, lock_timeout_ms=500),
    )
    loaded = load_settings(write(tmp_path, "[collector]\nlock_timeout_ms = 200\n"), env={})
    chosen = loaded.collector_for(fleet)
    assert (chosen.statement_timeout_ms, chosen.lock_timeout_ms) == (3000, 200)


@given(st.integers(min_value=0, max_value=10**9))
def test_durations_round_trip(milliseconds: int) -> None:
    duration = timedelta(milliseconds=milliseconds)
    assert parse_duration(format_duration(duration), "x") == duration


def test_duration_forms() -> None:
    assert parse_duration("1h30m", "x") == timedelta(minutes=90)
    assert parse_duration("250ms", "x") == timedelta(milliseconds=250)
    assert format_duration(timedelta(days=7)) == "7d" and format_duration(timedelta(seconds=90)) == "90s"
    with pytest.raises(ConfigError, match="x: '' is not a duration"):
        parse_duration("", "x")


# -- behaviour: keys reach the code they tune ------------------------------------------------------------


def offset_step_frames() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """One query 10x slower 4 minutes after a deploy (10 s samples, 10 minutes each side)."""
    rng = np.random.default_rng(11)
    values = np.where(np.arange(120) >= 60 + 24, 10.0, 1.0) * rng.lognormal(0, 0.05, 120)
    samples = series_samples(values, first=-60)
    texts = series_texts([("alpha", 7, "select * from orders where customer_id = $1")])
    deploys = events_frame([DeployEvent(version="v7", deployed_at=SERIES_DEPLOY_AT, instance=None)]).drop(
        "date"
    )
    return samples, texts, deploys


def deploy_status(settings: RadarSettings) -> str:
    samples, texts, deploys = offset_step_frames()
    found = detect_from_frames(samples, texts, deploys, PLAN_SNAPSHOTS.empty(), settings.detection_config())
    return found.regressions.filter(pl.col("queryid") == 7)["status"].item()


def test_changepoint_tolerance_from_the_config_changes_the_verdict(tmp_path: Path) -> None:
    assert deploy_status(RadarSettings()) == "detected"  # 4 min from the deploy: within 20% of 20 min
    tight = load_settings(
        write(tmp_path, '[detector]\nchangepoint_tolerance = 0.05\nchangepoint_tolerance_floor = "1m"\n'),
        env={},
    ).settings
    assert deploy_status(tight) == "no_regression"


def test_latency_threshold_and_window_from_the_config_change_the_verdict(tmp_path: Path) -> None:
    assert (
        deploy_status(
            load_settings(write(tmp_path, "[detector]\nlatency_change_threshold = 20.0\n"), env={}).settings
        )
        == "no_regression"
    )
    short = load_settings(
        write(tmp_path, '[detector]\nwindow_before = "30s"\nwindow_after = "30s"\n'), env={}
    )
    assert deploy_status(short.settings) == "insufficient_data"


def test_min_executions_from_the_config_reaches_the_detection_config(tmp_path: Path) -> None:
    """What a detection run rebuilds its samples with (the CLI's `radar detect` test runs it on a lake)."""
    settings = load_settings(write(tmp_path, "[samples]\nmin_executions = 7\n"), env={}).settings
    assert settings.detection_config().samples.min_executions == 7


def test_the_committed_example_file_is_current() -> None:
    example = ROOT / "data" / "radar.example.toml"
    assert example.read_text() == example_toml(), "run `make config-reference`"


def test_the_example_file_is_valid_when_uncommented(tmp_path: Path) -> None:
    key_line = re.compile(r"# ([a-z_][a-z0-9_]*) = ")
    lines = [line[2:] if key_line.match(line) else line for line in example_toml().splitlines()]
    uncommented = "\n".join(line for line in lines if not line.startswith("#"))
    assert uncommented.count(" = ") == len(leaves())
    assert load_settings(write(tmp_path, uncommented), env={}).settings == RadarSettings()


def test_every_key_has_a_meaning_in_the_reference() -> None:
    from jobs.config.reference import describe

    missing = [".".join(leaf.key) for leaf in leaves() if not describe(leaf)]
    assert missing == []
    assert plain(timedelta(minutes=30)) == "30m"


def test_no_section_loosens_what_another_withholds() -> None:
    """The collector's query_text and a plan source's: the cycle uses the stricter of the two."""
    from jobs.query.texts import strictest_query_text

    assert strictest_query_text("normalized", "withheld") == "withheld"
    assert strictest_query_text("withheld", "normalized") == "withheld"
    assert strictest_query_text("normalized", "normalized") == "normalized"


def test_schedules_are_cron_expressions(tmp_path: Path) -> None:
    loaded = load_settings(write(tmp_path, '[schedules]\nsnapshot = "*/5 * * * *"\n'), env={})
    assert loaded.settings.schedules.snapshot == "*/5 * * * *"
    with pytest.raises(ConfigError, match=r"\[schedules\] samples must be a cron expression of 5 fields"):
        load_settings(write(tmp_path, '[schedules]\nsamples = "every 15 minutes"\n'), env={})


def test_the_plans_cost_change_ratio_reaches_the_capture(tmp_path: Path) -> None:
    """[plans] cost_change_ratio (a same-shape plan stored again when its cost moved so much) is the
    capture's: write_plan_snapshots reads it from capture_config()."""
    settings = load_settings(write(tmp_path, "[plans]\ncost_change_ratio = 1.5\n"), env={}).settings
    assert settings.plans.capture_config().cost_change_ratio == 1.5


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_secret_set_by_flag_is_never_shown(
    fmt: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`radar config show` withheld a webhook URL given by ``--set`` in its value column but printed the
    whole flag, token included, as its source; a mistyped key printed it in the error."""
    from jobs.cli.main import main

    monkeypatch.setenv("COLUMNS", "400")  # a table row on one line: no token split across two
    url = "alerts.slack_webhook_url=https://hooks.slack.com/services/T0/B0/SeCrEtToKeN"
    assert main(["--set", url, "config", "show", "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert "SeCrEt" not in out and "ToKeN" not in out and "flag --set alerts.slack_webhook_url" in out
    assert main(["--set", url.replace("slack_", "slak_"), "config", "show"]) == 2
    said = "".join(capsys.readouterr())
    assert "SeCrEt" not in said and "ToKeN" not in said and "slak_webhook_url" in said
