"""Scheduled agents (issue 34) in one process: firings become runs (their own sessions,
or turns of one session), pause, resume, delete, backfill, trigger and bad input."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from helpers import sql, wait_for
from schedule_support import firings_run_here  # noqa: F401 - autouse fixture

from helix_dbos.errors import (
    InvalidInputError,
    ScheduleNotFoundError,
    SessionAgentMismatchError,
)

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
    info = await helix.schedules.create(agent, EVERY_SECOND, input="tick", name=f"{agent.name}-own")
    assert (info.agent, info.status, info.cron) == (agent.name, "active", EVERY_SECOND)
    wait_for(lambda: len(firings(database_url, info.name)) >= 2, timeout=60)
    await helix.schedules.delete(info.name)
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
        await helix.schedules.get(info.name)


def wait_until_quiet(database_url: str, name: str, quiet_seconds: float = 6.0) -> None:
    """Until no firing of `name` was recorded for `quiet_seconds`: a pause or delete is
    seen at the scheduler's next poll (every 5 s at most)."""
    last, since = len(firings(database_url, name)), time.monotonic()
    while time.monotonic() - since < quiet_seconds:
        time.sleep(0.25)
        now = len(firings(database_url, name))
        if now != last:
            last, since = now, time.monotonic()


def session_runs(database_url: str, session_id: str) -> list[tuple]:
    return sql(
        database_url,
        "SELECT r.run_id, r.status, m.content FROM helix.runs r JOIN helix.messages m "
        "ON m.run_id = r.run_id AND m.role = 'user' WHERE r.session_id = %s ORDER BY r.turn",
        session_id,
    )


async def test_firings_appended_to_a_busy_session_wait_behind_its_run(
    helix, make_agent, scripted, gate, database_url
):
    agent = make_agent(tools=[gate.tool])
    first = await helix.execute(agent, "hold")
    await gate.wait_entered()
    sid = first.session_id
    name = f"{agent.name}-append"
    info = await helix.schedules.create(agent, EVERY_SECOND, input="tick", session=sid, name=name)
    assert info.session_id == sid and info.multitask_strategy == "enqueue"
    wait_for(lambda: len(firings(database_url, name)) >= 2)
    queued = firings(database_url, name)
    assert {r[3] for r in queued} == {"queued"}  # the live run holds the session
    assert {r[1] for r in queued} == {sid}
    await helix.schedules.pause(name)
    gate.release.set()
    assert (await first.result()).status == "completed"
    await helix.schedules.delete(name)

    def settled() -> bool:
        rows = firings(database_url, name)
        return all(r[4] == "completed" for r in rows) and not sql(
            database_url,
            "SELECT 1 FROM helix.queued_messages WHERE session_id = %s AND status = 'queued'",
            sid,
        )

    wait_until_quiet(database_url, name)
    wait_for(settled)
    rows = firings(database_url, name)
    runs = session_runs(database_url, sid)
    # The held run, then one run per firing, each started once (in the order the firings
    # stored their messages: two firings may execute at once).
    assert runs[0] == (first.run_id, "completed", "hold")
    assert sorted(r[0] for r in runs[1:]) == sorted(r[2] for r in rows)
    assert all(r[1:] == ("completed", "tick") for r in runs[1:])


async def test_reject_skips_a_firing_while_the_session_is_busy(
    helix, make_agent, scripted, gate, database_url
):
    agent = make_agent(tools=[gate.tool])
    first = await helix.execute(agent, "hold")
    await gate.wait_entered()
    name = f"{agent.name}-reject"
    await helix.schedules.create(
        agent,
        EVERY_SECOND,
        input="tick",
        session=first.session_id,
        name=name,
        multitask_strategy="reject",
    )
    wait_for(lambda: len(firings(database_url, name)) >= 2)
    await helix.schedules.delete(name)
    rejected = [r for r in firings(database_url, name) if r[3] == "rejected"]
    assert len(rejected) >= 2 and all(r[2] is None for r in rejected)
    gate.release.set()
    assert (await first.result()).status == "completed"
    unrelated = sql(  # every stored message is a firing's, and no rejected firing stored one
        database_url,
        "SELECT count(*) FROM helix.queued_messages q WHERE q.session_id = %s AND NOT EXISTS "
        "(SELECT 1 FROM helix.schedule_firings f WHERE f.message_id = q.message_id "
        "AND f.outcome <> 'rejected')",
        first.session_id,
    )
    assert unrelated == [(0,)]
    assert all(r[3] == "rejected" or r[2] is not None for r in firings(database_url, name))


async def test_backfill_fires_each_missed_firing_once(helix, make_agent, scripted, database_url):
    agent = make_agent()
    name = f"{agent.name}-yearly"
    await helix.schedules.create(agent, "0 0 1 1 *", input="new year", name=name)
    start = datetime(2022, 6, 1, tzinfo=timezone.utc)
    end = datetime(2025, 6, 1, tzinfo=timezone.utc)
    first = await helix.schedules.backfill(name, start, end)
    second = await helix.schedules.backfill(name, start, end)
    assert first == second and len(first) == 3  # 2023, 2024 and 2025
    wait_for(lambda: len(firings(database_url, name)) == 3)
    wait_for(lambda: all(r[4] == "completed" for r in firings(database_url, name)))
    third = await helix.schedules.backfill(name, start - timedelta(days=400), end)
    assert len(third) == 4
    wait_for(lambda: len(firings(database_url, name)) == 4)
    rows = sql(
        database_url,
        "SELECT extract(year FROM f.scheduled_at)::int, count(r.run_id) "
        "FROM helix.schedule_firings f JOIN helix.runs r USING (run_id) "
        "WHERE f.schedule_name = %s GROUP BY 1 ORDER BY 1",
        name,
    )
    assert rows == [(2022, 1), (2023, 1), (2024, 1), (2025, 1)]
    recorded = await helix.schedules.firings(name)
    assert [f.scheduled_at.year for f in recorded] == [2025, 2024, 2023, 2022]
    await helix.schedules.delete(name)


async def test_trigger_fires_now_and_schedule_again_keeps_the_status(
    helix, make_agent, scripted, database_url
):
    agent = make_agent()
    name = f"{agent.name}-manual"
    await helix.schedules.create(agent, "0 0 1 1 *", input="now", name=name)
    paused = await helix.schedules.pause(name)
    assert paused.status == "paused" and paused.next_fire_at is None
    again = await helix.schedules.create(agent, "0 12 * * *", input="noon", name=name)
    assert (again.status, again.cron, again.input) == ("paused", "0 12 * * *", "noon")
    firing_id = await helix.schedules.trigger(name)
    wait_for(lambda: len(firings(database_url, name)) == 1)
    wait_for(lambda: firings(database_url, name)[0][4] == "completed")
    [(fid, sid, run_id, outcome, _)] = firings(database_url, name)
    assert (fid, outcome) == (firing_id, "started")
    assert session_runs(database_url, sid) == [(run_id, "completed", "noon")]
    resumed = await helix.schedules.resume(name)
    assert resumed.status == "active" and resumed.next_fire_at is not None
    assert [s.name for s in await helix.schedules.list(agent)] == [name]
    assert name in [s.name for s in await helix.schedules.list()]
    await helix.schedules.delete(name)
    assert await helix.schedules.list(agent) == []


async def test_bad_schedules_are_refused_with_a_clear_error(helix, make_agent):
    agent = make_agent()
    with pytest.raises(InvalidInputError, match="cron"):
        await helix.schedules.create(agent, "every minute")
    with pytest.raises(InvalidInputError, match="multitask_strategy"):
        await helix.schedules.create(agent, "* * * * *", multitask_strategy="interrupt")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="time zone"):
        await helix.schedules.create(agent, "* * * * *", timezone="Mars/Olympus")
    with pytest.raises(InvalidInputError, match="name"):
        await helix.schedules.create(agent, "* * * * *", name="a/b")
    with pytest.raises(LookupError):
        await helix.schedules.create("no-such-agent", "* * * * *")
    for call in (helix.schedules.get, helix.schedules.pause, helix.schedules.delete):
        with pytest.raises(ScheduleNotFoundError):
            await call("no-such-schedule")
    with pytest.raises(ScheduleNotFoundError):
        await helix.schedules.backfill(
            "no-such-schedule", datetime(2020, 1, 1, tzinfo=timezone.utc)
        )
    assert await helix.schedules.list(agent) == []


async def test_a_schedule_on_a_new_session_creates_it_and_another_agents_is_refused(
    helix, make_agent, scripted
):
    agent, other = make_agent(), make_agent()
    sid = f"ses_{agent.name}"
    await helix.schedules.create(agent, "0 0 1 1 *", session=sid, name=f"{agent.name}-s")
    session = await helix.get_session(sid)
    assert (session.agent_name, session.status) == (agent.name, "idle")
    with pytest.raises(SessionAgentMismatchError):
        await helix.schedules.create(other, "0 0 1 1 *", session=sid, name=f"{other.name}-s")
    assert await helix.schedules.list(other) == []
    await helix.schedules.delete(f"{agent.name}-s")
