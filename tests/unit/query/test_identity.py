"""Series identity (jobs.query.identity) on tiny inline frames: a series is (instance, database, query);
queryids of one fingerprint are merged when they succeed each other, never side by side."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import numpy as np
import polars as pl
import pytest

from jobs.detect.config import RegressionConfig
from jobs.detect.deploy_analysis import detect_regressions, one_row_per_finding
from jobs.detect.unannounced import detect_unannounced_regressions
from jobs.plans.diff import plan_diffs_for_regressions
from jobs.plans.shape import plan_facts
from jobs.query.config import IdentityConfig
from jobs.query.identity import identify_samples
from jobs.query.series import SERIES_KEY
from jobs.schemas.collected import PLAN_SNAPSHOTS
from tests.support.lakes import SERIES_DEPLOY_AT, series_samples
from tests.support.series import deploy, noise

CONFIG = RegressionConfig(window_before=timedelta(minutes=5), window_after=timedelta(minutes=10))
Q2024 = "select count(*) from orders_2024 where customer_id = $1"
Q2025 = "select count(*) from orders_2025 where customer_id = $1"
Q2025_INT8 = "select count(*) from orders_2025 where customer_id = $1::int8"


def samples(
    values: np.ndarray,
    queryid: int,
    *,
    dbid: int = 5,
    userid: int = 10,
    calls: int = 1000,
    first: int = -30,
) -> pl.DataFrame:
    return series_samples(values, queryid=queryid, calls=calls, first=first).with_columns(
        pl.lit(dbid, dtype=pl.Int64).alias("dbid"), pl.lit(userid, dtype=pl.Int64).alias("userid")
    )


def texts(rows: list[tuple[int, str]], datnames: dict[int, str] | None = None) -> pl.DataFrame:
    """query_texts rows of instance alpha: (queryid, query); ``datnames`` adds the collected datname."""
    frame = pl.DataFrame(
        {"instance": "alpha", "queryid": [q for q, _ in rows], "query": [t for _, t in rows]},
        schema={"instance": pl.String, "queryid": pl.Int64, "query": pl.String},
    )
    if datnames is None:
        return frame
    names = pl.DataFrame(
        {"instance": "alpha", "dbid": list(datnames), "datname": list(datnames.values())},
        schema={"instance": pl.String, "dbid": pl.Int64, "datname": pl.String},
    )
    return pl.concat([frame.join(names.select("dbid").head(1), how="cross"), names], how="diagonal")


def series_by_queryid(points: pl.DataFrame, by: str = "queryid") -> dict:
    rows = points.select(by, "series").unique().sort(by).rows()
    return {key: series for key, series in rows}


def test_the_same_query_in_two_databases_is_two_series_and_the_quiet_one_regression_is_found() -> None:
    # PG18 jumbles relation names: the same statement has the same queryid in every database.
    busy = samples(noise(90, 1.0, 1), 11, dbid=5, calls=1000)
    quiet = samples(np.concatenate([noise(30, 1.0, 2), noise(60, 100.0, 3)]), 11, dbid=6, calls=5)
    both = pl.concat([busy, quiet])
    points = identify_samples(both, texts([(11, Q2024)]))
    fingerprint = points["fingerprint"][0]
    assert series_by_queryid(points, "dbid") == {5: f"5:{fingerprint}", 6: f"6:{fingerprint}"}

    out = detect_regressions(both, texts([(11, Q2024)]), deploy(), CONFIG).sort("dbid")
    assert out.height == 2
    assert out["status"].to_list() == ["no_regression", "detected"], "the quiet database's own step"
    found = out.row(1, named=True)
    assert (found["series"], found["dbid"], found["queryid"]) == (f"6:{fingerprint}", 6, 11)
    assert found["before_mean_ms"] == pytest.approx(1.0, rel=0.1)
    assert found["after_mean_ms"] == pytest.approx(100.0, rel=0.1), "not diluted by the busy copy"


def test_side_by_side_trailing_digit_tables_are_two_series_each_under_its_own_text() -> None:
    t = texts([(21, Q2024), (22, Q2025)])
    old = samples(noise(90, 1.0, 4), 21)
    new = samples(np.concatenate([noise(30, 1.0, 5), noise(60, 10.0, 6)]), 22)
    points = identify_samples(pl.concat([old, new]), t)
    fingerprint = points["fingerprint"][0]
    assert points["fingerprint"].n_unique() == 1, "libpg_query folds the trailing digits"
    # Both started in the same interval: the lower queryid's chain keeps the plain name.
    assert series_by_queryid(points) == {21: f"5:{fingerprint}", 22: f"5:{fingerprint}:22"}

    for out in (
        detect_regressions(pl.concat([old, new]), t, deploy(), CONFIG),
        detect_unannounced_regressions(pl.concat([old, new]), t, CONFIG),
    ):
        detected = out.filter(pl.col("status") == "detected")
        assert detected.height == 1
        row = detected.row(0, named=True)
        assert (row["queryid"], row["queryids"], row["query"]) == (22, "22", Q2025)
        assert row["after_mean_ms"] == pytest.approx(10.0, rel=0.1), "not halved by orders_2024"
        assert out.filter(pl.col("queryid") == 21)["status"].to_list() == ["no_regression"]


def test_successive_queryids_of_one_fingerprint_are_one_series_under_the_newest() -> None:
    # At the deploy the app binds the parameter as int8 (explicit cast): a new queryid, the same fingerprint.
    t = texts([(31, Q2025), (32, Q2025_INT8)])
    before = samples(noise(30, 1.0, 7), 31, first=-30)
    after = samples(noise(60, 10.0, 8), 32, first=0)
    points = identify_samples(pl.concat([before, after]), t)
    assert points["series"].n_unique() == 1 and points["series"][0] == f"5:{points['fingerprint'][0]}"

    row = detect_regressions(pl.concat([before, after]), t, deploy(), CONFIG).row(0, named=True)
    assert row["status"] == "detected"
    assert (row["queryid"], row["queryids"], row["query"]) == (32, "31,32", Q2025_INT8)


def test_a_deploy_retyping_two_side_by_side_queries_keeps_each_table_in_its_own_series() -> None:
    """Both chains stop as two new queryids start: each new queryid joins the chain whose text is most
    like its own, whichever queryid is lower."""
    t = texts([(61, Q2024), (62, Q2025), (71, Q2025_INT8), (72, Q2024.replace("$1", "$1::int8"))])
    frame = pl.concat(
        [
            samples(noise(30, 1.0, 21), 61, first=-30),
            samples(noise(30, 1.0, 22), 62, first=-30),
            samples(noise(60, 1.0, 23), 71, first=0),  # orders_2025's new queryid, the lower one
            samples(noise(60, 1.0, 24), 72, first=0),
        ]
    )
    chains = series_by_queryid(identify_samples(frame, t))
    assert chains[61] == chains[72] != chains[62] == chains[71]


@pytest.mark.parametrize(("shared", "series"), [(2, 1), (3, 2)])
def test_overlap_beyond_the_config_number_of_intervals_is_side_by_side(shared: int, series: int) -> None:
    """Spans sharing up to ``rotation_overlap_intervals`` (2) of the instance's intervals are a succession
    (old and new app servers both served the deploy's intervals); more is side by side."""
    t = texts([(31, Q2024), (32, Q2025)])
    old = samples(noise(30 + shared, 1.0, 9), 31, first=-30)
    new = samples(noise(60, 1.0, 10), 32, first=0)
    points = identify_samples(pl.concat([old, new]), t)
    assert points["series"].n_unique() == series
    wider = identify_samples(pl.concat([old, new]), t, IdentityConfig(rotation_overlap_intervals=3))
    assert wider["series"].n_unique() == 1, "the number of intervals is the config field's"


def test_identical_texts_under_several_queryids_side_by_side_are_one_statement() -> None:
    # psycopg binds a Python int as int2 / int4 by value: one statement, two queryids, interleaved calls.
    t = texts([(41, Q2025), (42, Q2025)])
    small = samples(noise(90, 1.0, 11), 41)
    large = samples(noise(90, 1.0, 12), 42)
    points = identify_samples(pl.concat([small, large]), t)
    assert points["series"].n_unique() == 1


def test_users_of_one_database_are_merged_unless_the_config_splits_them() -> None:
    app = samples(noise(90, 1.0, 13), 51, userid=10)
    report = samples(noise(90, 1.0, 14), 51, userid=11)
    t = texts([(51, Q2024)])
    merged = identify_samples(pl.concat([app, report]), t)
    fingerprint = merged["fingerprint"][0]
    assert merged["series"].unique().to_list() == [f"5:{fingerprint}"]
    split = identify_samples(pl.concat([app, report]), t, IdentityConfig(split_users=True))
    assert series_by_queryid(split, "userid") == {10: f"5/10:{fingerprint}", 11: f"5/11:{fingerprint}"}

    config = replace(CONFIG, identity=IdentityConfig(split_users=True))
    assert detect_regressions(pl.concat([app, report]), t, deploy(), config).height == 2
    assert detect_regressions(pl.concat([app, report]), t, deploy(), CONFIG).height == 1


def test_database_name_comes_from_the_collected_datname() -> None:
    t = texts([(11, Q2024)], datnames={5: "shop", 6: "tenant_quiet"})
    both = pl.concat([samples(noise(90, 1.0, 1), 11, dbid=5), samples(noise(90, 1.0, 2), 11, dbid=6)])
    out = detect_regressions(both, t, deploy(), CONFIG).sort("dbid")
    assert out["database"].to_list() == ["shop", "tenant_quiet"]
    unnamed = detect_regressions(both, texts([(11, Q2024)]), deploy(), CONFIG)
    assert unnamed["database"].null_count() == 2, "not collected: null, never a guess"


def test_identity_and_detection_do_not_depend_on_row_order() -> None:
    t = texts([(21, Q2024), (22, Q2025), (23, Q2025_INT8), (31, Q2024)])
    frame = pl.concat(
        [
            samples(noise(90, 1.0, 15), 21),
            samples(np.concatenate([noise(30, 1.0, 16), noise(60, 10.0, 17)]), 22, first=-30),
            samples(noise(20, 10.0, 18), 23, first=60),  # succeeds 22
            samples(noise(90, 1.0, 19), 31, dbid=6, userid=11),
            samples(noise(90, 1.0, 20), 31, dbid=6, userid=12),
        ]
    )
    for config in (IdentityConfig(), IdentityConfig(split_users=True)):
        expected = identify_samples(frame, t, config).sort(pl.all())
        for seed in range(3):
            shuffled = frame.sample(fraction=1.0, shuffle=True, seed=seed)
            assert identify_samples(shuffled, t.reverse(), config).sort(pl.all()).equals(expected)
    expected = detect_regressions(frame, t, deploy(), CONFIG)
    shuffled = frame.sample(fraction=1.0, shuffle=True, seed=7)
    assert detect_regressions(shuffled, t.reverse(), deploy(), CONFIG).equals(expected)
    chains = series_by_queryid(identify_samples(frame, t).filter(pl.col("dbid") == 5))
    assert chains[22] == chains[23] != chains[21]


def test_one_row_per_finding_keeps_both_databases_findings_at_one_moment() -> None:
    rows = pl.DataFrame(
        {
            "analysis": ["deploy", "deploy", "unannounced"],
            "instance": "alpha",
            "series": ["5:fp", "6:fp", "6:fp"],
            "fingerprint": "fp",
            "detected_change_at": SERIES_DEPLOY_AT,
        }
    )
    kept = one_row_per_finding(rows)
    assert kept.select(*SERIES_KEY).rows() == [("alpha", "5:fp"), ("alpha", "6:fp")]


def test_a_finding_diffs_the_plans_of_its_own_database_only() -> None:
    index = {"Node Type": "Index Scan", "Relation Name": "orders", "Index Name": "orders_idx"}
    seq = {"Node Type": "Seq Scan", "Relation Name": "orders"}
    t = SERIES_DEPLOY_AT
    rows = [
        (5, t - timedelta(minutes=5), index),  # the finding's database: index scan before...
        (5, t + timedelta(minutes=1), seq),  # ...seq scan after
        (6, t + timedelta(minutes=2), index),  # the same queryid in another database, latest
    ]
    snaps = pl.DataFrame(
        [
            {
                "instance": "alpha",
                "queryid": 11,
                "dbid": dbid,
                "captured_at": at,
                "source": "generic_explain",
                "is_generic": True,
                "shape_hash": plan_facts(plan).shape_hash,
                "plan_json": json.dumps(plan),
            }
            for dbid, at, plan in rows
        ],
        schema={"instance": pl.String(), **dict(PLAN_SNAPSHOTS.polars_schema)},
    )
    finding = pl.DataFrame(
        {
            "instance": ["alpha"],
            "queryid": [11],
            "queryids": ["11"],
            "fingerprint": ["fp"],
            "series": ["5:fp"],
            "dbid": [5],
            "status": ["detected"],
            "detected_change_at": [t],
        }
    )
    diff = plan_diffs_for_regressions(finding, snaps).row(0, named=True)
    assert diff["series"] == "5:fp" and diff["diff_status"] == "changed"
    assert "latest" not in diff["plan_diff_summary"], "database 6's index scan is not this finding's plan"


def test_the_whole_pipeline_names_one_user_regression_under_its_own_series_when_users_are_split() -> None:
    from jobs.pipeline.detection import DetectionConfig, detect_from_frames
    from tests.support.detection_frames import as_frames

    app = samples(noise(90, 1.0, 25), 51, userid=10)
    report = samples(np.concatenate([noise(30, 1.0, 26), noise(60, 10.0, 27)]), 51, userid=11)
    config = DetectionConfig(regression=replace(CONFIG, identity=IdentityConfig(split_users=True)))
    frames = as_frames(
        detect_from_frames(
            pl.concat([app, report]), texts([(51, Q2024)]), deploy(), PLAN_SNAPSHOTS.empty(), config
        )
    )
    detected = frames.regressions.filter(pl.col("status") == "detected")
    assert detected["series"].to_list() == [f"5/11:{detected['fingerprint'][0]}"]
    assert detected["kind"].to_list() == ["plan_or_work"]
    assert frames.regressions.height == 2, "one row per user"


def test_a_negative_overlap_is_refused_with_the_field_named() -> None:
    with pytest.raises(ValueError, match=r"identity\.rotation_overlap_intervals"):
        IdentityConfig(rotation_overlap_intervals=-1)


def test_the_series_number_orders_series_as_their_names() -> None:
    """fingerprinted_samples numbers series per entry; the numbers are the dense ranks of (instance,
    series) over the samples, so sorting on them sorts as the strings do."""
    from jobs.query.series import SERIES_ID, fingerprinted_samples

    frames = [
        samples(noise(40, 2.0, 1), 11, dbid=3).with_columns(pl.lit("beta").alias("instance")),
        samples(noise(40, 2.0, 2), 12, dbid=5),
        samples(noise(40, 2.0, 3), 13, dbid=5),
        samples(noise(40, 2.0, 4), 11, dbid=5),
    ]
    prints = texts([(11, "select 1"), (12, "select a from t"), (13, "select b from u")])
    prints = pl.concat([prints, prints.with_columns(pl.lit("beta").alias("instance"))])
    points = fingerprinted_samples(pl.concat(frames), prints)
    expected = points.select(pl.struct("instance", "series").rank("dense").cast(pl.UInt32))
    assert points[SERIES_ID].to_list() == expected.to_series().to_list()
    assert points[SERIES_ID].n_unique() == 4
