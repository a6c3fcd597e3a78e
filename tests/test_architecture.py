"""The package's shape, checked from its source with `ast` (no database, no DBOS launch):
a folder order with no way back up (docs/internals.md, "Code layout"), no import cycles in
helix_dbos, not even between sibling folders (function-level, `TYPE_CHECKING` and
`importlib.import_module("...")` / `__import__` / `find_spec` imports of a literal name
count), no folder of more than 15 modules, a pure `orchestration/`, a leaf `api/` (the wire
models the client loads), and DBOS private modules imported only by
`runtime/dbos/dbos_internals.py`.

Each rule is a function returning its violations, run on the real tree and, in a self-test,
on a small synthetic tree that breaks it, so that every assertion here can fail."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "helix_dbos"
SHIM = ("helix_dbos.runtime.dbos.dbos_internals", "helix_dbos.runtime.dbos.step_bookkeeping")
# What pure orchestration may not import: DBOS, SQL drivers, provider SDKs, web stacks.
IMPURE = ("dbos", "sqlalchemy", "psycopg", "anthropic", "openai", "fastapi", "starlette",
          "uvicorn", "httpx")  # fmt: skip


# Each top-level folder (or module) of helix_dbos, by rank: a module may import its own
# folder and folders of a lower or equal rank, never a higher one. The package's own
# `__init__` is the top. docs/internals.md ("Code layout") says what each one holds.
RANKS: dict[str, int] = {
    **dict.fromkeys(("errors", "log_events", "orchestration", "moved_modules", "named_tools",
                     "lazy_names", "api"), 0),
    **dict.fromkeys(("definitions", "llm", "streaming", "client"), 1),
    "store": 2,
    "runtime": 3,
    **dict.fromkeys(("a2a_wire", "builtins", "mcp", "memory", "otel", "schedules"), 4),
    "facade": 5,
    "server": 6,
    **dict.fromkeys(("cli", "demo"), 7),
}  # fmt: skip
# Upward imports let through while another change removes them, as (source, target): why.
# Each must still occur (a test says when one is gone, so its entry goes too).
PENDING: dict[tuple[str, str], str] = {}
MAX_MODULES = 15
# `importlib.import_module("x")`, `__import__("x")`, `importlib.util.find_spec("x")`.
DYNAMIC_IMPORTS = ("import_module", "__import__", "find_spec")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    where: str  # file:line


def module_name(path: Path, root: Path) -> str:
    """`root/a/b.py` -> "<root's name>.a.b"; a package's `__init__.py` is the package."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_statements(path: Path, module: str) -> Iterator[tuple[str, list[str], int]]:
    """(module, names taken from it, line) for every import anywhere in the file, in
    functions and `if TYPE_CHECKING:` blocks too, in line order; relative imports resolved."""
    for base, names, line in _statements(path.name == "__init__.py", module, path.read_text()):
        yield base, list(names), line


@functools.cache
def _statements(
    is_package: bool, module: str, source: str
) -> tuple[tuple[str, tuple[str, ...], int], ...]:
    """`import_statements` of one source text, parsed once however many checks read it."""
    return tuple(
        (base, tuple(names), line) for base, names, line in _parse(is_package, module, source)
    )


def _parse(is_package: bool, module: str, source: str) -> Iterator[tuple[str, list[str], int]]:
    tree = ast.parse(source)
    for node in sorted(ast.walk(tree), key=lambda node: getattr(node, "lineno", 0)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base, [alias.name for alias in node.names], node.lineno
        elif isinstance(node, ast.Call) and _dynamic_name(node.func) in DYNAMIC_IMPORTS:
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield first.value, [], node.lineno


def _dynamic_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def imports(path: Path, module: str, modules: Iterable[str]) -> Iterator[tuple[str, int]]:
    """The modules `path` imports: `from a import b` is an import of `a.b` when that is one
    of `modules`, else of `a`. Parents implied by a dotted name are not imports."""
    for base, names, line in import_statements(path, module):
        submodules = [f"{base}.{name}" for name in names if f"{base}.{name}" in modules]
        yield from ((submodule, line) for submodule in submodules)
        if len(submodules) < len(names) or not names:
            yield base, line


def package_modules(root: Path) -> dict[str, Path]:
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def import_graph(root: Path) -> dict[str, list[Edge]]:
    """Module -> its imports of other modules under `root`."""
    files = package_modules(root)
    graph: dict[str, list[Edge]] = {name: [] for name in files}
    for name, path in files.items():
        for target, line in imports(path, name, files):
            if target in files and target != name:
                graph[name].append(Edge(name, target, f"{path.relative_to(root.parent)}:{line}"))
    return graph


def strongly_connected(graph: dict[str, list[Edge]]) -> list[set[str]]:
    """The components of more than one module (Tarjan's algorithm)."""
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
    return components


def one_cycle(graph: dict[str, list[Edge]], component: set[str]) -> list[Edge]:
    """A shortest path from the component's first module back to itself, inside it."""
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


def import_cycles(root: Path) -> list[str]:
    """One readable paragraph per cycle: its modules, one path round it, each edge's line."""
    graph = import_graph(root)
    reports = []
    for component in sorted(strongly_connected(graph), key=min):
        cycle = one_cycle(graph, component)
        chain = " -> ".join([cycle[0].source, *(edge.target for edge in cycle)])
        reports.append(
            f"cycle among {len(component)} modules: {', '.join(sorted(component))}\n"
            f"  e.g. {chain}\n"
            + "\n".join(f"    {e.source} -> {e.target} at {e.where}" for e in cycle)
        )
    return reports


def top_folder(module: str) -> str:
    """ "pkg.runtime.loop.agent_loop" -> "runtime"; the package itself -> "" (the top)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def folder_order_violations(
    root: Path, ranks: dict[str, int], pending: dict[tuple[str, str], str]
) -> list[str]:
    """Imports of a folder of a higher rank (the package's `__init__` ranks above all),
    and folders with no rank; `pending` (source, target) pairs are let through."""
    graph = import_graph(root)
    top = max(ranks.values()) + 1
    bad = [
        f"{root.name}/{folder} has no rank in RANKS"
        for folder in sorted({top_folder(m) for m in graph} - {""} - set(ranks))
    ]
    for edges in graph.values():
        for edge in edges:
            source, target = top_folder(edge.source), top_folder(edge.target)
            if source not in ranks and source or target not in ranks and target:
                continue
            source_rank = ranks.get(source, top)
            target_rank = ranks.get(target, top)
            if target_rank > source_rank and (source, target) not in pending:
                bad.append(
                    f"{edge.where} imports {edge.target}: {source or root.name} (rank "
                    f"{source_rank}) may not import {target or root.name} (rank {target_rank})"
                )
    return bad


def unused_pending(root: Path, pending: dict[tuple[str, str], str]) -> list[str]:
    """Pending upward imports that no longer occur: their entry must go."""
    graph = import_graph(root)
    seen = {(top_folder(e.source), top_folder(e.target)) for es in graph.values() for e in es}
    return [f"{a} -> {b} ({why})" for (a, b), why in pending.items() if (a, b) not in seen]


def folder_cycles(root: Path, pending: Iterable[tuple[str, str]] = ()) -> list[str]:
    """Cycles between the sibling folders and modules of any one package: each child of a
    package is one node (a folder stands for everything under it). Imports between the
    top-level folders of a `pending` pair are left out."""
    graph = import_graph(root)
    skip = set(pending)
    graph = {
        name: [e for e in edges if (top_folder(e.source), top_folder(e.target)) not in skip]
        for name, edges in graph.items()
    }
    reports = []
    packages = sorted({m.rsplit(".", 1)[0] for m in graph if "." in m} | {root.name})
    for package in packages:
        prefix = package + "."

        def child(module: str, prefix: str = prefix) -> str | None:
            if not module.startswith(prefix):
                return None
            return prefix + module[len(prefix) :].split(".")[0]

        siblings: dict[str, list[Edge]] = {}
        for edges in graph.values():
            for edge in edges:
                a, b = child(edge.source), child(edge.target)
                if a and b and a != b:
                    siblings.setdefault(a, []).append(Edge(a, b, edge.where))
                    siblings.setdefault(b, [])
        for component in sorted(strongly_connected(siblings), key=min):
            cycle = one_cycle(siblings, component)
            reports.append(
                f"folders of {package} import each other: "
                + " -> ".join([cycle[0].source, *(e.target for e in cycle)])
                + "\n"
                + "\n".join(f"    {e.source} -> {e.target} at {e.where}" for e in cycle)
            )
    return reports


def crowded_folders(root: Path, limit: int) -> list[str]:
    """Package folders with more than `limit` modules (`__init__`, `__main__` not counted)."""
    bad = []
    for folder in sorted([root, *(p.parent for p in root.rglob("*/__init__.py"))]):
        modules = [p for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")]
        if len(modules) > limit:
            bad.append(f"{folder.relative_to(root.parent)}: {len(modules)} modules")
    return bad


def unexplained_folders(root: Path) -> list[str]:
    """Package folders whose `__init__.py` has no docstring saying what they own."""
    bad = []
    for init in sorted(root.rglob("__init__.py")):
        if not ast.get_docstring(ast.parse(init.read_text())):
            bad.append(str(init.relative_to(root.parent)))
    return bad


def impure_orchestration_imports(
    package: Path, folder: str = "orchestration", may_import: tuple[str, ...] = ()
) -> list[str]:
    """Imports in `<package>/<folder>/` of an impure library or of any other module of
    the package than the folder's own and those `may_import` names."""
    modules = package_modules(package)
    allowed = [f"{package.name}.{name}" for name in (folder, *may_import)]
    bad = []
    for path in sorted((package / folder).rglob("*.py")):
        for target, line in imports(path, module_name(path, package), modules):
            top = target.split(".")[0]
            own = any(target == name or target.startswith(name + ".") for name in allowed)
            if top in IMPURE or (top == package.name and not own):
                bad.append(f"{path.relative_to(package.parent)}:{line} imports {target}")
    return bad


def private_dbos_imports(folders: Iterable[Path], allowed: tuple[str, ...]) -> list[str]:
    """Imports of `dbos._anything` (`import dbos._x`, `from dbos._x import y`,
    `from dbos import _x`) in any module of `folders` but `allowed`."""
    bad = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            name = module_name(path, folder)
            for base, names, line in import_statements(path, name):
                targets = [base] if base.startswith("dbos._") else [f"{base}.{n}" for n in names]
                private = [target for target in targets if target.startswith("dbos._")]
                if private and name not in allowed:
                    where = path.relative_to(folder.parent)
                    bad.append(f"{where}:{line} imports {', '.join(private)}")
    return bad


def test_the_package_has_no_import_cycle():
    found = import_cycles(PACKAGE)
    assert not found, f"{len(found)} import cycle(s) in helix_dbos:\n" + "\n".join(found)


def test_no_folder_imports_a_folder_above_it():
    bad = folder_order_violations(PACKAGE, RANKS, PENDING)
    assert not bad, "imports against the folder order (docs/internals.md):\n" + "\n".join(bad)


def test_each_pending_upward_import_still_occurs():
    gone = unused_pending(PACKAGE, PENDING)
    assert not gone, "remove these from PENDING, they no longer occur:\n" + "\n".join(gone)


def test_no_two_sibling_folders_import_each_other():
    found = folder_cycles(PACKAGE, PENDING)
    assert not found, "\n".join(found)


def test_no_folder_holds_more_than_15_modules_and_each_says_what_it_owns():
    assert not crowded_folders(PACKAGE, MAX_MODULES), crowded_folders(PACKAGE, MAX_MODULES)
    assert not unexplained_folders(PACKAGE), unexplained_folders(PACKAGE)


def test_orchestration_imports_only_itself_and_plain_libraries():
    assert (PACKAGE / "orchestration" / "types.py").exists()
    bad = impure_orchestration_imports(PACKAGE)
    assert not bad, "helix_dbos/orchestration/ must stay pure:\n" + "\n".join(bad)


def test_the_wire_models_are_a_leaf_over_orchestration():
    """`api/` is what `helix_dbos.client` loads: pydantic and pure orchestration types."""
    assert (PACKAGE / "api" / "models.py").exists()
    bad = impure_orchestration_imports(PACKAGE, "api", may_import=("orchestration", "errors"))
    assert not bad, "helix_dbos/api/ must stay a leaf:\n" + "\n".join(bad)


def test_only_the_shim_imports_a_private_dbos_module():
    folders = [REPO / "helix_dbos", REPO / "tests", REPO / "examples"]
    bad = private_dbos_imports(folders, allowed=SHIM)
    assert not bad, "DBOS private modules outside runtime/dbos/ (its two shims):\n" + "\n".join(bad)


# Self-tests: each rule, fed a small tree that breaks it, reports it.


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for relative, source in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(source)
    return root


def test_the_cycle_check_reports_a_cycle_closed_by_function_and_type_checking_imports(
    tmp_path: Path,
):
    pkg = write_tree(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "a.py": "from pkg import b\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import x\n",
            "c.py": "def f():\n    from . import a\n",
            "d.py": "import pkg.a\n",  # imports the cycle, is not in it
            "sub/__init__.py": "from ..d import y\n",  # no edge back to pkg: no cycle
        },
    )
    found = import_cycles(pkg)
    assert len(found) == 1, found
    assert found[0].splitlines() == [
        "cycle among 3 modules: pkg.a, pkg.b, pkg.c",
        "  e.g. pkg.a -> pkg.b -> pkg.c -> pkg.a",
        "    pkg.a -> pkg.b at pkg/a.py:1",
        "    pkg.b -> pkg.c at pkg/b.py:3",
        "    pkg.c -> pkg.a at pkg/c.py:2",
    ]


def test_a_dotted_import_is_no_import_of_its_parent_package(tmp_path: Path):
    pkg = write_tree(
        tmp_path / "pkg",
        {
            "__init__.py": "from pkg.sub import a\n",
            "sub/__init__.py": "",
            "sub/a.py": "import pkg.sub\n",
        },
    )
    assert import_cycles(pkg) == []


def test_the_purity_check_reports_impure_and_other_package_imports(tmp_path: Path):
    pkg = write_tree(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "errors.py": "",
            "orchestration/__init__.py": "from . import plan\n",
            "orchestration/plan.py": (
                "import json\nfrom pydantic import BaseModel\n"
                "from pkg.orchestration import plan\n"
                "def f():\n    import sqlalchemy.orm\n"
                "from .. import errors\n"
            ),
        },
    )
    assert impure_orchestration_imports(pkg) == [
        "pkg/orchestration/plan.py:5 imports sqlalchemy.orm",
        "pkg/orchestration/plan.py:6 imports pkg.errors",
    ]


def test_the_leaf_check_allows_only_the_named_folders(tmp_path: Path):
    pkg = write_tree(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "errors.py": "",
            "orchestration/__init__.py": "",
            "server/__init__.py": "",
            "api/__init__.py": "",
            "api/models.py": (
                "from pkg import errors\nfrom pkg.orchestration import x\n"
                "from pkg.server import app\nimport fastapi\nfrom pkg.api import runs\n"
            ),
        },
    )
    assert impure_orchestration_imports(pkg, "api", ("orchestration", "errors")) == [
        "pkg/api/models.py:3 imports pkg.server",
        "pkg/api/models.py:4 imports fastapi",
    ]


def test_the_private_dbos_check_reports_every_spelling_but_in_the_shim(tmp_path: Path):
    tests = write_tree(
        tmp_path / "tests",
        {
            "test_a.py": "import dbos._core\nfrom dbos import DBOS, _context\n",
            "test_b.py": "def f():\n    from dbos._sys_db import SystemDatabase\n",
            "shim.py": "from dbos._dbos import _get_dbos_instance\n",
        },
    )
    assert private_dbos_imports([tests], allowed=("tests.shim",)) == [
        "tests/test_a.py:1 imports dbos._core",
        "tests/test_a.py:2 imports dbos._context",
        "tests/test_b.py:2 imports dbos._sys_db",
    ]


def test_the_cycle_check_sees_literal_importlib_and_dunder_import_calls(tmp_path: Path):
    pkg = write_tree(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "a.py": "import importlib\nimportlib.import_module('pkg.b')\n",
            "b.py": "def f():\n    return __import__('pkg.c')\n",
            "c.py": "import importlib.util\nimportlib.util.find_spec('pkg.a')\n",
            "d.py": "import importlib\nname = 'pkg.a'\nimportlib.import_module(name)\n",
        },
    )
    found = import_cycles(pkg)
    assert len(found) == 1, found
    assert found[0].splitlines()[:2] == [
        "cycle among 3 modules: pkg.a, pkg.b, pkg.c",
        "  e.g. pkg.a -> pkg.b -> pkg.c -> pkg.a",
    ]


def test_the_folder_order_check_reports_upward_and_unranked_imports(tmp_path: Path):
    pkg = write_tree(
        tmp_path / "pkg",
        {
            "__init__.py": "from pkg.high import x\n",  # the top may import anything
            "low/__init__.py": "",
            "low/a.py": "import importlib\nimportlib.import_module('pkg.high.b')\n",
            "low/c.py": "from pkg.mid import m\n",  # pending: let through
            "mid.py": "from pkg.low import a\nimport pkg\n",  # down: fine; the top: no
            "high/__init__.py": "",
            "high/b.py": "from pkg.low import a\n",
            "odd/__init__.py": "",
        },
    )
    ranks = {"low": 0, "mid": 1, "high": 2}
    pending = {("low", "mid"): "a later change", ("high", "mid"): "gone already"}
    assert folder_order_violations(pkg, ranks, pending) == [
        "pkg/odd has no rank in RANKS",
        "pkg/low/a.py:2 imports pkg.high.b: low (rank 0) may not import high (rank 2)",
        "pkg/mid.py:2 imports pkg: mid (rank 1) may not import pkg (rank 3)",
    ]
    assert unused_pending(pkg, pending) == ["high -> mid (gone already)"]


def test_the_sibling_check_reports_folders_that_import_each_other(tmp_path: Path):
    pkg = write_tree(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "run/__init__.py": "",
            "run/loop/__init__.py": "",
            "run/loop/a.py": "from pkg.run.waits import b\n",
            "run/waits/__init__.py": "",
            "run/waits/b.py": "",
            "run/waits/c.py": "from pkg.run.loop import a\n",  # no module cycle, a folder one
            "run/top.py": "from pkg.run.loop import a\n",
        },
    )
    assert import_cycles(pkg) == []
    assert folder_cycles(pkg) == [
        "folders of pkg.run import each other: pkg.run.loop -> pkg.run.waits -> pkg.run.loop\n"
        "    pkg.run.loop -> pkg.run.waits at pkg/run/loop/a.py:1\n"
        "    pkg.run.waits -> pkg.run.loop at pkg/run/waits/c.py:1"
    ]


def test_the_size_check_counts_modules_per_folder(tmp_path: Path):
    files = {"__init__.py": '"""Owns it all."""\n', "big/__init__.py": ""}
    files |= {f"big/m{i}.py": "" for i in range(16)}
    files |= {"big/__main__.py": "", "small/__init__.py": '"""Owns a little."""\n'}
    files |= {f"small/m{i}.py": "" for i in range(15)}
    pkg = write_tree(tmp_path / "pkg", files)
    assert crowded_folders(pkg, 15) == ["pkg/big: 16 modules"]
    assert unexplained_folders(pkg) == ["pkg/big/__init__.py"]
