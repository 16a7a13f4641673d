"""What reaches the lake, on real PostgreSQL 18 servers: no password, no literal value, no DSN secret.

Every byte of every file under the lake root is searched: the raw bytes, and (Parquet being
zstd-compressed) every column of every Parquet file read back with pyarrow.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl
import psycopg
import pyarrow.parquet as pq
import pytest

from jobs.cli import common
from jobs.cli import main as cli
from jobs.collect.collector import snapshot_fleet
from jobs.collect.fleet import CollectorConfig, FleetConfig
from jobs.lake import io as lake
from jobs.local.embedded import EmbeddedFleet
from jobs.pipeline.collection import CycleConfig, capture_fleet_plans
from jobs.plans.auto_explain import decode_auto_explain_record, ingest_auto_explain_logs
from jobs.plans.capture import capture_plans, write_plan_snapshots
from jobs.plans.config import AutoExplainConfig
from jobs.plans.shape import plan_root, plan_shape_hash
from orchestration.assets.snapshots import statement_snapshots
from orchestration.resources import FleetResource, LakeResource
from tests.conftest import FleetFactory
from tests.support.pg_workload import wait_for_log
from tests.support.secrets_corpus import CORPUS, assert_no_fragment, fragments

pytestmark = pytest.mark.postgres

ROLE_PASSWORD = "S3cr3t-Role-8d1f"
MAPPING_PASSWORD = "Fdw-Map-Secret-42c7"
LITERAL_EMAIL = "alice.literal@example.org"
BOUND_EMAIL = "bob.bound@example.org"
SETTING_TOKEN = "tok-9f8e7d6c5b"
DO_LITERAL = "carol.do-block@example.org"
SECRETS = (ROLE_PASSWORD, MAPPING_PASSWORD, LITERAL_EMAIL, BOUND_EMAIL, SETTING_TOKEN, DO_LITERAL)


def lake_strings(lake_root: Path) -> Iterable[tuple[Path, str]]:
    """(file, text) for every file under the lake: its raw bytes, and every Parquet column's values."""
    for path in sorted(p for p in lake_root.rglob("*") if p.is_file()):
        yield path, path.read_bytes().decode("utf-8", "replace")
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            yield path, json.dumps(table.to_pylist(), default=str)


def assert_lake_free_of(lake_root: Path, needles: Iterable[str]) -> int:
    files = 0
    for path, text in lake_strings(lake_root):
        files += 1
        for needle in needles:
            assert needle not in text, f"{needle!r} reached {path.relative_to(lake_root)}"
    assert files, "the lake is empty: nothing was searched"
    return files


@pytest.fixture(scope="module")
def secret_fleet(fleet_factory: FleetFactory) -> EmbeddedFleet:
    """A server that ran password-bearing utility statements and queries with literal values, with every
    statement's plan logged by auto_explain (jsonlog)."""
    fleet = fleet_factory(
        ["secrets"],
        {"pg_stat_statements.track": "'all'", "auto_explain.log_min_duration": "0"},
    )
    server = fleet.server("secrets")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE ROLE app LOGIN")
        conn.execute(f"ALTER ROLE app PASSWORD '{ROLE_PASSWORD}'")
        conn.execute("CREATE EXTENSION postgres_fdw")  # in the wheel's contrib
        conn.execute("CREATE SERVER remote FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '127.0.0.1')")
        conn.execute(
            f"CREATE USER MAPPING FOR app SERVER remote OPTIONS (user 'app', password '{MAPPING_PASSWORD}')"
        )
        conn.execute(f"SET app.token = '{SETTING_TOKEN}'")
        conn.execute("CREATE TABLE customers (id int PRIMARY KEY, email text, token text)")
        conn.execute(
            "INSERT INTO customers SELECT g, 'user' || g || '@example.org', md5(g::text) "
            "FROM generate_series(1, 2000) g"
        )
        conn.execute("ANALYZE customers")
        conn.execute(f"DO $$BEGIN PERFORM count(*) FROM customers WHERE email = '{DO_LITERAL}'; END$$")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        # Simple protocol: the literal is in the text; auto_explain logs it in Query Text and the Filter.
        conn.execute(f"SELECT id, token FROM customers WHERE email = '{LITERAL_EMAIL}'".encode())
        # Extended protocol: the value is bound; auto_explain logs it in Query Parameters.
        conn.execute("SELECT id FROM customers WHERE email = %s AND id > %s", (BOUND_EMAIL, 0))
        conn.execute("SELECT 'marker after workload' AS marker")
    wait_for_log(server.log_dir, b"marker after workload")
    logged = b"".join(p.read_bytes() for p in server.log_dir.glob("*.json"))
    assert LITERAL_EMAIL.encode() in logged and BOUND_EMAIL.encode() in logged, "auto_explain logged them"
    with psycopg.connect(server.dsn) as conn:
        texts = [r[0] for r in conn.execute("SELECT query FROM pg_stat_statements").fetchall()]
    assert any(ROLE_PASSWORD in t for t in texts), "pg_stat_statements keeps utility statements verbatim"
    assert any(MAPPING_PASSWORD in t for t in texts)
    return fleet


def test_no_secret_and_no_literal_reaches_the_lake(secret_fleet: EmbeddedFleet, lake_root: Path) -> None:
    server = secret_fleet.server("secrets")
    fleet = FleetConfig.from_embedded(secret_fleet)
    result = snapshot_fleet(fleet, lake_root)
    assert not result.failed, result.summary_rows()
    capture_fleet_plans(
        fleet,
        lake_root,
        {r.instance: r.captured_at for r in result.ok},
        CycleConfig(capture_plans=True, ingest_auto_explain=True),
    )
    files = assert_lake_free_of(lake_root, SECRETS)
    assert files >= 6
    texts = lake.scan_table(lake_root, "query_texts").collect()["query"].to_list()
    assert "ALTER ROLE app PASSWORD $1" in texts
    assert any(
        t.startswith("CREATE USER MAPPING FOR app SERVER remote OPTIONS (user $1, password $2)")
        for t in texts
    )
    assert "SET app.token = $1" in texts
    assert any(t.startswith("DO $1") for t in texts)
    assert any("SELECT id, token FROM customers WHERE email = $1" in t for t in texts)
    # auto_explain plans are stored, without their literals, with the shape of the plan as logged.
    plans = lake.scan_table(lake_root, "plan_snapshots").collect().filter(pl.col("source") == "auto_explain")
    literal_plan = _logged_plan(server.log_dir, LITERAL_EMAIL)
    stored = plans.filter(pl.col("queryid") == literal_plan.queryid)
    assert stored.height == 1
    assert stored["shape_hash"].item() == literal_plan.shape_hash
    assert plan_shape_hash(plan_root(stored["plan_json"].item())) == plan_shape_hash(literal_plan.root)
    assert "(email = $1)" in stored["plan_json"].item() or "email = $1" in stored["plan_json"].item()
    bound = plans.filter(pl.col("queryid") == _logged_plan(server.log_dir, BOUND_EMAIL).queryid)
    assert bound["query_parameters"].to_list() == ["$1 = ?, $2 = ?"]


def _logged_plan(log_dir: Path, needle: str) -> object:
    for path in log_dir.glob("*.json"):
        for line in path.read_text().splitlines():
            if needle in line and "plan:" in line:
                decoded = decode_auto_explain_record(json.loads(line))
                if decoded is not None and not isinstance(decoded, str):
                    return decoded
    raise AssertionError(f"no auto_explain record with {needle!r}")


MARKER = re.compile(r"^<(withheld|unparseable) query text: \d+ chars, sha256:[0-9a-f]{12}>")


def test_withheld_stores_no_text_at_all(secret_fleet: EmbeddedFleet, lake_root: Path) -> None:
    server = secret_fleet.server("secrets")
    fleet = FleetConfig.from_embedded(secret_fleet, CollectorConfig(query_text="withheld"))
    assert not snapshot_fleet(fleet, lake_root).failed
    ingest_auto_explain_logs(server.log_dir, "secrets", lake_root, AutoExplainConfig(query_text="withheld"))
    texts = lake.scan_table(lake_root, "query_texts").collect()
    assert texts.height > 5 and all(MARKER.match(q) for q in texts["query"])
    plans = lake.scan_table(lake_root, "plan_snapshots").collect()
    assert plans.height > 0 and plans["query_parameters"].null_count() == plans.height
    assert_lake_free_of(lake_root, [*SECRETS, "customers WHERE", "email = $1", "ALTER ROLE", "$1 = ?"])


# ---------------------------------------------------------------------------------------------------------
# Malformed DSNs: every sink


def bad_fleet_file(tmp_path: Path, good_dsn: str | None = None) -> Path:
    lines = []
    for bad in CORPUS:
        lines += ["[[instances]]", f'name = "{bad.label}"', f"dsn = {json.dumps(bad.dsn)}", ""]
    if good_dsn:
        lines += ["[[instances]]", 'name = "good"', f"dsn = {json.dumps(good_dsn)}", ""]
    path = tmp_path / "fleet.toml"
    path.write_text("\n".join(lines))
    loaded = FleetConfig.load(path)
    assert [i.dsn for i in loaded.instances][: len(CORPUS)] == [b.dsn for b in CORPUS], "TOML round trip"
    return path


def assert_no_corpus_fragment(text: str) -> None:
    for bad in CORPUS:
        assert_no_fragment(text, bad)


def test_radar_snapshot_console_and_snapshot_runs_show_no_password(
    tmp_path: Path, lake_root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common.console, "width", 2000)  # no folding: a leak would be one unbroken run
    fleet_file = bad_fleet_file(tmp_path)
    code = cli.main(["--lake", str(lake_root), "--fleet-file", str(fleet_file), "snapshot"])
    out = capsys.readouterr()
    assert code == 3, out.out + out.err  # every instance failed
    assert_no_corpus_fragment(out.out + out.err)
    for bad in CORPUS:
        assert bad.label in out.out
    runs = lake.scan_table(lake_root, "snapshot_runs").collect()
    assert runs.height == len(CORPUS) and set(runs["status"]) == {"failed"}
    for row in runs.iter_rows(named=True):
        assert row["error"].startswith(f"instance {row['instance']}: ")
        assert_no_corpus_fragment(row["error"])
    by_instance = dict(zip(runs["instance"], runs["error"], strict=True))
    assert "the DSN cannot be parsed: a key without '='" in by_instance["kv-unquoted-space"]
    assert_lake_free_of(lake_root, [f for bad in CORPUS for f in fragments(bad.password)])


def test_plan_capture_log_reasons_and_log_records_show_no_password(
    lake_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = datetime.now(UTC)
    candidates = pl.DataFrame(
        {"queryid": [11], "dbid": [None], "userid": [None], "query": ["SELECT 1"]},
        schema={"queryid": pl.Int64, "dbid": pl.Int64, "userid": pl.Int64, "query": pl.String},
    )
    with caplog.at_level(logging.INFO):
        for bad in CORPUS:
            captured = capture_plans(bad.dsn, bad.label, candidates, now)
            # One failed row per source the session was needed for (pg_store_plans, generic_explain).
            assert captured.log["status"].to_list() == ["failed", "failed"]
            assert all(bad.label in p for p in captured.problems)
            assert_no_corpus_fragment(" ".join(captured.problems))
            write_plan_snapshots(lake_root, bad.label, now, captured)
    reasons = lake.scan_table(lake_root, "plan_capture_log").collect()
    assert reasons.height == 2 * len(CORPUS)
    for row in reasons.iter_rows(named=True):
        prefix = f"instance {row['instance']}: cannot open the plan capture session"
        assert row["reason"].startswith(prefix)
        assert_no_corpus_fragment(row["reason"])
    assert len(caplog.records) >= len(CORPUS)
    for record in caplog.records:
        assert_no_corpus_fragment(record.getMessage())
    assert_no_corpus_fragment(caplog.text)
    assert_lake_free_of(lake_root, [f for bad in CORPUS for f in fragments(bad.password)])


def test_dagster_metadata_and_event_log_show_no_password(
    fleet_factory: FleetFactory, tmp_path: Path, lake_root: Path
) -> None:
    good = fleet_factory(["good"]).server("good")
    fleet_file = bad_fleet_file(tmp_path, good.dsn)
    resources = {
        "fleet": FleetResource(fleet_file=str(fleet_file)),
        "lake": LakeResource(root=str(lake_root)),
    }
    with dg.instance_for_test() as instance:
        result = dg.materialize([statement_snapshots], resources=resources, instance=instance)
        assert result.success
        materialization = result.asset_materializations_for_node("statement_snapshots")[0]
        assert materialization.metadata["instances_failed"].value == len(CORPUS)
        metadata = json.dumps({k: str(v.value) for k, v in materialization.metadata.items()})
        assert "kv-unquoted-space" in metadata
        assert_no_corpus_fragment(metadata)
        records = instance.all_logs(result.run_id)
        warnings = [r.user_message for r in records if "snapshot failed" in (r.user_message or "")]
        assert len(warnings) == len(CORPUS)
        for record in records:
            assert_no_corpus_fragment(repr(record))
            assert_no_corpus_fragment(record.user_message or "")
