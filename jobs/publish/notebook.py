"""What the notebooks share: where the lake is, what it holds, and tables shaped for people.

Jupyter starts a kernel in the notebook's own folder (or wherever the server was started), so a lake path
relative to the working directory points nowhere. The lake is found by one fixed rule instead
(``resolve_lake``), and a missing lake is a message that says where it looked and how to fix it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

import jobs
from jobs.lake import io as lake
from jobs.plans.diff import plan_diff_rows
from jobs.plans.shape import PlanFormatError, node_label, plan_root
from jobs.schemas.registry import TABLES

LAKE_ENV = "RADAR_LAKE"
# Under the repository root, in this order: the lake `make demo` writes, then the CLI's default lake.
REPO_LAKES: tuple[tuple[str, Path], ...] = (
    ("the demo lake (`make demo`)", Path("data/demo/lake")),
    ("the default lake", Path("data/lake")),
)
FIX = (
    "Fix: run `make demo` in the repository (it writes data/demo/lake), or set the environment variable "
    f"{LAKE_ENV} to your lake's folder, or set `lake = '/path/to/lake'` in the notebook's parameters cell."
)


class NotebookError(Exception):
    """A user error in a notebook: IPython shows its message alone, without a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class LakeNotFound(NotebookError):
    """No lake folder where the lookup rule looked; the message names each place and the fix."""


@dataclass(frozen=True)
class LakeCandidate:
    """One place the lookup looks: where the path came from and the absolute path."""

    source: str
    path: Path


def repo_root(start: Path | None = None) -> Path | None:
    """The folder holding pyproject.toml at or above ``start`` (default: the installed ``jobs`` package),
    i.e. the checkout; None for an install without one."""
    here = (start or Path(jobs.__file__).parent).resolve()
    return next((f for f in [here, *here.parents] if (f / "pyproject.toml").is_file()), None)


def lake_candidates(
    parameter: str | os.PathLike[str] | None, environ: Mapping[str, str], root: Path | None
) -> list[LakeCandidate]:
    """Where to look, in order: the parameter alone when given, else RADAR_LAKE alone when set, else the
    repository's lakes. A relative path is taken from the repository root (the working directory when
    there is none), never from the notebook's folder."""

    def absolute(path: Path) -> Path:
        path = path.expanduser()
        return path if path.is_absolute() else ((root or Path.cwd()) / path)

    if parameter is not None and str(parameter).strip():
        return [LakeCandidate("the notebook's `lake` parameter", absolute(Path(parameter)))]
    if environ.get(LAKE_ENV, "").strip():
        return [LakeCandidate(f"the environment variable {LAKE_ENV}", absolute(Path(environ[LAKE_ENV])))]
    if root is None:
        return []
    return [LakeCandidate(f"the repository's {label}", root / path) for label, path in REPO_LAKES]


def resolve_lake(
    parameter: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    root: Path | None = None,
) -> Path:
    """The lake folder: the ``lake`` parameter, else env RADAR_LAKE, else the repository's demo lake, else
    its default lake. An explicit choice that does not exist is an error, not a silent fallback."""
    environ = os.environ if environ is None else environ
    root = repo_root() if root is None else root
    candidates = lake_candidates(parameter, environ, root)
    for candidate in candidates:
        if candidate.path.is_dir():
            return candidate.path.resolve()
    looked = "\n".join(f"  - {c.path} ({c.source}): no such folder" for c in candidates)
    if not candidates:
        looked = (
            f"  - no repository root (no pyproject.toml above {Path(jobs.__file__).parent}), {LAKE_ENV} unset"
        )
    raise LakeNotFound(f"no lake found. Looked at:\n{looked}\n{FIX}")


def lake_inventory(lake_root: Path) -> pl.DataFrame:
    """What the lake holds: (table, files, rows, partitions) per table that has files, in catalogue order."""
    rows = []
    for name in TABLES:
        files = lake.usable_files(lake_root, name)  # a bad or foreign file is not the table's
        if not files:
            continue
        count = lake.scan_table(lake_root, name).select(pl.len()).collect().item()
        partitions = len({f.parent for f in files})
        rows.append({"table": name, "files": len(files), "rows": count, "partitions": partitions})
    schema = {"table": pl.String, "files": pl.Int64, "rows": pl.Int64, "partitions": pl.Int64}
    return pl.DataFrame(rows, schema=schema)


# Integer columns that identify rather than count (shown as they are, not as 857,571,506,658,020,832).
IDENTIFIERS = frozenset({"queryid", "dbid", "userid", "planid", "system_identifier", "server_version_num"})


def configure_display() -> None:
    """Tables as people read them: thousands separators, long query texts shown, more rows."""
    pl.Config.set_thousands_separator(",")
    pl.Config.set_fmt_str_lengths(120)
    pl.Config.set_tbl_rows(40)
    pl.Config.set_tbl_hide_column_data_types(True)
    pl.Config.set_tbl_hide_dataframe_shape(True)


def for_people(frame: pl.DataFrame, significant: int = 3) -> pl.DataFrame:
    """Floats to ``significant`` figures, p-values as ``1.8e-22`` text, timestamps to the second: the
    numbers a person compares, without float noise."""
    out = []
    for name, dtype in frame.schema.items():
        column = pl.col(name)
        if dtype.is_float() and (name == "p_value" or name.endswith("p_value") or name == "p_adjusted"):
            out.append(column.map_elements(_p_text, return_dtype=pl.String).alias(name))
        elif dtype.is_float():
            out.append(column.round_sig_figs(significant))
        elif dtype.is_integer() and (name in IDENTIFIERS or name.endswith("_id")):
            out.append(column.cast(pl.String))  # an identifier: no thousands separators
        elif isinstance(dtype, pl.Datetime):
            out.append(column.dt.truncate("1s"))
        else:
            out.append(column)
    return frame.select(out)


def finding_card(finding: Mapping[str, Any]) -> pl.DataFrame:
    """One finding as (field, value) text rows: times to the second in UTC, numbers to three figures,
    empty fields left out; the long texts (query, plan diff, evidence) are shown on their own."""
    rows = []
    for field, value in finding.items():
        if value is None or value == "" or field in ("query", "plan_diff_summary", "work_evidence"):
            continue
        if isinstance(value, datetime):
            text = str(_when(value))
        elif isinstance(value, float) and "p_value" in field:
            text = _p_text(value)
        elif isinstance(value, float):
            text = f"{float(f'{value:.3g}'):,}".removesuffix(".0")
        else:
            text = str(value)
        rows.append((field, text))
    return pl.DataFrame(rows, schema={"field": pl.String, "value": pl.String}, orient="row")


def _p_text(value: float) -> str:
    if value == 0:
        return "< 1e-300"  # below what a float holds
    return f"{value:.1e}" if value < 0.001 else f"{value:.3f}"


def pick_finding(
    findings: pl.DataFrame,
    finding_id: str | None = None,
    instance: str | None = None,
    query: str | None = None,
) -> dict[str, Any] | None:
    """The finding to investigate: the one named by the parameters, else the strongest (open first, then
    the largest added load, then the largest after/before ratio). None when the lake has none; a
    parameter that matches nothing is an error naming what there is."""
    chosen = findings
    asked = []
    if finding_id:
        chosen, asked = (
            chosen.filter(pl.col("finding_id") == finding_id),
            [*asked, f"finding_id={finding_id!r}"],
        )
    if instance:
        chosen, asked = chosen.filter(pl.col("instance") == instance), [*asked, f"instance={instance!r}"]
    if query:
        matches = pl.col("query").str.contains(query, literal=True)
        chosen, asked = chosen.filter(matches), [*asked, f"query containing {query!r}"]
    if findings.is_empty():
        return None
    if chosen.is_empty():
        there = ", ".join(
            f"{r['finding_id']} ({r['instance']}: {str(r['query'])[:50]})"
            for r in findings.head(10).iter_rows(named=True)
        )
        raise NotebookError(f"no finding with {' and '.join(asked)}; the lake has: {there}")
    strongest = chosen.sort(
        [
            pl.col("status") != "open",
            pl.col("added_load_ms_per_s"),
            pl.col("after_mean_ms") / pl.col("before_mean_ms"),
        ],
        descending=[False, True, True],
        nulls_last=True,
    )
    return strongest.row(0, named=True)


def queryid_list(finding: Mapping[str, Any]) -> list[int]:
    """Every queryid of a finding's series (``queryids`` is comma-separated; ``queryid`` when it is not)."""
    text = str(finding.get("queryids") or finding.get("queryid") or "")
    return [int(q) for q in text.split(",") if q.strip()]


def before_after(series: pl.DataFrame, change_at: datetime) -> pl.DataFrame:
    """Intervals, calls and the call-weighted mean, p50 and p95 of the interval means on each side of the
    change: the step in numbers (``series`` from jobs.publish.plots.regression_series)."""
    change_at = change_at.astimezone(UTC)  # DuckDB hands out Etc/UTC, the lake's polars frames UTC
    side = pl.when(pl.col("interval_end") <= change_at).then(pl.lit("before")).otherwise(pl.lit("after"))
    return (
        series.with_columns(side.alias("side"))
        .group_by("side")
        .agg(
            pl.len().alias("intervals"),
            pl.col("calls").sum().alias("calls"),
            ((pl.col("value") * pl.col("calls")).sum() / pl.col("calls").sum()).alias("mean_ms"),
            pl.col("value").median().alias("p50_interval_ms"),
            pl.col("value").quantile(0.95, interpolation="linear").alias("p95_interval_ms"),
        )
        .sort(pl.col("side") == "after")
    )


def moved_together(
    samples: pl.DataFrame, texts: pl.DataFrame, change_at: datetime, window: timedelta
) -> pl.DataFrame:
    """Every statement of one instance, mean latency before vs after ``change_at`` (``window`` each side),
    largest added load (ms of execution per second of wall time) first: did only this query move, or
    everything on the instance (CPU, I/O, locks)?"""
    change_at = change_at.astimezone(UTC)
    near = samples.filter(
        (pl.col("interval_end") > change_at - window) & (pl.col("interval_end") <= change_at + window)
    ).with_columns((pl.col("interval_end") > change_at).alias("after"))
    seconds = (
        near.select("after", "interval_end", "interval_seconds")
        .unique(["after", "interval_end"])
        .group_by("after")
        .agg(pl.col("interval_seconds").sum().alias("span_s"))
    )
    sides = (
        near.group_by("queryid", "after")
        .agg(pl.col("calls").sum(), pl.col("total_exec_time").sum())
        .join(seconds, on="after")
        .with_columns(
            (pl.col("total_exec_time") / pl.col("calls")).alias("mean_ms"),
            (pl.col("calls") / pl.col("span_s")).alias("calls_per_s"),
        )
    )
    before = sides.filter(~pl.col("after")).select("queryid", pl.col("mean_ms").alias("before_mean_ms"))
    after = sides.filter(pl.col("after")).select(
        "queryid", pl.col("mean_ms").alias("after_mean_ms"), "calls_per_s"
    )
    query = texts.sort("captured_at").unique("queryid", keep="first").select("queryid", "query")
    return (
        before.join(after, on="queryid", how="inner")
        .with_columns(
            (pl.col("after_mean_ms") / pl.col("before_mean_ms")).alias("ratio"),
            ((pl.col("after_mean_ms") - pl.col("before_mean_ms")) * pl.col("calls_per_s")).alias(
                "added_load_ms_per_s"
            ),
        )
        .join(query, on="queryid", how="left")
        .select(
            "queryid",
            "query",
            "before_mean_ms",
            "after_mean_ms",
            "ratio",
            "calls_per_s",
            "added_load_ms_per_s",
        )
        .sort("added_load_ms_per_s", descending=True, nulls_last=True)
    )


def plan_outline(plan_json: str | None) -> str:
    """An EXPLAIN JSON plan as an indented tree: node, index, relation, estimated cost and rows (actual
    rows and time when the plan is from auto_explain)."""
    if not plan_json:
        return "(no plan stored)"
    try:
        root = plan_root(plan_json)
    except PlanFormatError as exc:
        return f"(plan not readable: {exc})"
    lines: list[str] = []

    def walk(node: dict[str, Any], depth: int) -> None:
        facts = [f"cost {node.get('Total Cost', '?')}", f"rows {node.get('Plan Rows', '?')}"]
        if "Actual Rows" in node:
            facts.append(f"actual rows {node['Actual Rows']}")
        if "Actual Total Time" in node:
            facts.append(f"{node['Actual Total Time']} ms")
        lines.append(f"{'  ' * depth}{'-> ' if depth else ''}{node_label(node)}  ({'; '.join(facts)})")
        for child in node.get("Plans") or []:
            if isinstance(child, dict):
                walk(child, depth + 1)

    walk(root, 0)
    return "\n".join(lines)


def plan_diff_table(plan_diff: str | None) -> pl.DataFrame:
    """The stored plan diff (jobs.plans.diff JSON) as (what, before, after) rows of the parts that changed:
    the weekly report's rows (jobs.plans.diff.plan_diff_rows), as a dataframe."""
    schema = {"what": pl.String, "before": pl.String, "after": pl.String}
    return pl.DataFrame(plan_diff_rows(plan_diff), schema=schema, orient="row")


def _when(value: object) -> str | None:
    """An ISO timestamp (or datetime) as ``2026-12-02 03:54:34 UTC``."""
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
