"""The moments at which the contention step looks for an instance-wide slowdown (``moments_of``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from jobs.detect.config import ContentionConfig
from jobs.detect.contention import moments_of

DEPLOYED = datetime(2026, 12, 6, 10, 57, 22, 101607, tzinfo=UTC)


def _findings(*rows: dict) -> pl.DataFrame:
    base = {
        "analysis": None,
        "instance": "alpha",
        "deploy_id": None,
        "deploy_version": None,
        "deployed_at": None,
        "status": "detected",
        "detected_change_at": None,
    }
    return pl.DataFrame(
        [{**base, **row} for row in rows],
        schema={
            "analysis": pl.String,
            "instance": pl.String,
            "deploy_id": pl.String,
            "deploy_version": pl.String,
            "deployed_at": pl.Datetime("us", "UTC"),
            "status": pl.String,
            "detected_change_at": pl.Datetime("us", "UTC"),
        },
    )


def _deploy(instance: str = "alpha") -> dict:
    return {
        "analysis": "deploy",
        "instance": instance,
        "deploy_id": "d1",
        "deploy_version": "v2.0",
        "deployed_at": DEPLOYED,
        "status": "no_regression",
    }


def _unannounced(at: datetime, instance: str = "alpha") -> dict:
    return {"analysis": "unannounced", "instance": instance, "detected_change_at": at}


def test_an_unannounced_step_at_a_deploy_is_the_deploys_moment_not_a_second_one() -> None:
    """The demo reported one slowdown twice, at deploy v2.0 and "unannounced" 45 ms later."""
    findings = _findings(_deploy(), _unannounced(DEPLOYED + timedelta(milliseconds=45)))
    moments, tagged = moments_of(findings, ContentionConfig())
    assert moments.height == 1 and moments.row(0, named=True)["analysis"] == "deploy"
    assert tagged["moment"].to_list() == [moments["moment"][0]] * 2


def test_an_unannounced_step_away_from_the_deploy_or_on_another_instance_keeps_its_moment() -> None:
    config = ContentionConfig()
    later = DEPLOYED + config.same_moment_within + timedelta(seconds=1)
    findings = _findings(
        _deploy(), _unannounced(later), _unannounced(DEPLOYED + timedelta(milliseconds=45), instance="beta")
    )
    moments, tagged = moments_of(findings, config)
    assert sorted(moments["analysis"].to_list()) == ["deploy", "unannounced", "unannounced"]
    assert tagged["moment"].n_unique() == 3
