"""Deploy events: CLI marks, inbox files (good ones recorded, bad ones moved aside with their line)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from jobs.cli.main import main
from jobs.collect import deploys
from jobs.collect.deploys import (
    DeployError,
    DeployEvent,
    DeployInboxConfig,
    DeployRules,
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


# ---------------------------------------------------------------------------------------------------------
# Inbox limits: size, event count, time range, instance names; one bad file never blocks the others.

GOOD_LINE = '{"version": "v1", "at": "2026-11-29T12:00:00Z", "instance": "alpha"}\n'
FLEET_NAMES = frozenset({"alpha", "beta"})


def inbox_with(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    inbox = tmp_path / "deploys"
    inbox.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = inbox / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return inbox


def rejected_error(inbox: Path, name: str) -> str:
    return (inbox / "rejected" / f"{name}.error.txt").read_text()


def test_oversized_file_is_rejected_by_its_size_without_being_read(lake_root: Path, tmp_path: Path) -> None:
    inbox = inbox_with(tmp_path, {"small.jsonl": GOOD_LINE})
    with (inbox / "huge.jsonl").open("wb") as handle:  # 11 MB of NUL bytes, sparse: if read, "NUL byte"
        handle.truncate(11 * 1024 * 1024)
    report = ingest_deploy_files(inbox, lake_root)
    assert DeployInboxConfig().max_file_bytes == 10 * 1024 * 1024
    assert [p.name for p in report.processed] == ["small.jsonl"]
    error = rejected_error(inbox, "huge.jsonl")
    assert "huge.jsonl: file is 11534336 bytes, more than max_file_bytes = 10485760; not read" in error
    # The limit is a config field: a file one byte over it is refused, one at it is taken.
    at_limit = DeployInboxConfig(max_file_bytes=len(GOOD_LINE))
    inbox2 = inbox_with(tmp_path / "two", {"at.jsonl": GOOD_LINE, "over.jsonl": GOOD_LINE + " "})
    report = ingest_deploy_files(inbox2, lake_root, at_limit)
    assert [p.name for p in report.processed] == ["at.jsonl"]
    assert f"more than max_file_bytes = {len(GOOD_LINE)}" in rejected_error(inbox2, "over.jsonl")


def test_a_file_with_too_many_events_is_rejected_whole(lake_root: Path, tmp_path: Path) -> None:
    limit = DeployInboxConfig().max_events_per_file
    assert limit == 10_000
    lines = "".join(
        f'{{"version": "v{i}", "at": "2026-11-29T12:00:00Z", "fleet": true}}\n' for i in range(limit + 1)
    )
    many_names = json.dumps(
        {"version": "v1", "at": "2026-11-29T12:00:00Z", "instances": [f"i{i}" for i in range(limit + 1)]}
    )
    inbox = inbox_with(
        tmp_path, {"flood.jsonl": lines, "names.json": many_names, "ok.jsonl": lines[: lines.rindex("{")]}
    )
    report = ingest_deploy_files(inbox, lake_root)
    assert f"flood.jsonl: line {limit + 1}: more than {limit} deploy events" in rejected_error(
        inbox, "flood.jsonl"
    )
    assert f"names.json: line 1: more than {limit} deploy events" in rejected_error(inbox, "names.json")
    assert [p.name for p in report.processed] == ["ok.jsonl"]
    assert load_deploy_events(lake_root).height == limit  # exactly at the limit: taken


@pytest.mark.parametrize(
    ("stamp", "message"),
    [
        ("0001-01-01T00:00:00+14:00", "out of range (not representable in UTC)"),  # OverflowError
        ("9999-12-31T23:59:59-14:00", "out of range (not representable in UTC)"),  # OverflowError
        ("0001-01-01T00:00:00Z", "deploy time 0001-01-01T00:00:00+00:00 is out of range"),
        ("9999-12-31T23:59:59Z", "deploy time 9999-12-31T23:59:59+00:00 is out of range"),
        ("1999-12-31T23:59:59Z", "is out of range (not before 2000-01-01"),
        ("2026-12-02T12:00:01Z", "after now + 86400 s, max_future_s"),  # a day and a second ahead
        ("2026-11-29T12:00:00+25:00", "is not ISO 8601"),  # absurd offset
        ("2026-11-29T12:00:00+99", "is not ISO 8601"),
    ],
)
def test_out_of_range_times_reject_the_file_naming_its_line(
    lake_root: Path, tmp_path: Path, stamp: str, message: str
) -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    bad = f'{{"version": "v2", "at": "{stamp}", "fleet": true}}\n'
    inbox = inbox_with(tmp_path, {"a-bad.jsonl": GOOD_LINE + bad, "b-bad.csv": f"version,at\nv3,{stamp}\n"})
    report = ingest_deploy_files(inbox, lake_root, now=now)
    assert not report.processed and len(report.rejected) == 2
    assert "a-bad.jsonl: line 2: " in rejected_error(inbox, "a-bad.jsonl")
    assert message in rejected_error(inbox, "a-bad.jsonl")
    assert "b-bad.csv: line 2: " in rejected_error(inbox, "b-bad.csv")
    assert message in rejected_error(inbox, "b-bad.csv")
    with pytest.raises(DeployError, match="deploy mark --at"):
        mark_deploy(lake_root, version="v1", fleet=True, at=stamp, now=now)
    assert load_deploy_events(lake_root).height == 0
    # the edge itself is accepted: a deploy exactly a day ahead of now
    mark_deploy(lake_root, version="v1", fleet=True, at="2026-12-02T12:00:00Z", now=now)


def test_unknown_instance_rejects_the_file_unless_allowed(lake_root: Path, tmp_path: Path) -> None:
    files = {
        "one.csv": "version,at,instance\nv1,2026-11-29T12:00:00Z,alpha\nv1,2026-11-29T12:00:00Z,alpah\n",
        "list.json": '{"version": "v2", "at": "2026-11-29T12:00:00Z", "instances": ["beta", "gamma"]}',
        "known.jsonl": GOOD_LINE,
    }
    inbox = inbox_with(tmp_path, files)
    report = ingest_deploy_files(inbox, lake_root, known_instances=FLEET_NAMES)
    assert [p.name for p in report.processed] == ["known.jsonl"]
    error = rejected_error(inbox, "one.csv")
    assert "one.csv: line 3: unknown instance 'alpah' (known: alpha, beta); did you mean 'alpha'?" in error
    assert "--allow-unknown-instance" in error
    assert "list.json: line 1: unknown instance 'gamma'" in rejected_error(inbox, "list.json")
    # The same files, with the override: recorded.
    inbox2 = inbox_with(tmp_path / "again", files)
    allowed = DeployInboxConfig(allow_unknown_instance=True)
    report = ingest_deploy_files(inbox2, lake_root, allowed, known_instances=FLEET_NAMES)
    assert len(report.processed) == 3 and not report.rejected
    assert {"alpah", "gamma"} <= set(load_deploy_events(lake_root)["instance"].drop_nulls())
    # No fleet known: names are not checked.
    inbox3 = inbox_with(tmp_path / "nofleet", {"one.csv": files["one.csv"]})
    assert len(ingest_deploy_files(inbox3, lake_root).processed) == 1


def test_mark_refuses_unknown_instance_with_suggestions(lake_root: Path) -> None:
    with pytest.raises(
        DeployError, match=r"unknown instance 'alpa' \(known: alpha, beta\); did you mean 'alpha'"
    ):
        mark_deploy(lake_root, version="v1", instances=["alpa"], at=AT, known_instances=FLEET_NAMES)
    with pytest.raises(DeployError, match=r"instance name 'aaaa.* is 300 characters"):
        mark_deploy(lake_root, version="v1", instances=["a" * 300], at=AT)
    allowed = DeployInboxConfig(allow_unknown_instance=True)
    events = mark_deploy(
        lake_root, version="v1", instances=["alpa"], at=AT, known_instances=FLEET_NAMES, config=allowed
    )
    assert [e.instance for e in events] == ["alpa"]


def test_bad_files_sorted_first_never_block_the_good_ones(lake_root: Path, tmp_path: Path) -> None:
    deep = "[" * 200_000 + "]" * 200_000
    bad = {
        "0-overflow.jsonl": '{"version": "v1", "at": "0001-01-01T00:00:00+14:00", "fleet": true}\n',
        "1-nested.json": deep,
        "2-nested.jsonl": '{"version": ' + "[" * 100_000 + "\n",
        "3-binary.csv": b"version,at\n\x00\x01\x02\xff\xfe",
        "4-latin1.csv": "version,at,instance\nv1,2026-11-29T12:00:00Z,m\xfcnchen\n".encode("latin-1"),
        "5-bigint.jsonl": '{"version": ' + "9" * 5000 + ', "at": "2026-11-29T12:00:00Z", "fleet": true}\n',
        "6-garbage.json": bytes(range(256)) * 4,
        "6-long.jsonl": '{"version": "' + "v" * 100_000 + '", "at": "2026-11-29T12:00:00Z", "fleet": true}\n',
    }
    good = {"7-good.csv": "version,at\nv7,2026-11-29T12:00:00Z\n", "8-good.jsonl": GOOD_LINE}
    inbox = inbox_with(tmp_path, {**bad, **good})
    report = ingest_deploy_files(inbox, lake_root)
    assert sorted(p.name for p in report.processed) == sorted(good)
    assert sorted(p.name for p in report.rejected) == sorted(bad)
    assert sorted(load_deploy_events(lake_root)["version"].to_list()) == ["v1", "v7"]
    expected = {
        "0-overflow.jsonl": "line 1: timestamp '0001-01-01T00:00:00+14:00' is out of range",
        "1-nested.json": "line 1: invalid JSON: nested too deeply",
        "2-nested.jsonl": "line 1: invalid JSON: nested too deeply",
        "3-binary.csv": "line 2: NUL byte",
        "4-latin1.csv": "line 2: not UTF-8",
        "5-bigint.jsonl": "line 1: invalid JSON: Exceeds the limit",
        "6-garbage.json": "line 1: NUL byte",
        "6-long.jsonl": "line 1: version 'vvvv",
    }
    for name, message in expected.items():
        assert f"{name}: {message}" in rejected_error(inbox, name), name
        assert (inbox / "rejected" / name).read_bytes() == (
            bad[name] if isinstance(bad[name], bytes) else bad[name].encode()
        )
    assert "is 100000 characters, more than max_field_chars = 256" in rejected_error(inbox, "6-long.jsonl")
    # A second pass does not try the rejected files again (and records nothing new).
    again = ingest_deploy_files(inbox, lake_root)
    assert not again.processed and not again.rejected
    assert len(list((inbox / "rejected").iterdir())) == 2 * len(bad)


def test_an_unexpected_error_in_one_file_rejects_that_file_only(
    lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = deploys.parse_csv_events

    def exploding(text: str, name: str, rules: DeployRules | None = None) -> list[DeployEvent]:
        if name == "a.csv":
            raise RuntimeError("a bug the checks did not foresee")
        return real(text, name, rules)

    monkeypatch.setattr(deploys, "parse_csv_events", exploding)
    inbox = inbox_with(tmp_path, {"a.csv": "version,at\nv1,2026-11-29T12:00:00Z\n", "b.jsonl": GOOD_LINE})
    report = ingest_deploy_files(inbox, lake_root)
    assert [p.name for p in report.processed] == ["b.jsonl"]
    assert "a.csv: unexpected RuntimeError while reading it: a bug" in rejected_error(inbox, "a.csv")


def test_a_failed_lake_write_leaves_the_file_in_the_inbox(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "lake"
    not_a_folder.write_text("a file where the lake should be")
    inbox = inbox_with(tmp_path, {"a.jsonl": GOOD_LINE})
    report = ingest_deploy_files(inbox, not_a_folder)
    assert not report.processed and not report.rejected and not report.events
    assert "a.jsonl: not recorded, left in the inbox" in report.failed[inbox / "a.jsonl"]
    assert (inbox / "a.jsonl").exists()


def test_cli_mark_and_ingest_check_names_against_the_fleet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(
        "".join(
            f'[[instances]]\nname = "{n}"\ndsn = "postgresql://x@127.0.0.1:1/postgres"\n' for n in FLEET_NAMES
        )
    )
    lake = tmp_path / "lake"
    common = ["--lake", str(lake), "--fleet-file", str(fleet_file), "--embedded-root", str(tmp_path / "none")]
    mark = [*common, "deploy", "mark", "--version", "v1"]
    assert main([*mark, "--instance", "typo"]) == 2
    out = capsys.readouterr().out
    assert "unknown instance 'typo'" in out and "alpha, beta" in out
    assert main([*mark, "--instance", "alpah"]) == 2
    assert "did you mean 'alpha'" in capsys.readouterr().out
    assert main([*mark, "--instance", "alpha"]) == 0
    assert main([*mark, "--instance", "typo", "--allow-unknown-instance"]) == 0
    inbox = inbox_with(tmp_path, {"x.csv": "version,at,instance\nv2,2026-11-29T12:00:00Z,typo\n"})
    ingest = [*common, "deploy", "ingest", "--inbox", str(inbox)]
    assert main(ingest) == 1
    assert "unknown instance 'typo'" in capsys.readouterr().out
    (inbox / "y.csv").write_text("version,at,instance\nv3,2026-11-29T12:00:00Z,typo\n")
    assert main([*ingest, "--allow-unknown-instance"]) == 0
    assert sorted(load_deploy_events(lake)["version"]) == ["v1", "v1", "v3"]
    # No fleet anywhere (no --fleet-file, no data/fleet.toml under the working folder, no --embedded):
    # a named instance cannot be checked, so it is refused unless --allow-unknown-instance (said so).
    monkeypatch.chdir(tmp_path)
    nofleet = ["--lake", str(lake), "--embedded-root", str(tmp_path)]
    assert main([*nofleet, "deploy", "mark", "--version", "v4", "--instance", "typo"]) == 2
    assert "no fleet to check the name against" in capsys.readouterr().out
    assert (
        main(
            [*nofleet, "deploy", "mark", "--version", "v4", "--instance", "typo", "--allow-unknown-instance"]
        )
        == 0
    )
    assert "instance names are not checked" in capsys.readouterr().out


def test_inbox_limits_are_cli_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inbox, lake = tmp_path / "inbox", tmp_path / "lake"
    inbox.mkdir()
    (inbox / "two.jsonl").write_text(
        '{"version": "v1", "at": "2026-11-02T10:00:00Z", "fleet": true}\n'
        '{"version": "v2", "at": "2026-11-02T11:00:00Z", "fleet": true}\n'
    )
    base = ["--lake", str(lake), "--embedded-root", str(tmp_path), "deploy", "ingest", "--inbox", str(inbox)]
    assert main([*base, "--max-events-per-file", "1"]) == 1
    assert "two.jsonl" in capsys.readouterr().out
    (inbox / "rejected" / "two.jsonl").rename(inbox / "again.jsonl")
    assert main([*base, "--max-file-bytes", "10"]) == 1
    assert "again.jsonl" in capsys.readouterr().out
    (inbox / "rejected" / "again.jsonl").rename(inbox / "last.jsonl")
    assert main(base) == 0


@pytest.mark.timeout(30)  # a FIFO opened for reading without O_NONBLOCK waits for a writer forever
def test_links_and_fifos_in_the_inbox_are_rejected_unread(lake_root: Path, tmp_path: Path) -> None:
    """Whoever drops files in the inbox may have fewer rights than the radar: a link to the radar's own
    secrets would otherwise be read and its first line quoted in the rejection (a .pgpass line was, as an
    unknown CSV column). Links and FIFOs are rejected without being opened; the files beside them are not
    held up."""
    inbox, outside = tmp_path / "deploys", tmp_path / "outside"
    inbox.mkdir()
    outside.mkdir()
    (outside / "pgpass").write_text("db.example.com:5432:app:admin:Sup3rS3cret\n")
    (outside / "good.csv").write_text("version,at,instance\nv1,2026-11-29T12:30:00Z,alpha\n")
    (inbox / "p.csv").symlink_to(outside / "pgpass")
    (inbox / "g.csv").symlink_to(outside / "good.csv")
    os.mkfifo(inbox / "f.json")
    (inbox / "real.csv").write_text("version,at,instance\nv2,2026-11-29T12:30:00Z,alpha\n")
    report = ingest_deploy_files(inbox, lake_root)
    assert [p.name for p in report.processed] == ["real.csv"]
    reasons = {p.name: why for p, why in report.rejected.items()}
    assert sorted(reasons) == ["f.json", "g.csv", "p.csv"]
    assert "symbolic link" in reasons["p.csv"] and "symbolic link" in reasons["g.csv"]
    assert "FIFO" in reasons["f.json"]
    shown = " ".join(reasons.values()) + "".join(
        p.read_text() for p in (inbox / "rejected").glob("*.error.txt")
    )
    assert "3cret" not in shown.lower() and "example.com" not in shown
    assert load_deploy_events(lake_root)["version"].to_list() == ["v2"]
    assert (outside / "pgpass").read_text().endswith("Sup3rS3cret\n"), "the target is left alone"
    assert (inbox / "rejected" / "p.csv").is_symlink(), "the link itself moved aside"


def test_a_rejected_file_is_one_line_whatever_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """File names are anyone's: one with a line break must not print a line of its own (which could pass
    for the radar's own output), nor a terminal escape sequence."""
    inbox, lake = tmp_path / "inbox", tmp_path / "lake"
    inbox.mkdir()
    (inbox / "v1.csv\nrejected nothing: all good\x1b[2K.csv").write_text("x\n")
    args = ["--lake", str(lake), "--embedded-root", str(tmp_path), "deploy", "ingest", "--inbox", str(inbox)]
    assert main(args) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    said = [line for line in lines if "all good" in line]
    assert len(said) == 1 and said[0].startswith("rejected ") and "v1.csv" in said[0], lines
    assert "\x1b" not in said[0] and "\\x1b" in said[0]
