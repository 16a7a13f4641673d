"""Deploy events: CLI marks, inbox files (good ones recorded, bad ones moved aside with their line)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from jobs.deploys import (
    DeployError,
    deploys_for_instances,
    ingest_deploy_files,
    load_deploy_events,
    mark_deploy,
    parse_timestamp,
)

AT = datetime(2026, 11, 29, 12, 30, tzinfo=UTC)


def test_mark_instances_and_fleet_and_dedupe(lake_root: Path) -> None:
    events = mark_deploy(lake_root, version="v1", instances=["alpha", "beta"], at="2026-11-29T12:30:00Z")
    assert [e.instance for e in events] == ["alpha", "beta"]
    mark_deploy(lake_root, version="v1", instances=["alpha", "beta"], at=AT)  # same deploy again
    mark_deploy(lake_root, version="v2", fleet=True, at="2026-11-29T14:30:00+02:00")
    loaded = load_deploy_events(lake_root)
    assert loaded.height == 3
    assert sorted(loaded["scope"].to_list()) == ["fleet", "instance", "instance"]
    assert loaded["deployed_at"].to_list() == [AT, AT, AT]
    assert loaded["deploy_id"].n_unique() == 3


def test_mark_needs_exactly_one_target(lake_root: Path) -> None:
    with pytest.raises(DeployError, match="either instances or fleet"):
        mark_deploy(lake_root, version="v1", at=AT)
    with pytest.raises(DeployError, match="either instances or fleet"):
        mark_deploy(lake_root, version="v1", instances=["a"], fleet=True, at=AT)
    with pytest.raises(DeployError, match="not valid"):
        mark_deploy(lake_root, version="v1", instances=["a/../b"], at=AT)


def test_naive_timestamp_is_utc_and_garbage_is_named() -> None:
    assert parse_timestamp("2026-11-29 12:30:00", "x") == AT
    with pytest.raises(DeployError, match="when: timestamp 'yesterday'"):
        parse_timestamp("yesterday", "when")


def test_inbox_good_files_are_recorded_and_moved(lake_root: Path, tmp_path: Path) -> None:
    inbox = tmp_path / "deploys"
    inbox.mkdir()
    (inbox / "a.csv").write_text(
        "version,at,instance\nv7,2026-11-29T12:30:00Z,alpha\nv8,2026-11-30T01:00:00Z,*\n"
    )
    (inbox / "b.json").write_text(
        '[\n {"version": "v9", "at": "2026-11-29T12:30:00Z", "instances": ["a", "b"]}\n]'
    )
    (inbox / "c.jsonl").write_text('{"version": "v10", "at": "2026-11-29T12:30:00Z", "fleet": true}\n')
    report = ingest_deploy_files(inbox, lake_root)
    assert sorted(p.name for p in report.processed) == ["a.csv", "b.json", "c.jsonl"]
    assert not report.rejected
    assert sorted(p.name for p in (inbox / "processed").iterdir()) == ["a.csv", "b.json", "c.jsonl"]
    loaded = load_deploy_events(lake_root)
    assert sorted(loaded["version"].to_list()) == ["v10", "v7", "v8", "v9", "v9"]
    assert loaded.filter(pl.col("version") == "v8")["scope"].item() == "fleet"
    assert set(loaded["source"]) == {"a.csv", "b.json", "c.jsonl"}
    # Files from two dates land in two partitions; the same file dropped again records nothing new.
    (inbox / "a.csv").write_text((inbox / "processed" / "a.csv").read_text())
    ingest_deploy_files(inbox, lake_root)
    assert load_deploy_events(lake_root).height == 5
    assert (inbox / "processed" / "a.1.csv").exists()


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "bad.csv",
            "version,at,instance\nv1,2026-11-29T12:00:00Z,alpha\nv2,not-a-time,alpha\n",
            "line 3: timestamp",
        ),
        (
            "short.csv",
            "version,at,instance\nv1,2026-11-29T12:00:00Z,alpha\nv2,2026-11-29\n",
            "line 3: expected 3",
        ),
        ("header.csv", "release,when\nv1,2026-11-29\n", "line 1: header needs version"),
        (
            "broken.json",
            '[\n {"version": "v1", "at": "2026-11-29T12:00:00Z", "fleet": true},\n {"version": \n',
            "line 4",
        ),
        (
            "field.json",
            '[\n {"version": "v1", "at": "2026-11-29T12:00:00Z", "fleet": true},\n\n {"at": "x"}\n]',
            "line 4",
        ),
        (
            "both.jsonl",
            '{"version": "v1", "at": "2026-11-29T12:00:00Z", "instance": "a", "fleet": true}\n',
            "line 1",
        ),
        ("notes.txt", "hello", "unsupported file type"),
    ],
)
def test_malformed_file_is_rejected_whole_with_its_line(
    lake_root: Path, tmp_path: Path, name: str, content: str, message: str
) -> None:
    inbox = tmp_path / "deploys"
    inbox.mkdir()
    (inbox / name).write_text(content)
    report = ingest_deploy_files(inbox, lake_root)
    assert not report.processed and not report.events
    assert load_deploy_events(lake_root).height == 0  # nothing half-read
    assert not (inbox / name).exists()
    error = (inbox / "rejected" / f"{name}.error.txt").read_text()
    assert name in error and message in error
    assert (inbox / "rejected" / name).read_text() == content


def test_fleet_deploys_expand_to_every_instance(lake_root: Path) -> None:
    mark_deploy(lake_root, version="v1", fleet=True, at=AT)
    mark_deploy(lake_root, version="v2", instances=["beta"], at=AT)
    expanded = deploys_for_instances(load_deploy_events(lake_root), ["beta", "alpha"])
    assert sorted(zip(expanded["version"], expanded["instance"], strict=True)) == [
        ("v1", "alpha"),
        ("v1", "beta"),
        ("v2", "beta"),
    ]
