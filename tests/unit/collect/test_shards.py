"""The shard of an instance: a stable hash of its name (jobs.collect.shards), and its config key."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest
from scipy import stats

from jobs.collect.fleet import FleetConfig, InstanceConfig
from jobs.collect.shards import fleet_shard, names_in_shards, shard_index, shard_key, shard_keys, shard_of
from jobs.config.loader import load_settings
from jobs.errors import ConfigError


def test_shard_of_is_stable_across_releases_and_processes() -> None:
    """Fixed values: the first 8 bytes of SHA-256 of the UTF-8 name, big endian, mod shard_count. A change
    here moves every deployment's instances between shards."""
    assert [shard_of(n, 4) for n in ("alpha", "beta", "orders-primary", "db-0001")] == [2, 1, 3, 3]
    assert [shard_of(n, 1000) for n in ("alpha", "beta", "orders-primary", "é-ü")] == [974, 265, 715, 611]
    # Another process (another PYTHONHASHSEED) agrees: Python's salted hash() would not.
    code = "from jobs.collect.shards import shard_of; print(shard_of('alpha', 1000), shard_of('beta', 16))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "7"}
    )
    assert out.stdout.split() == ["974", "9"]


def test_shards_are_balanced_over_10000_names() -> None:
    """Sequential names (the usual fleet naming) spread as a uniform draw would: a chi-square test does not
    reject uniformity, and no shard is more than 15 % off its share (16 shards of 625: binomial sd 24)."""
    names = [f"db-{i:05d}.prod" for i in range(10_000)]
    for count in (4, 7, 16):
        sizes = Counter(shard_of(name, count) for name in names)
        counts = [sizes[shard] for shard in range(count)]
        assert stats.chisquare(counts).pvalue > 0.01, counts
        expected = len(names) / count
        assert max(abs(size - expected) for size in counts) < 0.15 * expected, counts


def test_one_shard_holds_the_whole_fleet() -> None:
    assert {shard_of(f"db-{i}", 1) for i in range(500)} == {0}
    assert shard_keys(1) == ["shard-0"]


def test_shard_keys_and_filters() -> None:
    assert shard_keys(3) == ["shard-0", "shard-1", "shard-2"]
    assert [shard_index(key) for key in shard_keys(3)] == [0, 1, 2]
    assert shard_key(12) == "shard-12"
    with pytest.raises(ValueError, match="not a shard partition key: '2026-01-01'"):
        shard_index("2026-01-01")
    names = ["alpha", "beta", "orders-primary", "db-0001"]
    assert names_in_shards(names, [3], 4) == ["orders-primary", "db-0001"]
    assert names_in_shards(names, [1, 2], 4) == ["alpha", "beta"]
    assert names_in_shards(names, [0], 4) == []
    fleet = FleetConfig(instances=tuple(InstanceConfig(name=n, dsn="postgresql://x@h/db") for n in names))
    assert [i.name for i in fleet_shard(fleet, 3, 4).instances] == ["orders-primary", "db-0001"]
    assert fleet_shard(fleet, 0, 4).instances == ()
    with pytest.raises(ConfigError, match="shard_count must be a positive integer"):
        shard_of("alpha", 0)


def test_shard_count_is_a_checked_config_key(tmp_path) -> None:
    assert load_settings(None, env={}).settings.schedules.shard_count == 1
    path = tmp_path / "radar.toml"
    path.write_text("[schedules]\nshard_count = 4\n")
    assert load_settings(path, env={}).settings.schedules.shard_count == 4
    path.write_text("[schedules]\nshard_count = 0\n")
    with pytest.raises(ConfigError, match="shard_count must be an integer between 1 and 1024, not 0"):
        load_settings(path, env={})


def test_config_check_lists_each_shards_instances(
    tmp_path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs.cli.main import main

    monkeypatch.delenv("RADAR_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(
        "".join(
            f'[[instances]]\nname = "{n}"\ndsn = "postgresql://x@h/db"\n'
            for n in ("alpha", "beta", "db-0001")
        )
    )
    config = tmp_path / "radar.toml"
    config.write_text("[schedules]\nshard_count = 4\n")
    assert main(["--config", str(config), "--fleet-file", str(fleet), "config", "check"]) == 0
    out = capsys.readouterr().out
    assert "shard-0: (none)\nshard-1: beta\nshard-2: alpha\nshard-3: db-0001\n" in out


def test_samples_per_instance_write_what_one_run_writes(tmp_path) -> None:
    """A shard's samples run takes the samples lock per instance: same files' rows, same report sums."""
    from datetime import date

    import polars as pl

    from jobs.detect.config import SampleConfig
    from jobs.detect.samples_job import run_samples_job, run_samples_per_instance
    from jobs.lake import io as lake
    from tests.support.compaction_lakes import write_snapshots

    one, per = tmp_path / "one", tmp_path / "per"
    for root in (one, per):
        for instance in ("alpha", "beta", "db-0001"):
            write_snapshots(root, date(2026, 11, 30), 4, instance=instance)
    together = run_samples_job(one, instances=["alpha", "db-0001"])
    apart = run_samples_per_instance(per, SampleConfig(), ["alpha", "db-0001"])
    assert (apart.instances, apart.snapshot_rows, apart.sample_rows, apart.files_written) == (
        together.instances,
        together.snapshot_rows,
        together.sample_rows,
        together.files_written,
    )
    assert apart.sample_rows > 0
    assert apart.dropped_counts.equals(together.dropped_counts)

    def samples(root) -> pl.DataFrame:
        return lake.scan_table(root, "query_samples").collect().sort("instance", "queryid", "interval_end")

    assert samples(per).equals(samples(one))
    assert set(samples(per)["instance"]) == {"alpha", "db-0001"}  # beta is not in these shards
