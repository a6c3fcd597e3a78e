"""docs/limits.md as pasted: its example runs and prints what the page says; its SQL
recipes run against the runs it left."""

from __future__ import annotations

from helpers import sql

from helix_dbos import Agent
from tests.docs_text import PAGES, code_blocks, run_pasted

PAGE = PAGES["docs/limits.md"]


def test_the_example_runs_as_pasted_and_its_sql_answers(database_url, tmp_path):
    snippet = code_blocks(PAGE, "python")[0]
    done = run_pasted(snippet, database_url, tmp_path, name="limits.py")
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed == [
        "8 runs completed",
        "most calls at once: 2",
        "[('acme', 6), ('globex', 2)]",
    ]
    for line in printed:
        assert f"`{line}`" in PAGE
    waiting, usage = code_blocks(PAGE, "sql")
    assert sql(database_url, waiting) == [], "nothing waits once every run ended"
    by_tenant = {row[0]: row[1:3] for row in sql(database_url, usage)}
    assert by_tenant["acme"] == (6, 6) and by_tenant["globex"] == (2, 2)


def test_the_run_queue_example_builds():
    """The page's `RunQueue(partition_by="tenant")` is a valid definition."""
    block = code_blocks(PAGE, "python")[1]
    scope: dict = {"support": Agent("support")}
    exec(block, scope)
    assert "support-runs" in block and 'partition_by="tenant"' in block
