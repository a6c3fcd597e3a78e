"""docs/schedules.md as pasted: its Python example runs and prints what the page says;
its SQL recipe lists a schedule's firings with their runs."""

from __future__ import annotations

import asyncio

import pytest
from schedule_support import firings_run_here  # noqa: F401 - autouse fixture

from tests.docs_text import PAGES, README, code_blocks, run_pasted

PAGE = PAGES["docs/schedules.md"]
pytest_plugins = ["double_texting_support"]  # the scripted model


# A database of its own: a firing goes to the application's latest version, which the
# example's process (another version than the test session's) would otherwise become.
@pytest.mark.crash
def test_the_example_runs_as_pasted(database_url, tmp_path):
    [snippet] = code_blocks(PAGE, "python")
    done = run_pasted(snippet, database_url, tmp_path, name="schedules.py", timeout=300)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed == [
        "started completed Report for: heartbeat",
        "True",
        "5 True",
        "[1, 2, 3, 4, 5]",
        "paused None",
        "[]",
    ]
    for line in printed:
        assert f"`{line}`" in PAGE


async def test_the_sql_recipe_lists_firings_and_their_runs(
    helix, make_agent, scripted, database_url
):
    [recipe] = code_blocks(PAGE, "sql")
    agent = make_agent()
    name = f"{agent.name}-docs"
    await helix.schedules.create(agent, "0 0 1 1 *", input="docs", name=name)
    fired = await helix.schedules.trigger(name)

    for _ in range(600):  # until its run ended (at most a minute)
        rows = await helix.sql(recipe, {"name": name})
        if rows and rows[0].run_status == "completed":
            break
        await asyncio.sleep(0.1)
    [row] = await helix.sql(recipe, {"name": name})
    assert (row.outcome, row.output) == ("started", "re: docs")
    assert [f.firing_id for f in await helix.schedules.firings(name)] == [fired]
    await helix.schedules.delete(name)


def test_the_page_is_in_the_nav_and_the_readme_links_it():
    assert "schedules.md" in (README.parent / "mkdocs.yml").read_text()
    assert "docs/schedules.md" in README.read_text()
