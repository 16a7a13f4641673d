"""The Jupyter notebooks: found lake, clear errors, and run top to bottom in a real kernel on real lakes.

The kernel is this venv's ``python3`` (ipykernel), started in an unrelated temporary folder, so a path
relative to the working directory would find nothing: the lake must come from the lookup rule.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nbformat
import polars as pl
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from jobs.publish.notebook import (
    LAKE_ENV,
    LakeNotFound,
    NotebookError,
    before_after,
    for_people,
    moved_together,
    pick_finding,
    repo_root,
    resolve_lake,
)
from tests.conftest import CLUSTER_BASE
from tests.support.lakes import write_step_change_lake

REPO = Path(__file__).resolve().parents[3]
NOTEBOOKS = REPO / "notebooks"


# ---------------------------------------------------------------------------------------------------------
# The lookup rule (pure)


def _fake_repo(tmp_path: Path, *lakes: str) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    for relative in lakes:
        (root / relative).mkdir(parents=True)
    return root


def test_lake_lookup_order_parameter_then_env_then_repo_demo_then_repo_lake(tmp_path: Path) -> None:
    root = _fake_repo(tmp_path, "data/demo/lake", "data/lake")
    chosen, from_env = tmp_path / "chosen", tmp_path / "from-env"
    chosen.mkdir()
    from_env.mkdir()
    env = {LAKE_ENV: str(from_env)}
    assert resolve_lake(chosen, env, root) == chosen.resolve()
    assert resolve_lake(None, env, root) == from_env.resolve()
    assert resolve_lake("", {LAKE_ENV: "  "}, root) == root / "data/demo/lake"
    shutil.rmtree(root / "data/demo")
    assert resolve_lake(None, {}, root) == root / "data/lake"


def test_relative_paths_are_taken_from_the_repository_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _fake_repo(tmp_path, "data/other")
    elsewhere = tmp_path / "notebooks"
    (elsewhere / "data/other").mkdir(parents=True)  # a decoy next to the working directory
    monkeypatch.chdir(elsewhere)
    assert resolve_lake("data/other", {}, root) == root / "data/other"
    assert resolve_lake(None, {LAKE_ENV: "data/other"}, root) == root / "data/other"


def test_the_real_repository_root_comes_from_the_jobs_package() -> None:
    assert repo_root() == REPO.resolve()


def test_a_missing_lake_names_every_place_looked_at_and_the_fix(tmp_path: Path) -> None:
    root = _fake_repo(tmp_path)
    with pytest.raises(LakeNotFound) as missing:
        resolve_lake(None, {}, root)
    message = str(missing.value)
    assert str(root / "data/demo/lake") in message and str(root / "data/lake") in message
    assert "make demo" in message and LAKE_ENV in message
    # An explicit choice that does not exist is an error, never a silent fallback to the demo lake.
    (root / "data/demo/lake").mkdir(parents=True)
    for parameter, env, source in (
        (tmp_path / "typo", {}, "`lake` parameter"),
        (None, {LAKE_ENV: str(tmp_path / "typo")}, LAKE_ENV),
    ):
        with pytest.raises(LakeNotFound, match="make demo") as explicit:
            resolve_lake(parameter, env, root)
        assert str(tmp_path / "typo") in str(explicit.value) and source in str(explicit.value)
    # IPython shows a NotebookError as its message alone, without a traceback.
    assert missing.value._render_traceback_() == [f"LakeNotFound: {message}"]


# ---------------------------------------------------------------------------------------------------------
# What the notebooks compute (pure)

FINDINGS = pl.DataFrame(
    {
        "finding_id": ["a", "b", "c"],
        "status": ["recovered", "open", "open"],
        "instance": ["db1", "db1", "db2"],
        "query": ["select 1", "select * from orders", "update t"],
        "added_load_ms_per_s": [900.0, 5.0, 40.0],
        "before_mean_ms": [1.0, 1.0, 1.0],
        "after_mean_ms": [10.0, 2.0, 3.0],
    }
)


def test_the_strongest_open_finding_is_picked_unless_one_is_named() -> None:
    assert pick_finding(FINDINGS)["finding_id"] == "c"  # type: ignore[index]
    assert pick_finding(FINDINGS, instance="db1")["finding_id"] == "b"  # type: ignore[index]
    assert pick_finding(FINDINGS, finding_id="a")["finding_id"] == "a"  # type: ignore[index]
    assert pick_finding(FINDINGS, query="orders")["finding_id"] == "b"  # type: ignore[index]
    assert pick_finding(FINDINGS.clear()) is None
    with pytest.raises(NotebookError, match=r"no finding with instance='db9'.*a \(db1: select 1\)"):
        pick_finding(FINDINGS, instance="db9")


def test_tables_for_people_keep_identifiers_whole_and_round_the_rest() -> None:
    frame = pl.DataFrame(
        {"queryid": [857571506658020832], "p_value": [1.8007e-22], "mean_ms": [44.96938], "calls": [79554]}
    )
    shown = for_people(frame)
    assert shown.row(0) == ("857571506658020832", "1.8e-22", 45.0, 79554)


def test_before_after_and_what_moved_together_split_at_the_change() -> None:
    change = datetime(2026, 11, 2, 10, 30, tzinfo=UTC)
    ends = [change + timedelta(minutes=m) for m in range(-2, 4)]  # three intervals each side
    series = pl.DataFrame({"interval_end": ends, "value": [1.0, 1.0, 1.0, 9.0, 9.0, 12.0], "calls": [10] * 6})
    steps = before_after(series, change)
    assert steps["side"].to_list() == ["before", "after"]
    assert steps["intervals"].to_list() == [3, 3] and steps["mean_ms"].to_list() == [1.0, 10.0]
    samples = pl.DataFrame(
        {
            "queryid": [1] * 6 + [2] * 6,
            "interval_end": ends * 2,
            "interval_seconds": [60.0] * 12,
            "calls": [60] * 12,
            "total_exec_time": [60.0] * 3 + [600.0] * 3 + [120.0] * 6,
        }
    )
    texts = pl.DataFrame({"captured_at": [change, change], "queryid": [1, 2], "query": ["q1", "q2"]})
    moved = moved_together(samples, texts, change, timedelta(minutes=30))
    assert moved.select("queryid", "ratio", "added_load_ms_per_s").rows() == [(1, 10.0, 9.0), (2, 1.0, 0.0)]


# ---------------------------------------------------------------------------------------------------------
# The notebooks, executed in a real kernel


def run_notebook(
    name: str, cwd: Path, lake_env: str | None, parameters: dict[str, Any] | None = None
) -> nbformat.NotebookNode:
    """Execute notebooks/<name> top to bottom, stopping at the first error as Jupyter's "Run All" does
    (the error stays in the outputs); parameters injected after the cell tagged ``parameters``, as
    papermill does."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    if parameters:
        at = next(i for i, c in enumerate(notebook.cells) if "parameters" in c.metadata.get("tags", []))
        source = "\n".join(f"{k} = {v!r}" for k, v in parameters.items())
        notebook.cells.insert(at + 1, nbformat.v4.new_code_cell(source, id="injected-parameters"))
    env = {k: v for k, v in os.environ.items() if k != LAKE_ENV}
    if lake_env is not None:
        env[LAKE_ENV] = lake_env
    client = NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=300,
        resources={"metadata": {"path": str(cwd)}},
    )
    with contextlib.suppress(CellExecutionError):  # the error is in the failing cell's outputs
        client.execute(env=env)
    return notebook


def outputs(notebook: nbformat.NotebookNode) -> list[dict[str, Any]]:
    return [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def errors(notebook: nbformat.NotebookNode) -> list[str]:
    return [f"{o['ename']}: {o['evalue']}" for o in outputs(notebook) if o["output_type"] == "error"]


def text_of(notebook: nbformat.NotebookNode) -> str:
    parts = []
    for output in outputs(notebook):
        parts.append(output.get("text", ""))
        for kind in ("text/plain", "text/markdown", "text/html"):
            parts.append(output.get("data", {}).get(kind, ""))
    return "\n".join(parts)


def has_output(notebook: nbformat.NotebookNode, mime: str) -> bool:
    return any(mime in o.get("data", {}) for o in outputs(notebook))


def test_notebooks_are_committed_without_outputs() -> None:
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: {cell.id}"
        tagged = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1 and "lake = None" in tagged[0].source, path.name
    assert {p.name for p in NOTEBOOKS.glob("*.ipynb")} >= {
        "investigate_regression.ipynb",
        "fleet_overview.ipynb",
    }


def test_a_notebook_started_elsewhere_says_the_lake_is_missing_and_how_to_fix_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-lake"
    notebook = run_notebook("fleet_overview.ipynb", tmp_path, str(missing))
    found = errors(notebook)
    assert len(found) == 1, found
    assert found[0].startswith("LakeNotFound:") and str(missing) in found[0]
    assert "make demo" in found[0] and LAKE_ENV in found[0]
    # The message alone, no traceback of the notebook's code (IPython's _render_traceback_).
    error = next(o for o in outputs(notebook) if o["output_type"] == "error")
    assert "resolve_lake" not in "\n".join(error["traceback"])


@pytest.mark.slow
def test_notebooks_on_a_lake_without_findings_say_so_and_show_the_lake(tmp_path: Path) -> None:
    lake_root = tmp_path / "lake"
    write_step_change_lake(lake_root)  # samples, texts and a deploy; detection never ran
    for name in ("investigate_regression.ipynb", "fleet_overview.ipynb"):
        notebook = run_notebook(name, tmp_path, str(lake_root))
        assert errors(notebook) == [], name
        assert f"No regression detected in `{lake_root}`" in text_of(notebook), name
        assert "query_samples" in text_of(notebook), name  # what the lake holds instead


@pytest.mark.slow
def test_investigation_notebook_on_a_small_lake(tmp_path: Path) -> None:
    from jobs.pipeline.detection import run_detection

    lake_root = tmp_path / "lake"
    write_step_change_lake(lake_root)
    run_detection(lake_root)
    notebook = run_notebook("investigate_regression.ipynb", tmp_path, None, {"lake": str(lake_root)})
    assert errors(notebook) == []
    assert "select * from orders where customer_id" in text_of(notebook)
    assert has_output(notebook, "image/png") and has_output(notebook, "text/html")


# ---------------------------------------------------------------------------------------------------------
# On the real demo lake (jobs/local/demo.py, what `make demo` runs: two embedded PostgreSQL 18 servers, ~80 s)


@pytest.fixture(scope="module")
def demo_lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from rich.console import Console

    from jobs.local.demo import DemoConfig, run_demo
    from jobs.local.embedded import EmbeddedFleet

    lake_root = tmp_path_factory.mktemp("demo") / "lake"
    fleet_root = CLUSTER_BASE / f"notebooks-demo-{uuid.uuid4().hex[:10]}"  # outside tmp_path (see conftest)
    log = io.StringIO()
    try:
        verdict = run_demo(
            DemoConfig(lake_root=lake_root, fleet_root=fleet_root), Console(file=log, width=160)
        )
    finally:
        if (fleet := EmbeddedFleet.load(fleet_root)) is not None:
            fleet.destroy()
        shutil.rmtree(fleet_root, ignore_errors=True)
    # The notebooks need the demo's lake with alpha's index-drop regression (their tests assert it in the
    # output); the demo's own stricter check (also nothing reported on beta) is not theirs to judge: in
    # one fresh-clone CI run beta's hottest query got an unannounced 0.037 -> 0.047 ms finding and the
    # demo exited 1 while the lake was fine for the notebooks. Its verdict is printed, not asserted.
    print(f"demo verdict {verdict}:", log.getvalue()[-1500:])
    assert (lake_root / "finding_states").is_dir(), log.getvalue()[-3000:]
    yield lake_root


@pytest.mark.slow
def test_investigation_notebook_on_the_demo_lake(demo_lake: Path, tmp_path: Path) -> None:
    notebook = run_notebook("investigate_regression.ipynb", tmp_path, str(demo_lake))
    assert errors(notebook) == []
    text = text_of(notebook)
    assert "demo_orders WHERE customer_id" in text and "alpha" in text  # the demo's regression
    assert "Seq Scan" in text  # its plan diff
    assert has_output(notebook, "image/png")  # the latency plot, inline
    assert has_output(notebook, "text/html")  # tables as dataframes


@pytest.mark.slow
def test_fleet_overview_on_the_demo_lake_with_the_parameter_beating_the_environment(
    demo_lake: Path, tmp_path: Path
) -> None:
    notebook = run_notebook(
        "fleet_overview.ipynb", tmp_path, str(tmp_path / "wrong-lake"), {"lake": str(demo_lake)}
    )
    assert errors(notebook) == []
    text = text_of(notebook)
    assert "alpha" in text and "beta" in text and "v2.0" in text
    assert has_output(notebook, "image/png") and has_output(notebook, "text/html")
