"""`helix-dbos schedules ...` (issue 34) in subprocesses against the test database; the
test process's own HelixDBOS is the worker that executes the firings."""

from __future__ import annotations

import json

from helpers import sql, wait_for
from schedule_support import firings_run_here  # noqa: F401 - autouse fixture
from test_cli import helix_dbos

pytest_plugins = ["double_texting_support"]  # the scripted model


async def test_create_list_trigger_backfill_pause_resume_delete(
    helix, make_agent, scripted, database_url
):
    agent = make_agent()
    name = f"{agent.name}-cli"
    created = await helix_dbos(
        database_url, "schedules", "create", name, "--agent", agent.name,
        "--cron", "0 0 1 1 *", "--input", "from the cli", "--json",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    info = json.loads(created.stdout)
    assert (info["name"], info["agent"], info["status"]) == (name, agent.name, "active")
    assert (await helix.schedules.get(name)).input == "from the cli"  # the same schedule

    listed = await helix_dbos(database_url, "schedules", "list", "--agent", agent.name)
    assert listed.returncode == 0 and name in listed.stdout and "0 0 1 1 *" in listed.stdout

    fired = await helix_dbos(database_url, "schedules", "trigger", name, "--json")
    assert fired.returncode == 0, fired.stderr
    firing_id = json.loads(fired.stdout)["firing_id"]
    args = ("--start", "2023-06-01T00:00:00Z", "--end", "2025-06-01T00:00:00Z", "--json")
    first = await helix_dbos(database_url, "schedules", "backfill", name, *args)
    second = await helix_dbos(database_url, "schedules", "backfill", name, *args)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    ids = json.loads(first.stdout)["firing_ids"]
    assert len(ids) == 2 and json.loads(second.stdout)["firing_ids"] == ids

    def made() -> list[tuple]:
        return sql(
            database_url,
            "SELECT f.firing_id, r.status FROM helix.schedule_firings f "
            "JOIN helix.runs r USING (run_id) WHERE f.schedule_name = %s",
            name,
        )

    wait_for(lambda: len(made()) == 3 and all(s == "completed" for _, s in made()))
    assert {f for f, _ in made()} == {firing_id, *ids}
    table = await helix_dbos(database_url, "schedules", "firings", name)
    assert table.returncode == 0 and table.stdout.count("started") == 3

    paused = await helix_dbos(database_url, "schedules", "pause", name)
    assert paused.returncode == 0 and "paused" in paused.stdout
    assert (await helix.schedules.get(name)).status == "paused"
    resumed = await helix_dbos(database_url, "schedules", "resume", name)
    assert resumed.returncode == 0 and "active" in resumed.stdout
    deleted = await helix_dbos(database_url, "schedules", "delete", name)
    assert deleted.returncode == 0 and f"Deleted schedule {name}" in deleted.stdout
    assert await helix.schedules.list(agent) == []


async def test_bad_input_is_one_line_on_stderr(helix, make_agent, database_url):
    agent = make_agent()
    bad_cron = await helix_dbos(
        database_url, "schedules", "create", "x", "--agent", agent.name, "--cron", "often"
    )
    assert bad_cron.returncode == 2
    assert bad_cron.stderr.startswith("helix-dbos schedules create: error: invalid cron")
    missing = await helix_dbos(database_url, "schedules", "pause", "no-such-schedule")
    assert missing.returncode == 2
    assert "No schedule named 'no-such-schedule'" in missing.stderr
    bad_time = await helix_dbos(
        database_url, "schedules", "backfill", "no-such-schedule", "--start", "yesterday"
    )
    assert bad_time.returncode == 2 and "ISO 8601" in bad_time.stderr
