"""Scheduled agents (issue 34) in one process: firings become runs (their own sessions,
or turns of one session), pause, resume, delete, backfill, trigger and bad input."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from helpers import sql, wait_for

from helix_dbos.errors import InvalidInputError, ScheduleNotFoundError

pytest_plugins = ["double_texting_support"]  # the gate and the scripted model

EVERY_SECOND = "* * * * * *"


def firings(database_url: str, name: str) -> list[tuple]:
    return sql(
        database_url,
        "SELECT f.firing_id, f.session_id, f.run_id, f.outcome, r.status "
        "FROM helix.schedule_firings f LEFT JOIN helix.runs r USING (run_id) "
        "WHERE f.schedule_name = %s ORDER BY f.scheduled_at",
        name,
    )


async def test_each_firing_is_a_run_in_a_session_of_its_own(
    helix, make_agent, scripted, database_url
):
    agent = make_agent()
    info = await helix.schedule(agent, EVERY_SECOND, input="tick", name=f"{agent.name}-own")
    assert (info.agent, info.status, info.cron) == (agent.name, "active", EVERY_SECOND)
    wait_for(lambda: len(firings(database_url, info.name)) >= 2, timeout=60)
    await helix.delete_schedule(info.name)
    rows = firings(database_url, info.name)
    assert len({r[1] for r in rows}) == len(rows)  # one session per firing
    wait_for(lambda: all(r[4] == "completed" for r in firings(database_url, info.name)))
    for _, session_id, run_id, outcome, _ in rows:
        assert outcome == "started"
        messages = sql(
            database_url,
            "SELECT role, content FROM helix.messages WHERE session_id = %s ORDER BY seq",
            session_id,
        )
        assert messages == [("user", "tick"), ("assistant", "re: tick")]
        runs = sql(database_url, "SELECT run_id FROM helix.runs WHERE session_id = %s", session_id)
        assert runs == [(run_id,)]
    with pytest.raises(ScheduleNotFoundError):
        await helix.get_schedule(info.name)
