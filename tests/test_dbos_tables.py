"""DBOS's tables are written and read only beside `dbos_internals.py` (issue 47): no
string in helix_dbos/ outside `runtime/dbos/` names a table of the `dbos` schema, so a
DBOS upgrade has one folder of Python (and the migrations' functions) to re-read."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "helix_dbos"
DBOS_TABLE = re.compile(r"(?<![\w.])dbos\.(?!_)[a-z_]+\b")  # not a module path


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the constants that are docstrings (prose may name a table)."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            found.add(id(first.value))
    return found


def dbos_table_strings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    prose = docstrings(tree)
    return [
        f"{path.relative_to(PACKAGE)}:{node.lineno} {match.group(0)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
        for match in DBOS_TABLE.finditer(node.value)
    ]


def test_no_statement_on_dbos_tables_outside_runtime_dbos():
    outside = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if "runtime/dbos/" not in path.relative_to(PACKAGE).as_posix()
        for hit in dbos_table_strings(path)
    ]
    assert outside == []


def test_the_check_sees_the_statements_it_guards():
    """The scan finds the statements that live in runtime/dbos/ (else it proves nothing)."""
    inside = [
        hit
        for path in (PACKAGE / "runtime" / "dbos").glob("*.py")
        for hit in dbos_table_strings(path)
    ]
    tables = {hit.rsplit(" ", 1)[1] for hit in inside}
    assert {"dbos.workflow_status"} <= tables
    assert any(hit.startswith("runtime/dbos/worker_workflows.py") for hit in inside)
