"""The resume of a wait for a human, one statement from workflow code, no step
(store/wait_resume.py): run again, as a replay does after a crash at any later point of
the run, it changes nothing, not even a run that waits again since."""

from __future__ import annotations

import asyncio

import pytest
from dbos import DBOS
from helpers import approval_gated_delete, pending_calls, sql

from helix_dbos.runtime.dbos import dbos_internals
from helix_dbos.runtime.waits.hitl import Resolution
from helix_dbos.store.wait_resume import WaitResumed, resume_wait


def _gated_agent(make_agent, mock_llm):
    agent = make_agent(tools=[approval_gated_delete()])
    mock_llm.add_responses(
        {
            "type": "tool_calls",
            "tool_calls": [
                {"id": "d1", "name": "delete_file", "arguments": {"path": "/a"}},
                {"id": "d2", "name": "delete_file", "arguments": {"path": "/b"}},
            ],
        },
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    return agent


async def _waiting_run(helix, make_agent, mock_llm):
    """A run waiting for the approval of two calls, `d1` and `d2`: (handle, RunInfo)."""
    handle = await helix.execute(_gated_agent(make_agent, mock_llm), "delete both")
    await pending_calls(helix, handle.session_id, count=2)
    return handle, await helix.get_run(handle.run_id)


def _rows(database_url: str, run_id: str, session_id: str):
    calls = sql(
        database_url,
        "SELECT tool_call_id, status, reason, resolved_at FROM helix.tool_calls "
        "WHERE run_id = %s ORDER BY tool_call_id",
        run_id,
    )
    resumed = sql(
        database_url,
        "SELECT seq, payload FROM helix.stream_chunks WHERE run_id = %s AND type = 'run_resumed'",
        run_id,
    )
    run = sql(database_url, "SELECT status, waiting_for FROM helix.runs WHERE run_id = %s", run_id)
    session = sql(
        database_url, "SELECT status FROM helix.sessions WHERE session_id = %s", session_id
    )
    return calls, resumed, run[0], session[0][0]


async def _answer_and_finish(helix, handle, workflow_id: str) -> None:
    """Answer the workflow's wait around the API (its calls are no longer pending); it
    resumes (its own resume finds nothing left to do) and completes."""
    for call_id in ("d1", "d2"):
        await DBOS.send_async(
            workflow_id, {"tool_call_id": call_id, "approved": True}, "helix.approval"
        )
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed"


async def _resume_d1(helix, run, resolution: Resolution, owner=None) -> WaitResumed:
    """The resume of call `d1` alone, as the run's workflow would send it."""
    chunk = (f"{run.run_id}:resumed:d1", "run_resumed", {"tool_call_ids": ["d1"]})
    return await helix.runtime.on_connection(
        "test",
        lambda conn: resume_wait(
            conn, run.session_id, run.run_id, run.agent_name, 1, [resolution], chunk, owner
        ),
        wait=False,
    )


async def test_a_resume_run_twice_resolves_and_writes_once(
    helix, make_agent, mock_llm, database_url
):
    handle, run = await _waiting_run(helix, make_agent, mock_llm)
    # A reason PostgreSQL would refuse as it is (NUL, a lone surrogate) is stored cleaned.
    resolutions = [
        Resolution("d1", "approved"),
        Resolution("d2", "denied", reason="no\x00t this \ud800one"),
    ]
    chunk = (f"{run.run_id}:resumed:d1,d2", "run_resumed", {"tool_call_ids": ["d1", "d2"]})

    async def resume() -> WaitResumed:
        return await helix.runtime.on_connection(
            "test",
            lambda conn: resume_wait(
                conn, run.session_id, run.run_id, run.agent_name, 1, resolutions, chunk
            ),
        )

    assert await resume() == WaitResumed(True, frozenset({"d1", "d2"}))
    first = _rows(database_url, run.run_id, run.session_id)
    calls, resumed, run_row, session_status = first
    assert [(c[0], c[1]) for c in calls] == [("d1", "approved"), ("d2", "denied")]
    assert "\x00" not in calls[1][2] and calls[1][2].startswith("no")
    assert all(c[3] is not None for c in calls)
    assert len(resumed) == 1 and resumed[0][1] == {"tool_call_ids": ["d1", "d2"]}
    assert run_row == ("running", None) and session_status == "running"

    # Again, with other answers: nothing is pending any more, so nothing is resumed.
    resolutions = [Resolution("d1", "denied"), Resolution("d2", "approved")]
    assert await resume() == WaitResumed(False, frozenset())  # a replay: logs nothing
    assert _rows(database_url, run.run_id, run.session_id) == first

    # The run waits again (a later step's gate): the replayed resume leaves it waiting.
    sql(
        database_url,
        "UPDATE helix.runs SET status = 'waiting', waiting_for = 'approval' WHERE run_id = %s",
        run.run_id,
    )
    sql(
        database_url,
        "UPDATE helix.sessions SET status = 'waiting' WHERE session_id = %s",
        run.session_id,
    )
    assert await resume() == WaitResumed(False, frozenset())
    calls, resumed, run_row, session_status = _rows(database_url, run.run_id, run.session_id)
    assert (calls, resumed) == first[:2]
    assert run_row == ("waiting", "approval") and session_status == "waiting"
    sql(
        database_url,
        "UPDATE helix.runs SET status = 'running', waiting_for = NULL WHERE run_id = %s",
        run.run_id,
    )

    await _answer_and_finish(helix, handle, run.workflow_id)
    calls, resumed, _, _ = _rows(database_url, run.run_id, run.session_id)
    assert [(c[0], c[1]) for c in calls] == [("d1", "approved"), ("d2", "denied")]
    assert len(resumed) == 1  # the run's own resume wrote nothing more


async def test_a_resume_of_an_ended_run_resolves_its_calls_but_does_not_revive_it(
    helix, make_agent, mock_llm, database_url
):
    handle, run = await _waiting_run(helix, make_agent, mock_llm)
    # Ended by hand while its workflow still waits (what an abort's commit looks like
    # to a resume that comes after it).
    sql(database_url, "UPDATE helix.runs SET status = 'aborted' WHERE run_id = %s", run.run_id)
    resumed = await _resume_d1(helix, run, Resolution("d1", "interrupted", reason="aborted"))
    assert resumed == WaitResumed(False, frozenset({"d1"}))
    calls, chunks, run_row, _ = _rows(database_url, run.run_id, run.session_id)
    assert [(c[0], c[1]) for c in calls] == [("d1", "interrupted"), ("d2", "pending")]
    assert chunks == [] and run_row[0] == "aborted"
    sql(database_url, "UPDATE helix.runs SET status = 'waiting' WHERE run_id = %s", run.run_id)
    await _answer_and_finish(helix, handle, run.workflow_id)


async def test_a_resume_by_an_execution_that_lost_the_workflow_writes_nothing(
    helix, make_agent, mock_llm, database_url
):
    """Fenced: another execution owns the workflow now (a new ownership token)."""
    handle, run = await _waiting_run(helix, make_agent, mock_llm)
    before = _rows(database_url, run.run_id, run.session_id)
    with pytest.raises(dbos_internals.WorkflowNotOwnedError):
        await _resume_d1(
            helix, run, Resolution("d1", "approved"), (run.workflow_id, "another-execution")
        )
    assert _rows(database_url, run.run_id, run.session_id) == before
    await _answer_and_finish(helix, handle, run.workflow_id)
