"""Deploy events: markers that tell the detector when to compare before with after.

Three ways in, one lake table (``deploy_events``): ``radar deploy mark`` calls :func:`mark_deploy`, files
dropped in an inbox (``data/deploys/``, CSV or JSON) are read by :func:`ingest_deploy_files` (which the
Dagster sensor calls), and :func:`load_deploy_events` reads them back, deduplicated. A deploy id is a hash
of (scope, instance, version, time), so marking or ingesting the same deploy twice records it once.
A file is validated whole before anything is written: a malformed file is moved aside with an error
file naming its line, never half-read.

Accepted file formats (timestamps ISO 8601; without an offset they are taken as UTC):

- CSV with a header holding ``version`` and ``at`` (or ``deployed_at``) and optionally ``instance``; an
  empty instance, ``*`` or ``fleet`` means the whole fleet.
- JSON: one object or a list of objects with ``version``, ``at`` (or ``deployed_at``) and either
  ``instance``, ``instances`` (a list) or ``fleet: true``. ``.jsonl`` / ``.ndjson``: one such object a line.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from jobs.lake import read_table, write_table
from jobs.schemas import DEPLOY_EVENTS

DEFAULT_INBOX = Path("data/deploys")
FLEET_WORDS = frozenset({"", "*", "fleet"})
_SAFE_INSTANCE = re.compile(r"^[A-Za-z0-9_.\-]+$")
SUFFIXES = {".csv": "csv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl"}


class DeployError(ValueError):
    """A deploy marker or file is invalid; the message names the file and line."""


@dataclass(frozen=True)
class DeployEvent:
    """One deploy: to one instance, or to the whole fleet (instance None)."""

    version: str
    deployed_at: datetime
    instance: str | None = None
    source: str = "cli"

    @property
    def scope(self) -> str:
        return "fleet" if self.instance is None else "instance"

    @property
    def deploy_id(self) -> str:
        key = f"{self.scope}|{self.instance or ''}|{self.version}|{self.deployed_at.isoformat()}"
        return hashlib.sha1(key.encode()).hexdigest()[:16]

    def as_row(self) -> dict[str, Any]:
        return {
            "deploy_id": self.deploy_id,
            "version": self.version,
            "scope": self.scope,
            "instance": self.instance,
            "deployed_at": self.deployed_at,
            "source": self.source,
        }


@dataclass
class IngestReport:
    """What one pass over the inbox did: files taken in, files rejected (with why) and events recorded."""

    processed: list[Path] = field(default_factory=list)
    rejected: dict[Path, str] = field(default_factory=dict)
    events: list[DeployEvent] = field(default_factory=list)


def parse_timestamp(text: str, where: str) -> datetime:
    """ISO 8601 to an aware UTC datetime (naive means UTC); the error names where the text came from."""
    raw = text.strip()
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00") if raw.endswith("Z") else raw)
    except ValueError:
        raise DeployError(f"{where}: timestamp {text!r} is not ISO 8601") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def _check_instance(name: str, where: str) -> str:
    if not _SAFE_INSTANCE.match(name):
        raise DeployError(f"{where}: instance name {name!r} is not valid (letters, digits, _ . -)")
    return name


def _check_version(version: Any, where: str) -> str:
    if not isinstance(version, str | int | float) or not str(version).strip():
        raise DeployError(f"{where}: missing or empty version")
    return str(version).strip()


def events_frame(events: list[DeployEvent]) -> pl.DataFrame:
    """Events in the deploy_events schema (plus the ``date`` partition)."""
    if not events:
        return DEPLOY_EVENTS.empty().with_columns(pl.lit(None, dtype=pl.String).alias("date"))
    frame = DEPLOY_EVENTS.conform(pl.DataFrame([e.as_row() for e in events]))
    return frame.with_columns(pl.col("deployed_at").dt.strftime("%Y-%m-%d").alias("date"))


def write_deploy_events(lake_root: Path, events: list[DeployEvent], stem: str) -> list[Path]:
    """Write events to the lake, one file per deployed_at date, all named ``stem``."""
    frame = events_frame(events)
    paths = []
    for (day,), part in frame.partition_by("date", as_dict=True, maintain_order=True).items():
        paths.append(write_table(lake_root, DEPLOY_EVENTS, part.drop("date"), {"date": str(day)}, stem))
    return paths


def mark_deploy(
    lake_root: Path,
    *,
    version: str,
    instances: list[str] | None = None,
    fleet: bool = False,
    at: datetime | str | None = None,
    now: datetime | None = None,
) -> list[DeployEvent]:
    """Record a deploy to the named instances or to the whole fleet (exactly one of the two) at ``at``."""
    if fleet == bool(instances):
        raise DeployError("deploy mark: give either instances or fleet, not both or neither")
    when = (
        parse_timestamp(at, "deploy mark --at")
        if isinstance(at, str)
        else (at or now or datetime.now(UTC)).astimezone(UTC)
    )
    version = _check_version(version, "deploy mark")
    targets: list[str | None] = (
        [None] if fleet else [_check_instance(i, "deploy mark") for i in instances or []]
    )
    events = [DeployEvent(version=version, deployed_at=when, instance=i, source="cli") for i in targets]
    write_deploy_events(lake_root, events, stem=f"cli-{events[0].deploy_id}")
    return events


def load_deploy_events(lake_root: Path) -> pl.DataFrame:
    """Every recorded deploy once (by deploy_id), oldest first."""
    frame = read_table(lake_root, DEPLOY_EVENTS)
    return (
        frame.sort("deployed_at", "deploy_id", "source")
        .unique("deploy_id", keep="first", maintain_order=True)
        .select(DEPLOY_EVENTS.column_names)
    )


# ---------------------------------------------------------------------------------------------------------
# Inbox files


def _event_from_mapping(raw: Any, where: str, source: str) -> list[DeployEvent]:
    if not isinstance(raw, dict):
        raise DeployError(f"{where}: expected an object with version and at")
    unknown = sorted(set(raw) - {"version", "at", "deployed_at", "instance", "instances", "fleet"})
    if unknown:
        raise DeployError(f"{where}: unknown fields {unknown}")
    version = _check_version(raw.get("version"), where)
    stamp = raw.get("at", raw.get("deployed_at"))
    if not isinstance(stamp, str):
        raise DeployError(f"{where}: missing 'at' timestamp")
    when = parse_timestamp(stamp, where)
    chosen = [k for k in ("instance", "instances", "fleet") if raw.get(k) not in (None, False)]
    if len(chosen) != 1:
        raise DeployError(f"{where}: give exactly one of instance, instances or fleet: true")
    if chosen[0] == "fleet":
        if raw["fleet"] is not True:
            raise DeployError(f"{where}: fleet must be true")
        targets: list[str | None] = [None]
    elif chosen[0] == "instance":
        if not isinstance(raw["instance"], str):
            raise DeployError(f"{where}: instance must be a string")
        targets = (
            [None] if raw["instance"].strip() in FLEET_WORDS else [_check_instance(raw["instance"], where)]
        )
    else:
        names = raw["instances"]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise DeployError(f"{where}: instances must be a non-empty list of names")
        targets = [_check_instance(n, where) for n in names]
    return [DeployEvent(version=version, deployed_at=when, instance=t, source=source) for t in targets]


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def parse_json_events(text: str, name: str) -> list[DeployEvent]:
    """One object or a list of objects; errors name the line where the offending object starts."""
    decoder = json.JSONDecoder()
    try:
        document = decoder.decode(text)
    except json.JSONDecodeError as exc:
        raise DeployError(f"{name}: line {exc.lineno}: invalid JSON: {exc.msg}") from None
    if isinstance(document, dict):
        return _event_from_mapping(
            document, f"{name}: line {_line_of(text, len(text) - len(text.lstrip()))}", name
        )
    if not isinstance(document, list):
        raise DeployError(f"{name}: line 1: expected an object or a list of objects")
    events: list[DeployEvent] = []
    position = text.index("[") + 1
    for _ in document:
        while text[position] in " \t\r\n,":
            position += 1
        item, end = decoder.raw_decode(text, position)
        events += _event_from_mapping(item, f"{name}: line {_line_of(text, position)}", name)
        position = end
    return events


def parse_jsonl_events(text: str, name: str) -> list[DeployEvent]:
    events: list[DeployEvent] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DeployError(f"{name}: line {number}: invalid JSON: {exc.msg}") from None
        events += _event_from_mapping(raw, f"{name}: line {number}", name)
    return events


def parse_csv_events(text: str, name: str) -> list[DeployEvent]:
    """CSV with a header line; line numbers count physical lines, the header being line 1."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [h.strip().lower() for h in next(reader)]
    except StopIteration:
        raise DeployError(f"{name}: line 1: empty file, expected a header with version and at") from None
    except csv.Error as exc:
        raise DeployError(f"{name}: line 1: {exc}") from None
    stamp_column = "at" if "at" in header else "deployed_at"
    missing = [c for c in ("version", stamp_column) if c not in header]
    unknown = sorted(set(header) - {"version", "at", "deployed_at", "instance"})
    if missing or unknown:
        raise DeployError(
            f"{name}: line 1: header needs version and at; missing {missing}, unknown {unknown}"
        )
    events: list[DeployEvent] = []
    while True:
        start_line = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise DeployError(f"{name}: line {start_line}: {exc}") from None
        if not any(cell.strip() for cell in row):
            continue
        where = f"{name}: line {start_line}"
        if len(row) != len(header):
            raise DeployError(f"{where}: expected {len(header)} fields, found {len(row)}")
        values = dict(zip(header, row, strict=True))
        instance = values.get("instance", "").strip()
        raw: dict[str, Any] = {"version": values["version"], "at": values[stamp_column]}
        if instance.lower() in FLEET_WORDS:
            raw["fleet"] = True
        else:
            raw["instance"] = instance
        events += _event_from_mapping(raw, where, name)
    if not events:
        raise DeployError(f"{name}: line 2: no deploy rows")
    return events


def parse_deploy_file(path: Path) -> list[DeployEvent]:
    """Every event of one inbox file, or a DeployError naming the file and line; never a partial list."""
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise DeployError(f"{path.name}: line 1: unsupported file type (use {', '.join(sorted(SUFFIXES))})")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DeployError(f"{path.name}: line {_line_of_bytes(path, exc.start)}: not UTF-8") from None
    parser = {"csv": parse_csv_events, "json": parse_json_events, "jsonl": parse_jsonl_events}[kind]
    return parser(text, path.name)


def _line_of_bytes(path: Path, offset: int) -> int:
    return path.read_bytes().count(b"\n", 0, offset) + 1


def _move_aside(path: Path, folder: Path) -> Path:
    """Move into folder, never overwriting an earlier file of the same name."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / path.name
    counter = 1
    while target.exists():
        target = folder / f"{path.stem}.{counter}{path.suffix}"
        counter += 1
    shutil.move(str(path), target)
    return target


def ingest_deploy_files(inbox: Path, lake_root: Path) -> IngestReport:
    """Record every deploy file in ``inbox``: good files go to ``processed/``, bad ones to ``rejected/``.

    A rejected file gets a ``<name>.error.txt`` beside it naming the line. Events are written before the
    file is moved, and ids are stable, so a crash in between only re-records the same deploys.
    """
    report = IngestReport()
    inbox = Path(inbox)
    if not inbox.exists():
        return report
    for path in sorted(p for p in inbox.iterdir() if p.is_file() and not p.name.startswith(".")):
        try:
            events = parse_deploy_file(path)
        except DeployError as exc:
            target = _move_aside(path, inbox / "rejected")
            target.with_name(target.name + ".error.txt").write_text(f"{exc}\n")
            report.rejected[target] = str(exc)
            continue
        digest = hashlib.sha1("|".join(sorted(e.deploy_id for e in events)).encode()).hexdigest()[:16]
        write_deploy_events(lake_root, events, stem=f"file-{digest}")
        report.processed.append(_move_aside(path, inbox / "processed"))
        report.events += events
    return report


def deploys_for_instances(deploys: pl.DataFrame, instances: list[str]) -> pl.DataFrame:
    """One row per (deploy, instance) it applies to: fleet deploys expand to every instance given."""
    fleet = deploys.filter(pl.col("scope") == "fleet").drop("instance")
    per_instance = deploys.filter(pl.col("scope") != "fleet")
    names = pl.DataFrame({"instance": sorted(set(instances))}, schema={"instance": pl.String})
    expanded = fleet.join(names, how="cross").select(per_instance.columns)
    return pl.concat([per_instance, expanded]).sort("deployed_at", "instance", "deploy_id")
