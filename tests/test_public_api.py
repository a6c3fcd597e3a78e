"""What a user imports: everything from `helix_dbos`, nothing deeper, and cheaply.

The examples and the Python blocks of the README and docs/ import only `helix_dbos` itself (and only
names it exports); every exported name resolves; `import helix_dbos` and the CLI's
package load neither DBOS nor a provider SDK nor FastAPI until a name needs them; and
`HelixDBOS.sql` is the supported way to run your own SQL."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import helix_dbos
from tests.docs_text import TEXT

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.py"))
HEAVY = ("dbos", "anthropic", "openai", "fastapi", "starlette", "uvicorn", "sqlalchemy")


def helix_imports(source: str) -> list[tuple[str, list[str]]]:
    """(module, names) of each import of helix_dbos or below it: `import helix_dbos.x`,
    `from helix_dbos.x import y`, `from helix_dbos import y`."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "helix_dbos"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "helix_dbos":
            found.append((node.module or "", [a.name for a in node.names]))
    return found


def readme_python_imports() -> list[str]:
    """The import lines of the Python blocks of the README and docs/ (snippets may not
    parse whole)."""
    blocks = re.findall(r"```python\n(.*?)```", TEXT, re.S)
    return [
        line.strip()
        for block in blocks
        for line in block.splitlines()
        if re.match(r"\s*(from|import) helix_dbos\b", line)
    ]


def deep_or_unknown(module: str, names: list[str]) -> list[str]:
    if module != "helix_dbos":
        return [module]
    return [f"helix_dbos.{n}" for n in names if n not in helix_dbos.__all__]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_import_only_helix_dbos(example):
    problems = [
        bad
        for module, names in helix_imports(example.read_text())
        for bad in deep_or_unknown(module, names)
    ]
    assert problems == [], f"{example.name} imports {problems}: export them from helix_dbos"


def test_readme_snippets_import_only_helix_dbos():
    lines = readme_python_imports()
    assert len(lines) >= 10, "the documentation's snippets were found"
    problems = [
        line
        for line in lines
        for module, names in helix_imports(line)
        if deep_or_unknown(module, names)
    ]
    assert problems == []


def test_the_checks_see_a_deep_import():
    """The two checks above would fail on what the examples used to do."""
    old = "from helix_dbos.orchestration.types import LLMRequest\nimport helix_dbos.demo\n"
    assert [m for m, names in helix_imports(old) for _ in deep_or_unknown(m, names)] == [
        "helix_dbos.orchestration.types",
        "helix_dbos.demo",
    ]
    assert deep_or_unknown("helix_dbos", ["Agent", "on_target_loop"]) == [
        "helix_dbos.on_target_loop"
    ]


def test_every_exported_name_resolves():
    missing = [name for name in helix_dbos.__all__ if getattr(helix_dbos, name, None) is None]
    assert missing == []
    assert set(helix_dbos._EXPORTS) == set(helix_dbos.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        helix_dbos.nope  # noqa: B018


def loaded_after(code: str, among: tuple[str, ...] = HEAVY) -> list[str]:
    """The heavy top-level packages (of `among`) loaded after running `code` in a fresh
    interpreter."""
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(among)!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_the_cli_and_the_package_import_no_dbos_sdk_or_web_stack():
    assert loaded_after("import helix_dbos") == []
    assert loaded_after("import helix_dbos.cli") == []
    # `--help` and a read command's module graph, without running them
    assert loaded_after("from helix_dbos.cli.main import app, main") == []
    # A name that needs DBOS loads it then (so the check above could fail).
    assert "dbos" in loaded_after("from helix_dbos import HelixDBOS")


# Not needed to launch: the HTTP client (httpx brings rich and pygments for its own command
# line), the CLI's typer, the web stack, the optional SDKs.
NOT_FOR_LAUNCH = ("httpx", "rich", "pygments", "typer", "a2a", "mcp", *HEAVY[1:-1])


def test_a_process_that_launches_helix_loads_no_http_client_terminal_or_web_stack():
    """Every crash app, worker and CLI command that runs agents imports `HelixDBOS` in a
    fresh interpreter: what it does not need costs CPU in each (docs/internals.md)."""
    assert loaded_after("from helix_dbos import HelixDBOS, Agent, MockLLM", NOT_FOR_LAUNCH) == []
    # The client loads httpx when it is asked for (so the check above could fail).
    assert "httpx" in loaded_after("from helix_dbos.client import HelixClient", NOT_FOR_LAUNCH)


def test_built_in_tools_by_name_without_importing_them_first():
    """`import helix_dbos` no longer loads the built-ins up front; naming one still works."""
    code = (
        "from helix_dbos.definitions.agent import Agent\n"
        "agent = Agent('a', tools=['__complete__', '__log_progress__'])\n"
        "print(sorted(t.name for t in agent.tools))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert "__complete__" in done.stdout and "__log_progress__" in done.stdout


async def test_helix_sql_runs_your_own_sql(helix, make_agent, mock_llm):
    agent = make_agent()
    mock_llm.add_responses({"type": "text", "content": "hi"}, agent=agent.name)
    result = await (await helix.execute(agent, "hello")).result()
    rows = await helix.sql(
        "SELECT run_id, status FROM helix.runs WHERE agent_name = :agent", {"agent": agent.name}
    )
    assert [(r.run_id, r.status) for r in rows] == [(result.run_id, "completed")]
    assert [tuple(r) for r in rows] == [(result.run_id, "completed")]
    # A statement without rows returns [], and each call is its own transaction.
    assert await helix.sql("CREATE TEMP TABLE IF NOT EXISTS i29_probe (x int)") == []
    with pytest.raises(Exception, match="division by zero"):
        await helix.sql("SELECT 1 / 0")
    assert [tuple(r) for r in await helix.sql("SELECT 1 AS one")] == [(1,)]
