"""Which deploy a detected change belongs to, when several deploys' windows see the same change."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC as UTC_ZONE
from datetime import datetime, timedelta

import polars as pl

from jobs.collect.deploys import deploys_for_instances
from jobs.detect.config import RegressionConfig
from jobs.detect.verdicts import DETECTED, NO_REGRESSION
from jobs.query.series import SERIES_KEY

# ---------------------------------------------------------------------------------------------------------
# Attribution: which deploy a deploy-analysis change point is blamed on (issue 9)

ATTRIBUTED_ELSEWHERE = "attributed_to_other_deploy"


def _deploy_label(version: str | None, deployed_at: datetime) -> str:
    return f"{version} at {deployed_at.astimezone(UTC_ZONE).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def deploys_by_instance(deploys: pl.DataFrame, instances: list[str]) -> dict[str, list[dict]]:
    """Each instance's deploys (its own and the fleet-wide ones) as records."""
    out: dict[str, list[dict]] = {}
    if deploys.height:
        for deploy in deploys_for_instances(deploys, instances).iter_rows(named=True):
            out.setdefault(deploy["instance"], []).append(deploy)
    return out


@dataclass(frozen=True)
class Blame:
    """The deploy a change is blamed on, the other deploys within the tolerance, and the moment after
    which a deploy cannot have caused it (the change plus the slack)."""

    chosen: dict
    others: list[dict]
    latest_cause: datetime

    def others_text(self) -> dict[str, str | None]:
        """The other candidate causes (at or before the change) and the deploys after it, apart: a
        restore 8 minutes after a dropped key was listed as a candidate of the drop (issue 21)."""
        return {
            "other_deploys": deploys_text([d for d in self.others if d["deployed_at"] <= self.latest_cause]),
            "deploys_after": deploys_text([d for d in self.others if d["deployed_at"] > self.latest_cause]),
        }


def deploys_text(deploys: list[dict]) -> str | None:
    return ", ".join(_deploy_label(d["version"], d["deployed_at"]) for d in deploys) or None


def blame(change: datetime, deploys: list[dict], tolerance: timedelta, slack: timedelta) -> Blame | None:
    """The rule of ``attribute_to_deploys`` for one change: the latest deploy at or before it (with the
    slack) within the tolerance, else the nearest within it; None when no deploy is within it."""
    near = sorted(
        (d for d in deploys if abs(d["deployed_at"] - change) <= tolerance),
        key=lambda d: (d["deployed_at"], d["deploy_id"]),
    )
    if not near:
        return None
    before = [d for d in near if d["deployed_at"] <= change + slack]
    chosen = (
        before[-1] if before else min(near, key=lambda d: (abs(d["deployed_at"] - change), d["deployed_at"]))
    )
    return Blame(chosen, [d for d in near if d["deploy_id"] != chosen["deploy_id"]], change + slack)


def attribute_to_deploys(
    rows: pl.DataFrame,
    deploys: pl.DataFrame,
    intervals: dict[str, timedelta],
    config: RegressionConfig = RegressionConfig(),
) -> pl.DataFrame:
    """Deploy-analysis rows with each detected change point blamed on one deploy and the others listed.

    Each deploy's window is analysed on its own, so one step is often detected at every deploy within the
    tolerance of it (two deploys 5 minutes apart: both). The rule: a change point is attributed to the
    latest deploy at or before it within the tolerance; ``other_deploys`` lists the other candidate causes
    (the instance's other deploys within the tolerance at or before it) and ``deploys_after`` the ones
    after it (a restore, say: mentioned, never a cause). "At or before" has ``attribution_slack_samples``
    (1) sample intervals of slack (the instance's median interval): ``detected_change_at`` is the start of
    the first new-regime interval, so a deploy inside that interval explains it (deployed_at <=
    detected_change_at + slack; at the boundary too, as the change point of a step at an interval
    boundary often lands one sample early). When no deploy lies at or before the change (the change point
    landed early by more than a sample), the nearest deploy within the tolerance is blamed, as the
    per-deploy analysis did.

    A detected row whose own deploy is not the one blamed becomes ``no_regression`` with reason
    ``attributed_to_other_deploy``; when the blamed deploy's own row of that series is not a detection
    (its post window not filled yet, say), the detection moves to the blamed deploy's row (deploy columns
    replaced, the analysed window kept in window_start/window_end). Pure and deterministic.
    """
    nulls = [pl.lit(None, dtype=pl.String).alias(c) for c in ("other_deploys", "deploys_after")]
    if rows.height == 0:
        return rows.with_columns(nulls)
    keys = list(SERIES_KEY)
    tolerance = config.tolerance()
    by_instance = deploys_by_instance(deploys, rows["instance"].unique().to_list())
    table = rows.with_columns(nulls)
    is_detected = pl.col("status") == DETECTED
    # Only detected rows become Python records (a fleet's deploy analysis has millions of rows).
    records = table.filter(is_detected).to_dicts()
    if not records:
        return table
    key_of = {(r["deploy_id"], *(r[k] for k in keys)): i for i, r in enumerate(records)}
    # Per detected row: the deploy blamed and the other deploys within the tolerance. A row without one
    # (its own deploy always is near, stage 1; a deploys frame without it) is left as it is.
    blamed: dict[int, Blame] = {}
    for i, record in enumerate(records):
        slack = intervals.get(record["instance"], timedelta(0)) * config.attribution_slack_samples
        found = blame(record["detected_change_at"], by_instance.get(record["instance"], []), tolerance, slack)
        if found is not None:
            blamed[i] = found

    # Per (blamed deploy, series) without its own detection: the moved detection nearest that deploy.
    moved: dict[tuple, dict] = {}
    for i in sorted(blamed):
        record = records[i]
        chosen = blamed[i].chosen
        if chosen["deploy_id"] == record["deploy_id"]:
            record.update(blamed[i].others_text())
            continue
        key = (chosen["deploy_id"], *(record[k] for k in keys))
        target = key_of.get(key)
        if not (target in blamed and blamed[target].chosen["deploy_id"] == records[target]["deploy_id"]):
            candidate = {
                **record,
                "deploy_id": chosen["deploy_id"],
                "deploy_version": chosen["version"],
                "deployed_at": chosen["deployed_at"],
                **blamed[i].others_text(),
            }
            distance = abs(candidate["detected_change_at"] - chosen["deployed_at"])
            current = moved.get(key)
            if current is None or distance < abs(current["detected_change_at"] - chosen["deployed_at"]):
                moved[key] = candidate
        record["status"] = NO_REGRESSION
        record["reason"] = ATTRIBUTED_ELSEWHERE
        record["other_deploys"] = deploys_text([chosen])  # the deploy it is attributed to
    # A moved detection takes the place of the blamed deploy's own row of that series (detected rows:
    # in ``records``; any other row: dropped from the rest of the table).
    for key, candidate in moved.items():
        if key in key_of:
            records[key_of[key]] = candidate
        else:
            records.append(candidate)
    rest = table.filter(~is_detected)
    if moved:
        replaced = pl.DataFrame(
            [dict(zip(["deploy_id", *keys], key, strict=True)) for key in moved if key not in key_of],
            schema={c: table.schema[c] for c in ["deploy_id", *keys]},
        )
        rest = rest.join(replaced, on=["deploy_id", *keys], how="anti", nulls_equal=True)
    out = pl.concat([rest, pl.DataFrame(records, schema=table.schema)])
    return out.sort("deployed_at", "deploy_id", *keys, maintain_order=True)


def attribute_large_steps(
    rows: pl.DataFrame,
    deploys: pl.DataFrame,
    intervals: dict[str, timedelta],
    config: RegressionConfig = RegressionConfig(),
) -> pl.DataFrame:
    """The findings' rows with each large step (an unannounced detection ``confirmed_by`` large_step,
    jobs.detect.large_steps) blamed on a deploy as ``attribute_to_deploys`` would blame it: the latest
    deploy of its instance at or before its change (with the slack), within the tolerance; the others
    listed. A large step is confirmed with 3 samples, before the deploy analysis has its 5; without this
    an index dropped at a deploy was first reported unannounced, then re-attributed 2 minutes later.
    Only the findings' input: the analysis tables keep the row as the unannounced analysis found it."""
    if rows.height == 0 or deploys.height == 0 or "confirmed_by" not in rows.columns:
        return rows
    fast = (
        (pl.col("analysis") == "unannounced")
        & (pl.col("status") == DETECTED)
        & (pl.col("confirmed_by") == "large_step")
    ).fill_null(False)
    if not rows.select(fast.any()).item():
        return rows
    marked = rows.with_row_index("_row")
    by_instance = deploys_by_instance(deploys, marked.filter(fast)["instance"].unique().to_list())
    chosen_rows: list[dict] = []
    for record in marked.filter(fast).iter_rows(named=True):
        slack = intervals.get(record["instance"], timedelta(0)) * config.attribution_slack_samples
        found = blame(
            record["detected_change_at"], by_instance.get(record["instance"], []), config.tolerance(), slack
        )
        if found is None:
            continue
        chosen_rows.append(
            {
                "_row": record["_row"],
                "deploy_id": found.chosen["deploy_id"],
                "deploy_version": found.chosen["version"],
                "deployed_at": found.chosen["deployed_at"],
                **found.others_text(),
            }
        )
    if not chosen_rows:
        return rows
    schema = {
        "_row": pl.UInt32,
        "deploy_id": pl.String,
        "deploy_version": pl.String,
        "deployed_at": pl.Datetime("us", "UTC"),
        "other_deploys": pl.String,
        "deploys_after": pl.String,
    }
    return reattributed(marked, pl.DataFrame(chosen_rows, schema=schema)).drop("_row")


def reattributed(rows: pl.DataFrame, moves: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (indexed by ``_row``) with each row ``moves`` names turned into the deploy analysis' with
    the deploy columns ``moves`` gives (deploy_id, deploy_version, deployed_at, ...): how the findings'
    input blames a step on a deploy that the deploy analysis has not (yet) detected. Other rows unchanged."""
    if moves.height == 0:
        return rows
    columns = [c for c in moves.columns if c != "_row"]
    joined = rows.join(moves.rename({c: f"_moved_{c}" for c in columns}), on="_row", how="left")
    hit = pl.col("_row").is_in(moves["_row"].implode())
    return joined.with_columns(
        pl.when(hit).then(pl.lit("deploy")).otherwise(pl.col("analysis")).alias("analysis"),
        *(
            pl.when(hit)
            .then(pl.col(f"_moved_{c}"))
            .otherwise(pl.col(c) if c in rows.columns else None)
            .alias(c)
            for c in columns
        ),
    ).drop(f"_moved_{c}" for c in columns)
