"""Print the file-level import cycles of jobs/ and orchestration/ (exit 1 when there is one).

Every import counts: module level, inside functions, under TYPE_CHECKING. A cycle is a strongly connected
component of more than one module (or a module importing itself), found with Tarjan's algorithm.
Run: python .ci/import_cycles.py [--edges]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("jobs", "orchestration")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that `name` (a module or a name inside one) lies in."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                targets.add(f"{base}.{alias.name}" if alias.name != "*" else base)
            targets.add(base)
    resolved = {resolve(t, known) for t in targets}
    # A package's __init__ is imported on the way to its submodules; that is not an edge of the importer.
    return {r for r in resolved if r is not None and r != name}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    sys.setrecursionlimit(10_000)

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def main() -> int:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    cycles = strongly_connected(graph)
    if "--edges" in sys.argv:
        for name in sorted(graph):
            for target in sorted(graph[name]):
                print(f"{name} -> {target}")
    for component in cycles:
        inside = set(component)
        print(f"cycle of {len(component)} modules:")
        for name in component:
            print(f"  {name} -> {', '.join(sorted(graph[name] & inside))}")
    print(f"{len(known)} modules, {sum(map(len, graph.values()))} imports, {len(cycles)} cycles")
    return 1 if cycles else 0


if __name__ == "__main__":
    raise SystemExit(main())
