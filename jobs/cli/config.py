"""`radar config`: the effective settings and where each came from."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from jobs.cli.common import NO_FLEET_HINT, console, find_fleet, loaded_settings, say


def cmd_config(args: argparse.Namespace) -> int:
    from jobs.publish.output import plain_rows, write_rows

    loaded = loaded_settings(args)
    if args.action == "show":
        # value: as the config file writes it (numbers, booleans, "30m" durations, lists); secrets masked.
        columns = ["key", "value", "source"]
        write_rows(
            columns,
            plain_rows(loaded.rows(), columns),
            args.format,
            stdout=sys.stdout,
            stderr=sys.stderr,
            title="effective configuration",
            console=console,
        )
        return 0
    fleet = find_fleet(args)  # a given --fleet-file must be valid too
    # What a run would read from the environment is checked now, not at the first snapshot or alert.
    loaded.settings.alerts.check_urls()
    for instance in fleet.instances if fleet is not None else ():
        instance.resolve_dsn()  # ConfigError naming the instance and its unset variable
    where = loaded.path if loaded.path is not None else "no config file: defaults"
    say(args, f"configuration valid ({where}, {len(loaded.rows())} settings)", markup=False)
    if fleet is None:
        say(args, f"no fleet: {NO_FLEET_HINT}", markup=False)
    else:
        say(
            args,
            f"fleet valid: {len(fleet.instances)} instances ({', '.join(fleet.instance_names)})",
            markup=False,
        )
        count = loaded.settings.schedules.shard_count
        if count > 1:  # which Dagster run (shard partition) collects each instance
            from jobs.collect.shards import fleet_shard, shard_key

            for shard in range(count):
                names = ", ".join(i.name for i in fleet_shard(fleet, shard, count).instances) or "(none)"
                say(args, f"{shard_key(shard)}: {names}", markup=False)
    return 0
