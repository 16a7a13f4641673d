"""Asset jobs the schedule and the sensor start."""

import dagster as dg

snapshot_job = dg.define_asset_job("snapshot_job", selection=dg.AssetSelection.assets("statement_snapshots"))
deploy_job = dg.define_asset_job("deploy_job", selection=dg.AssetSelection.assets("deploy_events"))
