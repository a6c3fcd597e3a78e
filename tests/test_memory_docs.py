"""docs/memory.md: its runnable examples run as pasted and print what the page says."""

from __future__ import annotations

import pytest
from docs_text import code_blocks, run_pasted, section
from helpers import require_pgvector


@pytest.fixture(autouse=True)
def _pgvector(database_url: str) -> None:
    require_pgvector(database_url)


def run(snippet: str, database_url: str, tmp_path) -> list[str]:
    done = run_pasted(snippet, database_url, tmp_path, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_save_and_search_runs_as_pasted(database_url, tmp_path):
    part = section("Save and search")
    [snippet] = code_blocks(part, "python")
    assert run(snippet, database_url, tmp_path) == ["Ana prefers oolong tea complete", "0"]
    assert "This prints `Ana prefers oolong tea complete` and `0`." in part


def test_prompt_recall_runs_as_pasted_and_prints_the_prompt_shown(database_url, tmp_path):
    part = section("Agents: `__remember__`, `__recall__` and prompt recall")
    snippet = next(b for b in code_blocks(part, "python") if "recall_hooks(top_k=2)" in b)
    [shown] = code_blocks(part, "text")
    assert run(snippet, database_url, tmp_path) == shown.rstrip("\n").splitlines()


def test_what_a_memory_can_hold_runs_as_pasted(database_url, tmp_path):
    part = section("What a memory can hold")
    [snippet] = code_blocks(part, "python")
    [shown] = code_blocks(part, "text")
    assert run(snippet, database_url, tmp_path) == shown.rstrip("\n").splitlines()
