"""docs/handoffs.md as pasted: its example runs and prints what the page says, and its
SQL recipe finds the handoff it made."""

from __future__ import annotations

from helpers import sql

from tests.docs_text import PAGES, code_blocks, run_pasted

PAGE = PAGES["docs/handoffs.md"]


def test_the_example_prints_what_the_page_says(database_url, tmp_path):
    done = run_pasted(code_blocks(PAGE, "python")[0], database_url, tmp_path, name="handoffs.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == code_blocks(PAGE, "text")[0].splitlines()
    [query] = code_blocks(PAGE, "sql")
    [(session_id,)] = sql(
        database_url,
        "SELECT session_id FROM helix.handoffs WHERE from_agent = 'triage' "
        "ORDER BY created_at DESC LIMIT 1",
    )
    rows = sql(database_url, query.replace("'ses_...'", f"'{session_id}'"))
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [(1, "h1", "triage", "billing")]
