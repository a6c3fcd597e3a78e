"""A pending call does not time out when a late notification wakes its `recv` (patch
`helix.recv_woken_early`, runtime/waits/hitl.py).

DBOS's `recv` takes a message it finds stored when it starts, without its notification;
that notification, sent after the sender's commit, then wakes the next `recv` on the
topic, which finds nothing to take and returns nothing before its timeout. Seen in CI
under load: an approval answered a moment later had already "timed out". Here the late
notification is sent by hand, as DBOS's listener would hear it.

A run recorded before the patch (every empty `recv` a timeout, the next step recorded
after it) replays its old reading.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from dbos import DBOS
from helpers import (
    approval_gated_delete,
    calls,
    client_confirm,
    park_waiting_runs,
    wait_until_waiting,
)

from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.process.patches import RECV_WOKEN_EARLY
from helix_dbos.runtime.waits import hitl
from helix_dbos.store.database import libpq_url

MARKER = f"DBOS.patch-{RECV_WOKEN_EARLY}"


async def _steps(workflow_id: str) -> list[str]:
    steps = await on_target_loop(lambda: DBOS.list_workflow_steps_async(workflow_id))
    return [str(s["function_name"]) for s in steps]


async def _until_step(workflow_id: str, name: str, count: int = 1) -> list[str]:
    for _ in range(600):
        steps = await _steps(workflow_id)
        if steps.count(name) >= count:
            return steps
        await asyncio.sleep(0.05)
    raise AssertionError(f"{workflow_id} never recorded {count} {name}: {steps}")


def _late_notification(database_url: str, workflow_id: str, topic: str) -> None:
    """What DBOS's listener hears for a message already taken: a wake-up, nothing to take."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        conn.execute(
            "SELECT pg_notify('dbos_notifications_channel', %s)", (f"{workflow_id}::{topic}",)
        )


async def test_a_late_notification_leaves_the_call_waiting(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    agent = make_agent(tools=[approval_gated_delete(ran)])
    mock_llm.add_responses(
        calls(("a1", "delete_file", {"path": "a"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    await wait_until_waiting(helix, handle.session_id)
    for woken in (1, 2):
        _late_notification(database_url, handle.workflow_id, hitl.TOPICS["approval"])
        # Woken with nothing to take, the run read the clock and waits on.
        steps = await _until_step(handle.workflow_id, "helix.wait_clock", count=woken)
        assert steps.count(MARKER) == woken
        await _until_step(handle.workflow_id, "DBOS.sleep", count=woken + 1)  # its next recv
    pending = await wait_until_waiting(helix, handle.session_id)
    assert [p.tool_call_id for p in pending] == ["a1"]
    await helix.approve(handle.session_id, "a1")
    result = await handle.result()
    assert result.status == "completed" and ran == ["a"]
    [call] = [m for m in await helix.get_messages(handle.session_id) if m.role == "tool"]
    assert not call.is_error and call.content == "deleted a"


async def test_a_deadline_that_passed_still_times_the_call_out(helix, make_agent, mock_llm):
    agent = make_agent(tools=[client_confirm(0.5)])
    mock_llm.add_responses(
        calls(("c1", "confirm", {"question": "sure?"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "ask")
    assert (await handle.result()).status == "completed"
    [call] = [m for m in await helix.get_messages(handle.session_id) if m.role == "tool"]
    assert call.is_error and "timed out" in call.content.lower()
    steps = await _steps(handle.workflow_id)
    assert steps.count(MARKER) == 1 and steps.count("helix.wait_clock") == 1


async def test_a_run_recorded_before_the_patch_replays_its_timeout(
    helix, make_agent, mock_llm, monkeypatch: pytest.MonkeyPatch
):
    ran: list[str] = []
    agent = make_agent(tools=[client_confirm(0.5), approval_gated_delete(ran)])
    mock_llm.add_responses(
        calls(("c1", "confirm", {"question": "sure?"})),
        calls(("a1", "delete_file", {"path": "a"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )

    async def before_the_patch(deadline: float) -> bool:
        return False  # every empty `recv` a timeout, nothing recorded for it

    monkeypatch.setattr(hitl, "_woken_early", before_the_patch)
    handle = await helix.execute(agent, "ask, then delete")
    for _ in range(600):  # c1 timed out; a1 waits
        pending = await wait_until_waiting(helix, handle.session_id)
        if [p.tool_call_id for p in pending] == ["a1"]:
            break
        await asyncio.sleep(0.05)
    # The waiting row is visible once `helix.suspend` committed; a1's `recv` records its
    # timer (`DBOS.sleep`) a moment later: the history to replay ends there.
    for _ in range(200):
        recorded = await _steps(handle.workflow_id)
        if recorded[-1] == "DBOS.sleep":
            break
        await asyncio.sleep(0.05)
    monkeypatch.undo()  # the upgrade

    # A replay of the whole history on the patched code: the parked wait lets go of its
    # execution, and the answer resumes it from the first step.
    await park_waiting_runs(helix)
    await helix.approve(handle.session_id, "a1")
    result = await handle.result()
    assert result.status == "completed" and ran == ["a"]
    steps = await _steps(handle.workflow_id)
    # Replayed as recorded (up to a1's `recv`, recorded when it returned, before its timer).
    assert recorded[-1] == "DBOS.sleep"
    assert steps[: len(recorded) - 1] == recorded[:-1]
    assert MARKER not in steps and "helix.wait_clock" not in steps
    tool_rows = [m for m in await helix.get_messages(handle.session_id) if m.role == "tool"]
    assert [m.tool_call_id for m in tool_rows] == ["c1", "a1"]
    assert tool_rows[0].is_error and not tool_rows[1].is_error
