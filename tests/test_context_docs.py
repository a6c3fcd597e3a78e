"""docs/context.md as pasted: its example runs and prints what the page says, and its SQL
recipe answers on the session it left."""

from __future__ import annotations

from helpers import sql

from tests.docs_text import PAGES, code_blocks, run_pasted

PAGE = PAGES["docs/context.md"]


def test_the_example_runs_as_pasted_and_its_sql_answers(database_url, tmp_path):
    snippet = code_blocks(PAGE, "python")[0]
    done = run_pasted(snippet, database_url, tmp_path, name="context.py")
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed[:3] == [
        "completed after 40 turns",
        "largest input under 300 tokens: True",
        "messages kept: 80",
    ]
    assert printed[3].startswith("summaries: ") and int(printed[3].split()[-1]) >= 2
    for line in printed:
        assert f"`{line}`" in PAGE
    (session_id,) = sql(
        database_url,
        "SELECT session_id FROM helix.sessions WHERE agent_name = 'counter' "
        "ORDER BY created_at DESC LIMIT 1",
    )[0]
    recipe = code_blocks(PAGE, "sql")[0].replace("sess_...", session_id)
    rows = sql(database_url, recipe)
    assert len(rows) == int(printed[3].split()[-1])
    assert all(text == "The user has been counting sheep." for *_, text in rows)
