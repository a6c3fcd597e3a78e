"""docs/time-travel.md as pasted: its Python example runs and prints what the page says;
its SQL recipe runs against a real session."""

from __future__ import annotations

from test_time_travel import (
    no_slow_tool_heads,  # noqa: F401 - autouse fixture
    three_step_session,
)

from tests.docs_text import PAGES, code_blocks, run_pasted

PAGE = PAGES["docs/time-travel.md"]


def test_the_example_runs_as_pasted(database_url, tmp_path):
    [snippet] = code_blocks(PAGE, "python")
    done = run_pasted(snippet, database_url, tmp_path, name="time_travel.py")
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed == [
        "step 1 3 {'total': 5} 1",
        "step 2 4 {'total': 5} 2",
        "['user', 'assistant', 'tool']",
        "2 + 3 = 5 | 2 + 3 ergibt 5",
    ]
    for line in ("`step 1 3 {'total': 5} 1`", "`step 2 4 {'total': 5} 2`"):
        assert line in PAGE
    assert "`['user', 'assistant', 'tool']`" in PAGE and "`2 + 3 = 5 | 2 + 3 ergibt 5`" in PAGE


async def test_the_sql_recipe_gives_the_state_at_each_checkpoint(helix, make_agent, mock_llm):
    [recipe] = code_blocks(PAGE, "sql")
    _, result = await three_step_session(helix, make_agent, mock_llm)
    rows = await helix.sql(recipe, {"session_id": result.session_id})
    assert [(r.kind, r.step, r.state["count"]) for r in rows] == [
        ("step", 1, 2),
        ("step", 2, 2),
        ("step", 3, 5),
        ("step", 4, 5),
    ]
    assert [r.checkpoint_id for r in rows] == [
        c.checkpoint_id for c in await helix.checkpoints.list(result.session_id)
    ]
