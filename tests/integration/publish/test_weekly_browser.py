"""The HTML weekly report in a real headless browser (Debian's chromium; make test-browser): it opens from
a file with no network, its plot images are inlined and drawn, and the page is not blank.

The screenshot is kept in .bench/screenshots/weekly_report.png (git-ignored) for a person to look at.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image

from jobs.pipeline.detection import run_detection
from jobs.publish.weekly import write_weekly_report
from tests.support.lakes import WEEK_START, write_week_lake

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[3]
STATUS = REPO / "build" / "browser" / "status"
SCREENSHOT = REPO / ".bench" / "screenshots" / "weekly_report.png"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
# matplotlib's tab:blue (interval means) and tab:orange (after-level): colours the page's CSS never uses
PLOT_COLOURS = {"tab:blue": (31, 119, 180), "tab:orange": (255, 127, 14)}


def chromium() -> str:
    """The chromium executable, or skip with the installer's reason (tests/tiers/browser/install.sh)."""
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if found:
        return found
    status = STATUS.read_text().strip() if STATUS.exists() else ""
    if status.startswith("SKIP: "):
        pytest.skip(f"browser tier: {status.removeprefix('SKIP: ')}")
    pytest.skip("browser tier: chromium is not installed (run make test-browser, which installs it)")


def run_chromium(*args: str) -> subprocess.CompletedProcess[str]:
    profile = Path(tempfile.mkdtemp(prefix="prr-chromium-"))  # a new, empty profile each run
    try:
        return subprocess.run(
            [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_the_report_opens_offline_in_chromium_with_its_plot_drawn(tmp_path: Path) -> None:
    chromium()
    root = tmp_path / "lake"
    root.mkdir()
    write_week_lake(root)
    run_detection(root, now=WEEK_START + timedelta(hours=5, minutes=5))
    page = write_weekly_report(root, "2026-W45", tmp_path / "reports").html
    url = page.resolve().as_uri()

    dom = run_chromium("--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    images = re.findall(r'<img class="plot" src="(data:image/png;base64,[^"]+)"', dom.stdout)
    assert len(images) == 1, "the plot is in the DOM, inlined"
    assert "10× slower, since Mon 02 Nov 09:00 UTC, at deploy v4" in dom.stdout
    assert not re.search(r'(src|href)="https?://', dom.stdout), "nothing to fetch: opens offline"

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    shot = run_chromium(f"--screenshot={SCREENSHOT}", "--window-size=1280,2400", url)
    assert shot.returncode == 0 and SCREENSHOT.exists(), shot.stderr[-2000:]
    assert SCREENSHOT.stat().st_size > 50_000, "a blank page compresses to a few KB"
    pixels = image.imread(SCREENSHOT)[:, :, :3]
    assert pixels.shape[:2] == (2400, 1280)
    colours = np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 500, f"only {len(colours)} colours: the page did not render"
    drawn = {
        name: int(np.all(np.abs(pixels - np.array(rgb) / 255) < 0.06, axis=2).sum())
        for name, rgb in PLOT_COLOURS.items()
    }
    assert drawn["tab:blue"] > 1000 and drawn["tab:orange"] > 100, f"the inlined plot was not drawn: {drawn}"
