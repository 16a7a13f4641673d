"""The plan pins ledger (issue 30) on a lake: proposals from open findings and their plan history, one row per
changed state (a re-run writes nothing), allow/deny, and `radar pins` list / explain / --format json. The
server's catalogue is given as a listing here; the hint_plan tier reads a real one."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from jobs.cli.main import main
from jobs.plans.config import PinningConfig
from jobs.plans.pin_apply import PinRefused, check_applied_pins, ready_problem, write_pin
from jobs.plans.pin_ledger import pin_id, read_pins, run_pin_proposals, write_pins
from jobs.plans.pins import PinImpossible, PlanCatalogue
from jobs.plans.setup_sql import SetupRoles, SetupSqlError, setup_steps
from tests.support.findings_lakes import AT, finding_row
from tests.support.pin_lakes import (
    GOOD,
    QUERYID,
    WITH_INDEX,
    WITHOUT_INDEX,
    listing,
    never_connect,
    proposed,
    write_pin_lake,
)


@pytest.fixture
def pin_lake(lake_root: Path) -> Path:
    return write_pin_lake(lake_root)


def test_an_open_plan_change_finding_is_proposed_once_and_its_state_change_recorded(pin_lake: Path) -> None:
    config = PinningConfig()
    catalogue_of = listing(WITH_INDEX)
    first = run_pin_proposals(pin_lake, catalogue_of, config, AT + timedelta(hours=2), decided_by="test")
    assert catalogue_of.seen == [("db1", {"orders"})]
    assert first.written.height == 1
    row = first.written.row(0, named=True)
    assert row["event"] == "proposed" and row["mode"] == "propose" and row["sql_run"] is None
    assert row["pin_id"] == pin_id("db1", finding_row(1)["finding_id"])
    assert row["hints"] == 'IndexScan("o" "orders_customer_id_idx")'
    assert row["indexes"] == "orders_customer_id_idx" and row["relations"] == "orders"
    assert (row["p_value"], row["before_mean_ms"], row["after_mean_ms"]) == (1e-6, 1.5, 45.0)

    again = run_pin_proposals(
        pin_lake, listing(WITH_INDEX), config, AT + timedelta(hours=3), decided_by="test"
    )
    assert again.written.is_empty(), "an unchanged pin is not recorded again"

    gone = run_pin_proposals(
        pin_lake, listing(WITHOUT_INDEX), config, AT + timedelta(hours=4), decided_by="t"
    )
    assert gone.written["event"].to_list() == ["impossible"]
    assert gone.written["reason"].to_list() == [
        "pin impossible: the last good plan used orders_customer_id_idx, which no longer exists"
    ]
    assert read_pins(pin_lake)["event"].to_list() == ["proposed", "impossible"]


def test_a_denied_query_is_recorded_as_skipped_and_its_server_never_read(pin_lake: Path) -> None:
    catalogue_of = listing(WITH_INDEX)
    config = PinningConfig(deny=(f"db1:{QUERYID}",))
    run = run_pin_proposals(pin_lake, catalogue_of, config, AT + timedelta(hours=2), decided_by="test")
    assert run.written["event"].to_list() == ["skipped"]
    assert run.written["reason"].to_list() == ["no pin: the query is in [pinning] deny"]
    assert catalogue_of.seen == []


def test_allow_list_leaves_other_queries_out() -> None:
    config = PinningConfig(allow=("db2:101", "-7"))
    assert config.query_allowed("db1", 101) == "the query is not in [pinning] allow"
    assert config.query_allowed("db2", 101) is None
    assert config.query_allowed("any", -7) is None
    assert PinningConfig(allow=("101",), deny=("101",)).query_allowed("db1", 101) is not None


@pytest.mark.parametrize("entry", ["x", "db1:", ":5", "1:2:x", str(2**63)])
def test_bad_allow_entries_are_refused_naming_them(entry: str) -> None:
    with pytest.raises(ValueError, match="allow entries"):
        PinningConfig(allow=(entry,))


def test_apply_mode_only_on_instances_that_opted_in() -> None:
    assert not PinningConfig().applies_on("db1")
    assert not PinningConfig(mode="apply").applies_on("db1")
    assert PinningConfig(mode="apply", apply_instances=("db1",)).applies_on("db1")


def test_a_server_that_cannot_be_listed_makes_the_pin_impossible_with_why(pin_lake: Path) -> None:
    def unreachable(finding: dict[str, Any], relations: set[str]) -> PlanCatalogue:
        raise PinImpossible("pin impossible: the relations and indexes of db1 could not be listed (timeout)")

    run = run_pin_proposals(pin_lake, unreachable, PinningConfig(), AT + timedelta(hours=2), decided_by="t")
    assert run.written["reason"].to_list() == [
        "pin impossible: the relations and indexes of db1 could not be listed (timeout)"
    ]


def test_radar_pins_lists_and_explains_the_ledger(pin_lake: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_pin_proposals(pin_lake, listing(WITH_INDEX), PinningConfig(), AT + timedelta(hours=2), decided_by="t")
    assert main(["--lake", str(pin_lake), "pins", "list", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(r["event"], r["queryid"], r["hints"]) for r in listed] == [
        ("proposed", str(QUERYID), 'IndexScan("o" "orders_customer_id_idx")')
    ]
    pin = listed[0]["pin_id"]
    assert main(["--lake", str(pin_lake), "pins", "explain", pin]) == 0
    text = capsys.readouterr().out
    assert "INSERT INTO hint_plan.hints (query_id, application_name, hints) VALUES (101, ''," in text
    assert "DELETE FROM hint_plan.hints WHERE query_id = 101" in text
    assert "Index Scan using orders_customer_id_idx on orders" in text  # the last good plan
    assert "SQL run on the server: none (nothing written)" in text
    assert main(["--lake", str(pin_lake), "pins", "explain", pin, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["good_plan_json"] == json.dumps(GOOD)
    assert main(["--lake", str(pin_lake), "pins", "explain", "nope"]) == 1
    assert "no pin 'nope'" in capsys.readouterr().out


def test_radar_pins_on_an_empty_ledger_says_so(lake_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--lake", str(lake_root), "pins"]) == 0
    assert "no pins recorded" in capsys.readouterr().out
    assert main(["--lake", str(lake_root), "pins", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_pinning_settings_come_from_set_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["config", "show", "--set", "pinning.mode=apply", "--set", 'pinning.apply_instances=["db1"]']
    assert main([*argv, "--format", "json"]) == 0
    shown = {r["key"]: r for r in json.loads(capsys.readouterr().out)}
    assert shown["pinning.mode"]["value"] == "apply"
    assert shown["pinning.mode"]["source"].startswith("flag --set")
    assert main(["config", "check", "--set", "pinning.mode=force"]) == 2
    assert "[pinning] mode must be one of" in capsys.readouterr().out


# --- apply / remove without a server: the checks before anything connects --------------------------------


def test_dry_run_returns_the_sql_and_connects_nowhere(pin_lake: Path) -> None:
    pin = proposed(pin_lake)
    done = write_pin(
        pin_lake, pin, action="apply", dsn_of=never_connect, config=PinningConfig(), now=AT, dry_run=True
    )
    assert not done.ran and "INSERT INTO hint_plan.hints" in done.sql
    assert read_pins(pin_lake)["event"].to_list() == ["proposed"]


@pytest.mark.parametrize(
    ("config", "action", "why"),
    [
        (PinningConfig(), "apply", "has not opted in"),
        (PinningConfig(mode="apply"), "apply", "has not opted in"),
        (PinningConfig(mode="apply", apply_instances=("db2",)), "apply", "has not opted in"),
        (
            PinningConfig(mode="apply", apply_instances=("db1",)),
            "remove",
            r"only an applied \(or verified\) pin can be removed",
        ),
    ],
)
def test_nothing_is_written_where_not_opted_in_or_in_the_wrong_state(
    pin_lake: Path, config: PinningConfig, action: str, why: str
) -> None:
    pin = proposed(pin_lake)
    with pytest.raises(PinRefused, match=why):
        write_pin(pin_lake, pin, action=action, dsn_of=never_connect, config=config, now=AT)
    assert read_pins(pin_lake)["event"].to_list() == ["proposed"]


def test_an_unknown_pin_is_a_key_error(pin_lake: Path) -> None:
    with pytest.raises(KeyError):
        write_pin(pin_lake, "nope", action="apply", dsn_of=never_connect, config=PinningConfig(), now=AT)


@pytest.mark.parametrize(
    ("facts", "why"),
    [
        ({"hint_table_vartype": "string", "enable_hint_table": "on"}, "not loaded"),
        ({"hint_table_vartype": None}, "not loaded"),
        ({"hint_table_vartype": "bool", "enable_hint_table": "off"}, "enable_hint_table is off"),
        (
            {"hint_table_vartype": "bool", "enable_hint_table": "on", "hint_table_exists": False},
            "does not exist",
        ),
        (
            {
                "hint_table_vartype": "bool",
                "enable_hint_table": "on",
                "hint_table_exists": True,
                "may_write": False,
            },
            "may not write",
        ),
    ],
)
def test_readiness_names_what_is_missing(facts: dict[str, Any], why: str) -> None:
    assert why in str(ready_problem(facts, "db1"))
    ready = {
        "hint_table_vartype": "bool",
        "enable_hint_table": "on",
        "hint_table_exists": True,
        "may_write": True,
    }
    assert ready_problem(ready, "db1") is None


def test_setup_sql_pins_adds_the_role_and_grants_from_postgresql_16_only() -> None:
    names = [(s.name, s.database) for s in setup_steps(160000, ["app"], pins=True)]
    assert names[-2:] == [("pin role", None), ("pin grants", "app")]
    assert "WITH INHERIT FALSE, SET TRUE" in setup_steps(180000, pins=True)[-2].sql
    assert not any(s.name.startswith("pin") for s in setup_steps(180000))
    with pytest.raises(SetupSqlError, match="PostgreSQL 16"):
        setup_steps(150000, pins=True)
    with pytest.raises(SetupSqlError, match="pin role"):
        setup_steps(180000, roles=SetupRoles(pin_role="radar_monitor"), pins=True)


def test_the_check_keeps_producible_pins_and_reports_one_it_may_not_remove(pin_lake: Path) -> None:
    pin = proposed(pin_lake)
    applied = read_pins(pin_lake).with_columns(
        pl.lit("applied").alias("event"), pl.lit(AT + timedelta(hours=3)).alias("recorded_at")
    )
    write_pins(pin_lake, applied, AT + timedelta(hours=3))
    kept = check_applied_pins(pin_lake, listing(WITH_INDEX), never_connect, PinningConfig(), AT)
    assert [(c.pin_id, c.outcome) for c in kept] == [(pin, "kept")]
    gone = check_applied_pins(pin_lake, listing(WITHOUT_INDEX), never_connect, PinningConfig(), AT)
    assert [c.outcome for c in gone] == ["not_removed"]
    assert (
        "orders_customer_id_idx, which no longer exists; not removed: db1 has not opted in" in gone[0].reason
    )
    assert read_pins(pin_lake)["event"].to_list() == ["proposed", "applied"]


def test_a_pin_past_its_proposal_is_not_proposed_again(pin_lake: Path) -> None:
    proposed(pin_lake)
    for event in ("applied", "verified", "failed", "removed"):
        row = (
            read_pins(pin_lake)
            .tail(1)
            .with_columns(pl.lit(event).alias("event"), pl.col("recorded_at") + timedelta(minutes=1))
        )
        write_pins(pin_lake, row, row["recorded_at"][0])
        again = run_pin_proposals(
            pin_lake, listing(WITHOUT_INDEX), PinningConfig(), AT + timedelta(days=1), decided_by="t"
        )
        assert again.written.is_empty(), event


def test_explain_shows_control_characters_of_fleet_names_as_escapes(
    lake_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A relation named with an escape sequence (the last good plan's, from a monitored server) cannot
    repaint the terminal through `radar pins explain`."""
    write_pin_lake(lake_root)
    run = run_pin_proposals(
        lake_root, listing(WITH_INDEX), PinningConfig(), AT + timedelta(hours=2), decided_by="t"
    )
    hostile = run.written.with_columns(
        pl.col("good_plan_json").str.replace(
            '"Relation Name": "orders"', '"Relation Name": "ord\\u001b[31mers"'
        ),
        pl.col("recorded_at") + timedelta(minutes=1),
    )
    write_pins(lake_root, hostile, AT + timedelta(hours=3))
    assert main(["--lake", str(lake_root), "pins", "explain", str(run.written["pin_id"][0])]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "ord\\x1b[31mers" in out


def test_the_findings_alert_carries_its_pin_line_in_the_payload_and_in_slack(
    pin_lake: Path, tmp_path: Path
) -> None:
    """An alert built after the pin was proposed says so (the payload's ``pin``; Slack's Plan Diff field)."""
    from jobs.alerts.config import AlertsConfig
    from jobs.alerts.run import send_alerts
    from jobs.alerts.slack import slack_message

    pid = proposed(pin_lake)
    sink = tmp_path / "alerts.jsonl"
    send_alerts(pin_lake, AlertsConfig(file=str(sink), dead_letter_file=str(tmp_path / "dead.jsonl")))
    (payload,) = [json.loads(line) for line in sink.read_text().splitlines()]
    assert payload["pin"].startswith("proposed IndexScan(") and f"radar pins explain {pid}" in payload["pin"]
    fields = [
        f["text"]
        for b in slack_message(payload)["blocks"]
        if b["type"] == "section"
        for f in b.get("fields", [])
    ]
    assert any(f.startswith("*Plan Diff*\n") and "Plan pin: proposed IndexScan(" in f for f in fields), fields
