"""The package's shape, checked from its source: no import cycles (function-level and
`TYPE_CHECKING` imports count), a pure `orchestration/`, and DBOS private modules only
in `runtime/dbos_internals.py`."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "helix_dbos"
SHIM = "helix_dbos.runtime.dbos_internals"
# What pure orchestration may not import: DBOS, SQL drivers, provider SDKs, web stacks.
IMPURE = ("dbos", "sqlalchemy", "psycopg", "anthropic", "openai", "fastapi", "starlette",
          "uvicorn", "httpx")  # fmt: skip


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    where: str  # file:line


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(
    path: Path, module: str, is_package: bool, modules: frozenset[str] = frozenset()
) -> Iterator[tuple[str, int]]:
    """Every module `path` imports, anywhere in the file (functions and TYPE_CHECKING too).
    `from a import b` is an import of module `a.b` when that is one of `modules`, else of `a`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names]
            submodules = [name for name in names if name in modules]
            yield from ((name, node.lineno) for name in submodules)
            if len(submodules) < len(names):
                yield base, node.lineno


def import_graph(root: Path) -> dict[str, list[Edge]]:
    """Module -> its imports of other modules under `root` (parents implied by a dotted
    name are not edges)."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, list[Edge]] = {name: [] for name in files}
    for name, path in files.items():
        for target, line in imports(path, name, path.name == "__init__.py", frozenset(files)):
            if target in files and target != name:
                where = f"{path.relative_to(root.parent)}:{line}"
                graph[name].append(Edge(name, target, where))
    return graph


def cycles(graph: dict[str, list[Edge]]) -> list[list[Edge]]:
    """One cycle (as its edges) per strongly connected component with more than one
    module, found with Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for edge in graph[node]:
            if edge.target not in index:
                visit(edge.target)
                low[node] = min(low[node], low[edge.target])
            elif edge.target in on_stack:
                low[node] = min(low[node], index[edge.target])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return [_one_cycle(graph, component) for component in components]


def _one_cycle(graph: dict[str, list[Edge]], component: set[str]) -> list[Edge]:
    """A path from the component's first module back to itself, inside the component."""
    start = min(component)
    paths: dict[str, list[Edge]] = {start: []}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for edge in graph[node]:
            if edge.target == start:
                return [*paths[node], edge]
            if edge.target in component and edge.target not in paths:
                paths[edge.target] = [*paths[node], edge]
                queue.append(edge.target)
    raise AssertionError(f"no cycle through {start}")


def describe(cycle: list[Edge]) -> str:
    chain = " -> ".join([cycle[0].source, *(e.target for e in cycle)])
    return chain + "\n" + "\n".join(f"    {e.source} -> {e.target} at {e.where}" for e in cycle)


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph(PACKAGE))
    assert not found, "import cycles:\n" + "\n".join(describe(c) for c in found)


def test_the_cycle_check_finds_a_cycle_closed_by_a_function_level_import(tmp_path: Path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import x\n"
    )
    (pkg / "c.py").write_text("def f():\n    from . import a\n")
    (pkg / "d.py").write_text("import pkg.a\n")
    found = cycles(import_graph(pkg))
    assert len(found) == 1
    assert describe(found[0]).splitlines()[0] == "pkg.a -> pkg.b -> pkg.c -> pkg.a"


def test_orchestration_imports_only_itself_and_plain_libraries():
    graph = import_graph(PACKAGE)
    bad = []
    for path in sorted((PACKAGE / "orchestration").rglob("*.py")):
        name = module_name(path, PACKAGE)
        for target, line in imports(path, name, path.name == "__init__.py"):
            top = target.split(".")[0]
            inside = target.startswith("helix_dbos.orchestration")
            if top in IMPURE or (top == "helix_dbos" and not inside):
                bad.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert graph, "the graph was built"
    assert not bad, "orchestration must stay pure:\n" + "\n".join(bad)


def test_only_the_shim_imports_a_private_dbos_module():
    offenders = []
    for folder in ("helix_dbos", "tests", "examples"):
        for path in sorted((REPO / folder).rglob("*.py")):
            name = module_name(path, REPO / folder)
            for target, line in imports(path, name, path.name == "__init__.py"):
                if target.startswith("dbos._") and name != SHIM:
                    offenders.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert not offenders, "\n".join(offenders)
