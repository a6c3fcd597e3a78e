"""docs/providers.md as pasted: the prompt caching and fallback examples run and print
what the page says they print."""

from __future__ import annotations

import pytest

from tests.docs_text import PAGES, code_blocks, run_pasted

PAGE = PAGES["docs/providers.md"]


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (0, ["cached reads by step: [0, 3000, 3000]", "a cached step costs less: True"]),
        (1, ["completed - Answered by the fallback.", "answered by: backup-1"]),
    ],
    ids=["prompt_caching", "fallback"],
)
def test_the_example_runs_as_pasted(database_url, tmp_path, index, expected):
    done = run_pasted(code_blocks(PAGE, "python")[index], database_url, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected
    for line in expected:
        assert f"`{line}`" in PAGE
