# %% [markdown]
# # Investigate a regression
#
# A notebook in the percent format (open it in Jupyter with jupytext, or VS Code; or run it as a script:
# `.venv/bin/python notebooks/investigate_regression.py --lake data/demo/lake --out /tmp/regression.png`).
# It picks the strongest detected regression in the lake (or the one you name), plots its latency series
# with the deploy and the change point, and prints the plan diff and what else moved at the same time.

# %%
import argparse
import sys
from pathlib import Path

import polars as pl

from jobs import duckdb_views, lake
from jobs.report import plot_regression, regression_series

parser = argparse.ArgumentParser()
parser.add_argument("--lake", default="data/demo/lake")
parser.add_argument("--instance", default=None)
parser.add_argument("--out", default="regression.png")
args, _ = parser.parse_known_args(sys.argv[1:] if __name__ == "__main__" else [])
lake_root = Path(args.lake)

# %% [markdown]
# ## The detected regressions, strongest first (DuckDB over the lake views)

# %%
conn = duckdb_views.connect(lake_root)
detected = conn.sql(
    """
    select finding_id, status, analysis, instance, queryid, series, query, deploy_version, deployed_at,
           detected_change_at, before_mean_ms, after_mean_ms, p_value, plan_diff_summary
    from findings
    where status != 'superseded'
    order by status = 'open' desc, after_mean_ms / nullif(before_mean_ms, 0) desc nulls last
    """
).pl()
if args.instance:
    detected = detected.filter(pl.col("instance") == args.instance)
print(
    detected.select("status", "analysis", "instance", "query", "before_mean_ms", "after_mean_ms", "p_value")
)
if detected.is_empty():
    raise SystemExit(f"no detected regression in {lake_root}")

# %% [markdown]
# ## Its latency series, as the detector saw it

# %%
regression = detected.row(0, named=True)
print(f"investigating {regression['analysis']} regression on {regression['instance']}: {regression['query']}")
samples = lake.scan_table(lake_root, "query_samples").collect()
texts = lake.scan_table(lake_root, "query_texts").collect()
series = regression_series(samples, texts, regression["instance"], regression["series"])
figure = plot_regression(series, regression)
figure.savefig(args.out, dpi=110)
print(f"{series.height} intervals plotted to {args.out}")

# %% [markdown]
# ## Why: the plan diff, and the plans on record

# %%
print(regression["plan_diff_summary"] or "no plan diff (plan capture off?)")
print(
    conn.sql(
        "select captured_at, source, root_node, total_cost, shape_hash from plan_snapshots "
        "where instance = ? and queryid = ? order by captured_at",
        params=[regression["instance"], regression["queryid"]],
    ).pl()
)

# %% [markdown]
# ## What else changed at the same time on this instance (a shared cause: CPU, I/O, locks)?

# %%
print(
    detected.filter(
        (pl.col("instance") == regression["instance"]) & (pl.col("analysis") == regression["analysis"])
    ).select("query", "detected_change_at", "before_mean_ms", "after_mean_ms")
)
