"""The mkdocs hook (mkdocs.yml ``hooks:``): adds the reference pages, generated from the code at every
build (docsgen.reference.PAGES), and the top-level CHANGELOG.md as ``changelog.md``. No plugin needed."""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    # mkdocs loads this file by path (and restores sys.path after): the code documented is this checkout's,
    # whatever the virtualenv's editable install points at.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))

    from docsgen.reference import PAGES

    with warnings.catch_warnings():  # Dagster's beta notices on import are not the docs' warnings
        warnings.simplefilter("ignore")
        pages = {path: render() for path, render in PAGES.items()}
    for path, content in pages.items():
        files.append(File.generated(config, path, content=content))
    changelog = (ROOT / "CHANGELOG.md").read_text().replace("](docs/", "](")  # its links, from docs/
    files.append(File.generated(config, "changelog.md", content=changelog))
    return files


LIST_ITEM = re.compile(r"^( *)([-*+]|\d+\.) \S")


def on_page_markdown(markdown: str, **_: Any) -> str:
    return github_lists(markdown)


def github_lists(markdown: str) -> str:
    """Lists as GitHub renders them, for Python-Markdown: a list may follow its paragraph without a blank
    line, and a nested item is indented by 2 spaces (Python-Markdown wants a blank line and 4). Code blocks
    are left alone."""
    out: list[str] = []
    fenced = False
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        match = None if fenced else LIST_ITEM.match(line)
        if match:
            indent = len(match.group(1))
            previous = out[-1] if out else ""
            if (
                indent == 0
                and previous.strip()
                and not previous.startswith((" ", "|", "#"))
                and not (LIST_ITEM.match(previous))
            ):
                out.append("")
            if 0 < indent < 4:
                line = " " * (indent * 2) + line[indent:]
        out.append(line)
    return "\n".join(out)
