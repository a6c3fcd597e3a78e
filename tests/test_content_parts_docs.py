"""docs/content-parts.md as pasted: its example runs and prints what the page says; its
SQL recipe finds the parts the example left."""

from __future__ import annotations

import json

from docs_text import PAGES, code_blocks, run_pasted
from helpers import sql

PAGE = PAGES["docs/content-parts.md"]


def test_the_example_runs_as_pasted_and_prints_what_the_page_says(database_url, tmp_path):
    [snippet] = code_blocks(PAGE, "python")
    done = run_pasted(snippet, database_url, tmp_path, name="content_parts.py")
    assert done.returncode == 0, done.stderr[-3000:]
    [shown] = code_blocks(PAGE, "text")
    assert done.stdout.splitlines() == shown.splitlines()
    [recipe] = code_blocks(PAGE, "sql")
    session = sql(
        database_url,
        "SELECT session_id FROM helix.sessions WHERE agent_name = 'analyst' "
        "ORDER BY created_at DESC LIMIT 1",
    )[0][0]
    rows = sql(database_url, recipe.replace("'ses_...'", "%s"), session)
    assert [(r[1], r[2], r[3]) for r in rows] == [
        ("user", "q3.pdf", "application/pdf"),
        ("tool", "chart.png", "image/png"),
    ]
    blobs = sql(database_url, "SELECT parts FROM helix.messages WHERE session_id = %s", session)
    assert all("data" not in json.dumps(p or []) for (p,) in blobs)
