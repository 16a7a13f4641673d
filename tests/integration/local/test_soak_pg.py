"""The soak test (issue 21): the README's cron loop on a real two-server fleet under pgbench, run by the
radar's own commands in their own processes, tick after tick, as a user runs it.

Two embedded servers run pgbench (tpcb-like, select-only and a custom script with an UPDATE and a join)
for the whole run. Every tick (a compressed cron minute) runs `radar snapshot --capture-plans
--auto-explain`, `radar detect` and `radar alerts` to a local fake Slack that applies Slack's rules. The
primary key of pgbench_accounts is dropped on shop-a at a marked deploy and on shop-b unannounced, then
restored on both. Asserted: no command fails and every JSON output parses, both regressions are found and
attributed right (shop-a to its deploy, shop-b to none), both recover, each alert reaches Slack exactly
once, the plan diff names the dropped key (not the restored one), a finding's onset stays put and its
before-level within ×1.5 across the runs that report it, and its change time lies within two ticks of
the drop.

Time is compressed: a tick of ``RADAR_SOAK_TICK_S`` (default 9 s; the three commands take about that
on a busy 2-core machine) stands for a cron minute, and the detector's windows are scaled to it in the
run's config file (``SOAK_CONFIG``). ``RADAR_SOAK_TICKS`` (default 70: at least 10 minutes) sets the
length. Its own tier: `make test-soak` (CI runs it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobs.local.embedded import EmbeddedFleet, postgres_bin_dir
from tests.conftest import FleetFactory
from tests.support.slack_emulator import Emulator, key_of, serve_slack

pytestmark = [pytest.mark.postgres, pytest.mark.soak]

ROOT = Path(__file__).resolve().parents[3]
TICK_S = float(os.environ.get("RADAR_SOAK_TICK_S", "9"))
TICKS = int(os.environ.get("RADAR_SOAK_TICKS", "70"))
DROP_A = int(TICKS * 0.30)  # shop-a: at the deploy v812-drop-pkey
DROP_B = DROP_A + 3  # shop-b: unannounced
RESTORE = int(TICKS * 0.65)  # both; shop-a's restore is a deploy too
PGBENCH_RATE = 16  # transactions per second per server, over 2 clients
SCALE = 2

# The custom script: an UPDATE and a join, both through pgbench_accounts' key.
CUSTOM_SCRIPT = """\
\\set aid random(1, 100000 * :scale)
\\set bid random(1, :scale)
UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = :bid;
SELECT a.abalance, b.bbalance FROM pgbench_accounts a JOIN pgbench_branches b ON b.bid = a.bid
  WHERE a.aid = :aid;
"""

# A cron minute squeezed into a tick: windows and tolerances in ticks (the production defaults are 30-min
# windows and a 2-min floor over 1-minute samples).
SOAK_CONFIG = f"""\
[detector]
window_before = "{int(TICK_S * 20)}s"
window_after = "{int(TICK_S * 20)}s"
changepoint_tolerance_floor = "{int(TICK_S * 3)}s"
history = "2h"

[alerts]
file = "{{alerts_file}}"
"""

SELECT_ONLY = "SELECT abalance FROM pgbench_accounts WHERE aid ="


@dataclass
class Run:
    """One command of one tick: what it returned."""

    tick: int
    command: str
    code: int
    seconds: float
    stdout: str
    stderr: str
    rows: Any = None


@dataclass
class Soak:
    runs: list[Run] = field(default_factory=list)
    detect_rows: list[tuple[int, list[dict[str, Any]]]] = field(default_factory=list)


@pytest.fixture
def slack() -> Iterator[Emulator]:
    with serve_slack() as emulator:
        yield emulator


@pytest.fixture(scope="module")
def soak_fleet(fleet_factory: FleetFactory) -> EmbeddedFleet:
    # auto_explain logs the slow side (seq scans of 200k rows take milliseconds): the plans UPDATEs get.
    return fleet_factory(["shop-a", "shop-b"], {"auto_explain.log_min_duration": "'5ms'"})


@pytest.fixture
def pgbench(soak_fleet: EmbeddedFleet, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """pgbench initialised at scale 2 on both servers, then running at a fixed rate for the whole test."""
    binary = str(postgres_bin_dir() / "pgbench")
    script = tmp_path / "custom.sql"
    script.write_text(CUSTOM_SCRIPT)
    duration = int(TICKS * TICK_S * 3 + 600)  # stopped by the fixture long before
    clients = []
    for server in soak_fleet.servers:
        subprocess.run(
            [binary, "-i", "-q", "-s", str(SCALE), server.dsn], check=True, capture_output=True, timeout=300
        )
        with psycopg.connect(server.dsn, autocommit=True) as conn:  # a clean start for the counters
            conn.execute("select pg_stat_statements_reset()")
        clients.append(
            subprocess.Popen(
                [
                    binary,
                    "-n",
                    "-c",
                    "2",
                    "-j",
                    "2",
                    "-R",
                    str(PGBENCH_RATE),
                    "-T",
                    str(duration),
                    "-b",
                    "tpcb-like@2",
                    "-b",
                    "select-only@5",
                    "-f",
                    f"{script}@3",
                    server.dsn,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )
    try:
        yield clients
    finally:
        for client in clients:
            client.terminate()
            client.wait(timeout=30)


def radar(tick: int, common: list[str], *args: str, env: dict[str, str]) -> Run:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli.main", *common, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    run = Run(tick, args[0], done.returncode, time.monotonic() - started, done.stdout, done.stderr)
    assert run.code == 0, (tick, args, run.code, run.stderr[-2000:])  # no command fails
    if "--format" in args and args[args.index("--format") + 1] == "json":
        run.rows = json.loads(done.stdout)  # every run's JSON must parse
    return run


def alter(fleet: EmbeddedFleet, name: str, statement: str) -> None:
    with psycopg.connect(fleet.server(name).dsn, autocommit=True) as conn:
        conn.execute(statement)


@pytest.mark.timeout(int(TICKS * TICK_S * 3 + 900))  # a bound, far above the expected run
def test_the_cron_loop_survives_a_pgbench_fleet_and_finds_explains_and_recovers_both_regressions(
    soak_fleet: EmbeddedFleet,
    pgbench: list[subprocess.Popen[bytes]],
    slack: Emulator,
    tmp_path: Path,
) -> None:
    # RADAR_SOAK_LAKE keeps the lake where it can be looked at afterwards (emptied first).
    lake_root = Path(os.environ.get("RADAR_SOAK_LAKE") or tmp_path / "lake")
    shutil.rmtree(lake_root, ignore_errors=True)
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(soak_fleet.fleet_config_toml())
    config_file = tmp_path / "radar.toml"
    config_file.write_text(SOAK_CONFIG.format(alerts_file=tmp_path / "alerts.jsonl"))
    common = ["--lake", str(lake_root), "--fleet-file", str(fleet_file), "--config", str(config_file)]
    env = {**os.environ, "RADAR_SLACK_WEBHOOK": slack.url, "PYTHONPATH": str(ROOT)}
    env.pop("DAGSTER_HOME", None)
    soak = Soak()
    drops: dict[str, datetime] = {}

    def mark_deploy(tick: int, version: str) -> Run:
        return radar(tick, common, "deploy", "mark", "--instance", "shop-a", "--version", version, env=env)

    started = time.monotonic()
    for tick in range(TICKS):
        tick_started = time.monotonic()
        if tick == DROP_A:
            soak.runs.append(mark_deploy(tick, "v812-drop-pkey"))
            alter(soak_fleet, "shop-a", "alter table pgbench_accounts drop constraint pgbench_accounts_pkey")
            drops["shop-a"] = datetime.now(UTC)
        if tick == DROP_B:
            alter(soak_fleet, "shop-b", "alter table pgbench_accounts drop constraint pgbench_accounts_pkey")
            drops["shop-b"] = datetime.now(UTC)
        if tick == RESTORE:
            soak.runs.append(mark_deploy(tick, "v813-restore-pkey"))
            for name in ("shop-a", "shop-b"):
                alter(soak_fleet, name, "alter table pgbench_accounts add primary key (aid)")
        snapshot = radar(
            tick, common, "snapshot", "--capture-plans", "--auto-explain", "--format", "json", env=env
        )
        detect = radar(tick, common, "detect", "--format", "json", env=env)
        alerts = radar(tick, common, "alerts", "--format", "json", env=env)
        soak.runs += [snapshot, detect, alerts]
        soak.detect_rows.append((tick, detect.rows))
        for client in pgbench:
            assert client.poll() is None, f"pgbench stopped: {client.stderr.read().decode()[-1000:]}"
        time.sleep(max(0.0, TICK_S - (time.monotonic() - tick_started)))
    elapsed = time.monotonic() - started
    print(f"soak: {TICKS} ticks in {elapsed:.0f} s; " + _timings(soak.runs))

    final = radar(TICKS, common, "sql", "select * from findings", "--format", "json", env=env).rows
    ours = [f for f in final if "pgbench_accounts" in (f["query"] or "")]
    shown = [(f["instance"], f["status"], f["deploy_version"], f["query"][:60]) for f in ours]
    # shop-a: at its deploy; shop-b: unannounced (no deploy there). Both recovered after the restore.
    a = [f for f in ours if f["instance"] == "shop-a" and f["deploy_version"] == "v812-drop-pkey"]
    b = [f for f in ours if f["instance"] == "shop-b"]
    assert a, shown
    assert b and all(f["deploy_version"] is None and f["analysis"] == "unannounced" for f in b), shown
    assert all(f["status"] == "recovered" for f in a + b), shown
    assert not [f for f in final if f["deploy_version"] == "v813-restore-pkey"], shown
    for finding in a:  # the deploy after the change is no candidate cause
        assert "v813" not in (finding["other_deploys"] or ""), finding["other_deploys"]

    # The plan diff names the drop: the key's index scan before, a seq scan after; never the reverse.
    select_a = [f for f in a if SELECT_ONLY in f["query"]]
    assert select_a, shown
    summary = select_a[0]["plan_diff_summary"] or ""
    assert "Seq Scan on pgbench_accounts" in summary and "pgbench_accounts_pkey" in summary, summary
    assert summary.index("pgbench_accounts_pkey") < summary.index("Seq Scan on pgbench_accounts"), summary
    assert not summary.startswith("Plan changed: Seq Scan"), summary

    # Each alert (a finding's opening, its recovery) reached Slack once, and both states were sent.
    counts = slack.keys(slack.accepted)
    assert counts and max(counts.values()) == 1, counts
    assert len(slack.accepted) >= 2 * (len(a) + len(b)), [key_of(body) for body in slack.accepted]

    # Stable across runs: once reported, a finding keeps its onset and (nearly) its before-level.
    seen: dict[str, list[tuple[int, Any, float]]] = {}
    for tick, rows in soak.detect_rows:
        for row in rows:
            seen.setdefault(row["finding_id"], []).append((tick, row["onset"], row["before_mean_ms"]))
    for finding in a + b:
        history = seen.get(finding["finding_id"], [])
        assert history, finding["finding_id"]
        assert len({onset for _, onset, _ in history}) == 1, history
        # Sub-0.1 ms levels move a little while the first runs after the step settle its boundary (seen:
        # 0.065, 0.077, 0.082 ms, then 0.077 for good); issue 21's mixed interval moved one ×15. Before
        # pre_step_levels, which earlier change point began "before" moved them too (0.041 then 0.067 ms).
        levels = [level for _, _, level in history if level is not None]
        assert max(levels) <= 1.5 * min(levels), (finding["instance"], finding["analysis"], history)
        # The change is placed at the drop: the latest change time within two ticks of it.
        dropped = drops["shop-a" if finding in a else "shop-b"]
        change_at = datetime.fromisoformat(finding["detected_change_at"].replace("Z", "+00:00"))
        assert abs((change_at - dropped).total_seconds()) <= 2 * TICK_S, (
            change_at,
            dropped,
            {k: finding.get(k) for k in ("instance", "kind", "query", "work_metric", "onset")},
        )


def _timings(runs: list[Run]) -> str:
    out = []
    for command in ("snapshot", "detect", "alerts"):
        took = sorted(r.seconds for r in runs if r.command == command)
        if took:
            out.append(f"{command} median {took[len(took) // 2]:.1f} s, max {took[-1]:.1f} s")
    return "; ".join(out)
