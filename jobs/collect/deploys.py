"""Deploy events: markers that tell the detector when to compare before with after.

Three ways in, one lake table (``deploy_events``): ``radar deploy mark`` calls :func:`mark_deploy`, files
dropped in an inbox (``data/deploys/``, CSV or JSON) are read by :func:`ingest_deploy_files` (which the
Dagster sensor calls), and :func:`load_deploy_events` reads them back, deduplicated. A deploy id is a hash
of (scope, instance, version, time), so marking or ingesting the same deploy twice records it once.
A file is validated whole before anything is written: a malformed file is moved aside with an error
file naming its line, never half-read. Limits (:class:`DeployInboxConfig`) keep one file from flooding the
detector: its size (checked with ``stat`` before reading), its number of events, the range of its
timestamps and, when the fleet is known, its instance names. One bad file never blocks the others: any
error while reading one file rejects that file alone, once, and the loop goes on.

Accepted file formats (timestamps ISO 8601; without an offset they are taken as UTC):

- CSV with a header holding ``version`` and ``at`` (or ``deployed_at``) and optionally ``instance``; an
  empty instance, ``*`` or ``fleet`` means the whole fleet.
- JSON: one object or a list of objects with ``version``, ``at`` (or ``deployed_at``) and either
  ``instance``, ``instances`` (a list) or ``fleet: true``. ``.jsonl`` / ``.ndjson``: one such object a line.
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import io
import json
import os
import re
import shutil
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from jobs.collect.foreign_files import ForeignFileRefused, open_foreign_file
from jobs.lake.io import read_table, write_table
from jobs.schemas.collected import DEPLOY_EVENTS

DEFAULT_INBOX = Path("data/deploys")
FLEET_WORDS = frozenset({"", "*", "fleet"})
_SAFE_INSTANCE = re.compile(r"^[A-Za-z0-9_.\-]+$")
SUFFIXES = {".csv": "csv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl"}


class DeployError(ValueError):
    """A deploy marker or file is invalid; the message names the file and line."""


@dataclass(frozen=True)
class DeployInboxConfig:
    """Limits on what one deploy marker or inbox file may hold.

    ``max_events_per_file``: one file is one release (a fleet deploy is one event, a per-instance
    rollout one event per instance); 10,000 covers a rollout to the largest fleets several times over,
    while every event is a before/after comparison for every series of its instance, so a runaway
    export (1.4 M markers from a 100 MB file) is refused instead of exhausting the detector's memory.
    ``max_future_s``: a day covers clock skew and naive local times taken as UTC (at most 14 h ahead);
    a deploy further ahead is a typo. ``max_field_chars`` bounds a version or instance name.
    ``allow_unknown_instance`` accepts names the fleet does not know.
    """

    max_file_bytes: int = 10 * 1024 * 1024
    """A deploy file bigger than this is refused unread."""
    max_events_per_file: int = 10_000
    """A deploy file with more events is refused (a runaway export, not a release)."""
    earliest_deploy: datetime = datetime(2000, 1, 1, tzinfo=UTC)
    """A deploy dated before this is a typo and refused."""
    max_future_s: float = 86_400.0
    """A deploy more than this many seconds in the future is a typo and refused (a day covers clock skew and
    local times taken as UTC)."""
    max_field_chars: int = 256
    """Longest version or instance name accepted."""
    allow_unknown_instance: bool = False
    """Record deploys to instance names the fleet does not know (default: refuse them)."""


def _cut(text: str, limit: int) -> str:
    """Text cut short so an error message stays one readable line."""
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def _shown(value: object, limit: int = 80) -> str:
    """repr of a value from a file, cut short."""
    return _cut(repr(value), limit)


@dataclass
class DeployRules:
    """The checks every event of one mark or file goes through (time range, instance names, count)."""

    config: DeployInboxConfig = field(default_factory=DeployInboxConfig)
    known_instances: frozenset[str] | None = None
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    events_seen: int = 0

    def check_time(self, when: datetime, where: str) -> datetime:
        latest = self.now + timedelta(seconds=self.config.max_future_s)
        if not self.config.earliest_deploy <= when <= latest:
            raise DeployError(
                f"{where}: deploy time {when.isoformat()} is out of range "
                f"(not before {self.config.earliest_deploy.date()} nor after now + "
                f"{self.config.max_future_s:g} s, max_future_s)"
            )
        return when

    def check_version(self, version: Any, where: str) -> str:
        text = _check_version(version, where)
        self._check_length("version", text, where)
        return text

    def _check_length(self, what: str, text: str, where: str) -> None:
        if len(text) > self.config.max_field_chars:
            raise DeployError(
                f"{where}: {what} {_shown(text, 40)} is {len(text)} characters, "
                f"more than max_field_chars = {self.config.max_field_chars}"
            )

    def check_instance(self, name: str, where: str) -> str:
        self._check_length("instance name", name, where)
        _check_instance(name, where)
        if self.known_instances is None or self.config.allow_unknown_instance:
            return name
        if name not in self.known_instances:
            known = sorted(self.known_instances)
            close = difflib.get_close_matches(name, known, n=3)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            listed = ", ".join(known[:20]) + (f", … {len(known) - 20} more" if len(known) > 20 else "")
            raise DeployError(
                f"{where}: unknown instance {_shown(name)} (known: {listed}){hint} "
                "— use --allow-unknown-instance (allow_unknown_instance) to record it anyway"
            )
        return name

    def count(self, events: int, where: str) -> None:
        self.events_seen += events
        if self.events_seen > self.config.max_events_per_file:
            raise DeployError(
                f"{where}: more than {self.config.max_events_per_file} deploy events in one file "
                "(max_events_per_file); split it or check the export"
            )


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
    """What one pass over the inbox did: files taken in, files rejected (with why), files left in the
    inbox because the lake write failed (with why), and events recorded."""

    processed: list[Path] = field(default_factory=list)
    rejected: dict[Path, str] = field(default_factory=dict)
    failed: dict[Path, str] = field(default_factory=dict)
    events: list[DeployEvent] = field(default_factory=list)


def parse_timestamp(text: str, where: str) -> datetime:
    """ISO 8601 to an aware UTC datetime (naive means UTC); the error names where the text came from."""
    raw = text.strip()
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00") if raw.endswith("Z") else raw)
    except ValueError:
        raise DeployError(f"{where}: timestamp {_shown(text)} is not ISO 8601") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except (OverflowError, ValueError):  # year 1 east of UTC, year 9999 west of it
        raise DeployError(
            f"{where}: timestamp {_shown(text)} is out of range (not representable in UTC)"
        ) from None


def _check_instance(name: str, where: str) -> str:
    if not _SAFE_INSTANCE.match(name):
        raise DeployError(f"{where}: instance name {_shown(name)} is not valid (letters, digits, _ . -)")
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
    return _write_events_frame(lake_root, events_frame(events), stem)


def _write_events_frame(lake_root: Path, frame: pl.DataFrame, stem: str) -> list[Path]:
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
    known_instances: Collection[str] | None = None,
    config: DeployInboxConfig | None = None,
) -> list[DeployEvent]:
    """Record a deploy to the named instances or to the whole fleet (exactly one of the two) at ``at``.

    The same rules as an inbox file: the time in range and, when ``known_instances`` (the fleet's names)
    is given, every instance one of them unless ``config.allow_unknown_instance``.
    """
    if fleet == bool(instances):
        raise DeployError("deploy mark: give either instances or fleet, not both or neither")
    rules = _rules(config, known_instances, now)
    try:
        when = (
            parse_timestamp(at, "deploy mark --at")
            if isinstance(at, str)
            else (at or rules.now).astimezone(UTC)
        )
    except (OverflowError, ValueError) as exc:
        if isinstance(exc, DeployError):
            raise
        raise DeployError(f"deploy mark --at: time {_shown(at)} is out of range") from None
    rules.check_time(when, "deploy mark --at")
    version = rules.check_version(version, "deploy mark")
    targets: list[str | None] = (
        [None] if fleet else [rules.check_instance(i, "deploy mark") for i in instances or []]
    )
    events = [DeployEvent(version=version, deployed_at=when, instance=i, source="cli") for i in targets]
    write_deploy_events(lake_root, events, stem=f"cli-{events[0].deploy_id}")
    return events


def _rules(
    config: DeployInboxConfig | None, known_instances: Collection[str] | None, now: datetime | None
) -> DeployRules:
    return DeployRules(
        config=config or DeployInboxConfig(),
        known_instances=None if known_instances is None else frozenset(known_instances),
        now=(now or datetime.now(UTC)).astimezone(UTC),
    )


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


def _event_from_mapping(raw: Any, where: str, source: str, rules: DeployRules) -> list[DeployEvent]:
    if not isinstance(raw, dict):
        raise DeployError(f"{where}: expected an object with version and at")
    unknown = sorted(set(raw) - {"version", "at", "deployed_at", "instance", "instances", "fleet"})
    if unknown:
        raise DeployError(f"{where}: unknown fields {_shown(unknown)}")
    version = rules.check_version(raw.get("version"), where)
    stamp = raw.get("at", raw.get("deployed_at"))
    if not isinstance(stamp, str):
        raise DeployError(f"{where}: missing 'at' timestamp")
    when = rules.check_time(parse_timestamp(stamp, where), where)
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
            [None]
            if raw["instance"].strip() in FLEET_WORDS
            else [rules.check_instance(raw["instance"], where)]
        )
    else:
        names = raw["instances"]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise DeployError(f"{where}: instances must be a non-empty list of names")
        rules.count(len(names) - 1, where)  # before checking each name of a runaway list
        targets = [rules.check_instance(n, where) for n in names]
    rules.count(1, where)
    return [DeployEvent(version=version, deployed_at=when, instance=t, source=source) for t in targets]


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _decode_json(text: str, name: str, line: int | None, decoder: json.JSONDecoder) -> Any:
    """json decoding with every way it can fail (bad syntax, nesting deeper than the parser's recursion
    limit, integers too long to convert) as a DeployError naming the file and line (``line`` None: the
    line where the syntax error is, in a whole-file document)."""
    try:
        return decoder.decode(text)
    except json.JSONDecodeError as exc:
        raise DeployError(f"{name}: line {line or exc.lineno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise DeployError(f"{name}: line {line or 1}: invalid JSON: nested too deeply") from None
    except ValueError as exc:
        raise DeployError(f"{name}: line {line or 1}: invalid JSON: {_cut(str(exc), 120)}") from None


def parse_json_events(text: str, name: str, rules: DeployRules | None = None) -> list[DeployEvent]:
    """One object or a list of objects; errors name the line where the offending object starts."""
    rules = rules or DeployRules()
    decoder = json.JSONDecoder()
    document = _decode_json(text, name, None, decoder)
    if isinstance(document, dict):
        return _event_from_mapping(
            document, f"{name}: line {_line_of(text, len(text) - len(text.lstrip()))}", name, rules
        )
    if not isinstance(document, list):
        raise DeployError(f"{name}: line 1: expected an object or a list of objects")
    events: list[DeployEvent] = []
    position = text.index("[") + 1
    for _ in document:
        while text[position] in " \t\r\n,":
            position += 1
        item, end = decoder.raw_decode(text, position)
        events += _event_from_mapping(item, f"{name}: line {_line_of(text, position)}", name, rules)
        position = end
    return events


def parse_jsonl_events(text: str, name: str, rules: DeployRules | None = None) -> list[DeployEvent]:
    rules = rules or DeployRules()
    decoder = json.JSONDecoder()
    events: list[DeployEvent] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        raw = _decode_json(line, name, number, decoder)
        events += _event_from_mapping(raw, f"{name}: line {number}", name, rules)
    return events


def parse_csv_events(text: str, name: str, rules: DeployRules | None = None) -> list[DeployEvent]:
    """CSV with a header line; line numbers count physical lines, the header being line 1."""
    rules = rules or DeployRules()
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
            f"{name}: line 1: header needs version and at; missing {missing}, unknown {_shown(unknown)}"
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
        events += _event_from_mapping(raw, where, name, rules)
    if not events:
        raise DeployError(f"{name}: line 2: no deploy rows")
    return events


def read_deploy_text(path: Path, max_file_bytes: int) -> str:
    """The text of one inbox file, opened only when it is a regular file (``open_foreign_file``: a link
    could make the radar quote a secret of its own host in the rejection); its size is checked (fstat of
    the opened file) before reading (an oversized file is not read),
    NUL bytes (a binary file) and invalid UTF-8 are errors naming the line; a UTF-8 BOM is dropped."""
    try:
        handle = open_foreign_file(path)
    except ForeignFileRefused as exc:
        raise DeployError(f"{path.name}: {exc} (an inbox takes files, not links or devices)") from None
    with handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_file_bytes:
            raise DeployError(
                f"{path.name}: file is {size} bytes, more than max_file_bytes = {max_file_bytes}; not read"
            )
        data = handle.read(max_file_bytes + 1)  # the file may grow after the stat
    if len(data) > max_file_bytes:
        raise DeployError(f"{path.name}: file grew past max_file_bytes = {max_file_bytes} while read")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise DeployError(f"{path.name}: line {_line_of_bytes(data, nul)}: NUL byte, not a text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DeployError(f"{path.name}: line {_line_of_bytes(data, exc.start)}: not UTF-8") from None


def _line_of_bytes(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def parse_deploy_file(path: Path, rules: DeployRules | None = None) -> list[DeployEvent]:
    """Every event of one inbox file, or a DeployError naming the file and line; never a partial list."""
    rules = rules or DeployRules()
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise DeployError(f"{path.name}: line 1: unsupported file type (use {', '.join(sorted(SUFFIXES))})")
    text = read_deploy_text(path, rules.config.max_file_bytes)
    parser = {"csv": parse_csv_events, "json": parse_json_events, "jsonl": parse_jsonl_events}[kind]
    return parser(text, path.name, rules)


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


def pending_deploy_files(inbox: Path) -> list[Path]:
    """The files waiting in the inbox (not in processed/ or rejected/, not hidden), by name: every entry but
    the folders, so a link, a FIFO or a device dropped there is rejected, said, instead of lying unseen."""
    inbox = Path(inbox)
    if not inbox.is_dir():
        return []
    return sorted(
        p for p in inbox.iterdir() if not p.name.startswith(".") and (p.is_symlink() or not p.is_dir())
    )


def inbox_state_key(inbox: Path) -> str | None:
    """A key that changes when a file is added to or changed in the inbox; None when it is empty. Files
    that vanish while listed (an ingest moving them) are skipped, not an error."""
    parts = []
    for path in pending_deploy_files(inbox):
        try:
            parts.append(f"{path.name}:{path.lstat().st_mtime_ns}")
        except FileNotFoundError:
            continue
    return hashlib.sha1("|".join(parts).encode()).hexdigest() if parts else None


def _reject(path: Path, inbox: Path, why: str, report: IngestReport) -> None:
    """Move a bad file to rejected/ with ``<name>.error.txt`` beside it, so it is tried once."""
    try:
        target = _move_aside(path, inbox / "rejected")
        target.with_name(target.name + ".error.txt").write_text(f"{why}\n")
    except OSError as exc:
        report.rejected[path] = f"{why} (could not move it to rejected/: {exc})"
        return
    report.rejected[target] = why


def ingest_deploy_files(
    inbox: Path,
    lake_root: Path,
    config: DeployInboxConfig | None = None,
    known_instances: Collection[str] | None = None,
    now: datetime | None = None,
) -> IngestReport:
    """Record every deploy file in ``inbox``: good files go to ``processed/``, bad ones to ``rejected/``.

    A rejected file gets a ``<name>.error.txt`` beside it naming the line. Any error while reading one
    file (a DeployError, or anything unexpected) rejects that file and the loop goes on with the next.
    A lake write that fails (an OSError: disk full, permissions) leaves the file in the inbox for the next
    run, listed in ``report.failed``. Events are written before the file is moved, and ids are stable,
    so a crash in between only re-records the same deploys. ``known_instances`` (the fleet's names, when
    known) is the list every instance name must be in, unless ``config.allow_unknown_instance``.
    """
    report = IngestReport()
    inbox = Path(inbox)
    config = config or DeployInboxConfig()
    started = (now or datetime.now(UTC)).astimezone(UTC)
    for path in pending_deploy_files(inbox):
        try:
            events = parse_deploy_file(path, _rules(config, known_instances, started))
            frame = events_frame(events)
        except FileNotFoundError:
            continue  # taken away (by another ingest) between listing and reading
        except DeployError as exc:
            _reject(path, inbox, str(exc), report)
            continue
        except Exception as exc:  # one file's surprise must not stop the others
            why = f"{path.name}: unexpected {type(exc).__name__} while reading it: {_cut(str(exc), 300)}"
            _reject(path, inbox, why, report)
            continue
        digest = hashlib.sha1("|".join(sorted(e.deploy_id for e in events)).encode()).hexdigest()[:16]
        try:
            _write_events_frame(lake_root, frame, stem=f"file-{digest}")
        except OSError as exc:
            report.failed[path] = f"{path.name}: not recorded, left in the inbox for the next run: {exc}"
            continue
        report.events += events
        try:
            report.processed.append(_move_aside(path, inbox / "processed"))
        except OSError as exc:  # recorded; the next run records the same deploy ids again, once
            report.failed[path] = f"{path.name}: recorded but not moved to processed/: {exc}"
    return report


def deploys_for_instances(deploys: pl.DataFrame, instances: list[str]) -> pl.DataFrame:
    """One row per (deploy, instance) it applies to: fleet deploys expand to every instance given."""
    fleet = deploys.filter(pl.col("scope") == "fleet").drop("instance")
    per_instance = deploys.filter(pl.col("scope") != "fleet")
    names = pl.DataFrame({"instance": sorted(set(instances))}, schema={"instance": pl.String})
    expanded = fleet.join(names, how="cross").select(per_instance.columns)
    return pl.concat([per_instance, expanded]).sort("deployed_at", "instance", "deploy_id")
