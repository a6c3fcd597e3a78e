"""docs/memory.md: its runnable examples run as pasted and print what the page says."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from docs_text import code_blocks, section
from helpers import require_pgvector


@pytest.fixture(autouse=True)
def _pgvector(database_url: str) -> None:
    require_pgvector(database_url)


def run(snippet: str, database_url: str, tmp_path) -> list[str]:
    script = tmp_path / "example.py"
    script.write_text(snippet)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELIX_", "OPENAI_"))}
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**env, "HELIX_DATABASE_URL": database_url},
        cwd=tmp_path,
    )
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
