"""The Dagster definitions, as a snapshot: every asset key with its group, partitions, upstream assets,
checks and kinds, plus the jobs, schedules and sensors. A move or rename that changes what Dagster shows
(an asset key, a dependency, a check) fails here and names what changed.

Regenerate after an intended change:
``RADAR_UPDATE_SNAPSHOT=1 pytest tests/integration/orchestration/test_asset_specs.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).resolve().parents[2] / "fixtures" / "dagster_assets.json"


def _partitions(node: Any) -> Any:
    definition = node.partitions_def
    if definition is None:
        return None
    dimensions = getattr(definition, "partitions_defs", None)
    if dimensions:  # multi-partitioned: each dimension's name and type
        return {d.name: type(d.partitions_def).__name__ for d in dimensions}
    return type(definition).__name__


def definitions_snapshot() -> dict[str, Any]:
    from orchestration.definitions import defs

    graph = defs.resolve_asset_graph()
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "partitions": _partitions(node),
            "deps": sorted(parent.to_user_string() for parent in node.parent_keys),
            "checks": sorted(check.name for check in node.check_keys),
            "kinds": sorted(node.kinds),
        }
    return {
        "assets": assets,
        "jobs": sorted(job.name for job in defs.jobs or ()),
        "schedules": sorted(schedule.name for schedule in defs.schedules or ()),
        "sensors": sorted(sensor.name for sensor in defs.sensors or ()),
    }


def test_asset_keys_and_specs_match_the_snapshot() -> None:
    current = definitions_snapshot()
    if os.environ.get("RADAR_UPDATE_SNAPSHOT") == "1":
        SNAPSHOT.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    expected = json.loads(SNAPSHOT.read_text())
    assert current["assets"].keys() == expected["assets"].keys(), "asset keys changed"
    for key, spec in expected["assets"].items():
        assert current["assets"][key] == spec, key
    assert {k: current[k] for k in ("jobs", "schedules", "sensors")} == {
        k: expected[k] for k in ("jobs", "schedules", "sensors")
    }
