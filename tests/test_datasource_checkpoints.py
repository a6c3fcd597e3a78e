"""DBOS's datasource checkpoints of a run's workflow go with its final write: the
statement that ends the run deletes them under its owner guard, so DBOS does not at
the workflow's end (a transaction and an ownership read fewer on every run that waited
for a human). A datasource transaction after that write lists the datasource again,
and DBOS deletes its checkpoint as before."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from helpers import approval_gated_delete, pending_calls, sql
from sqlalchemy import event

from helix_dbos.runtime.sessions.session_queue import QueuedRunHandle

DBOS_DELETE = "DELETE FROM dbos.datasource_outputs"


@pytest.fixture
def dbos_deletes(helix) -> Iterator[list[str]]:
    """The workflow ids DBOS's own checkpoint deletes name, on helix's engine (the
    datasource's)."""
    seen: list[str] = []

    def on_statement(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.startswith(DBOS_DELETE):
            values = parameters.values() if isinstance(parameters, dict) else parameters
            seen.extend(v for v in values if isinstance(v, str))

    engine = helix.runtime.engine.sync_engine
    event.listen(engine, "before_cursor_execute", on_statement)
    yield seen
    event.remove(engine, "before_cursor_execute", on_statement)


def _gated(make_agent, mock_llm, ran: list[str], runs: int = 1):
    agent = make_agent(tools=[approval_gated_delete(ran)])
    call = {"id": "d1", "name": "delete_file", "arguments": {"path": "/tmp/x"}}
    for _ in range(runs):
        mock_llm.add_responses(
            {"type": "tool_calls", "tool_calls": [call]},
            {"type": "text", "content": "done"},
            agent=agent.name,
        )
    return agent


def _checkpoints(database_url: str, workflow_id: str) -> int:
    rows = sql(
        database_url,
        "SELECT count(*) FROM dbos.datasource_outputs WHERE workflow_id = %s",
        workflow_id,
    )
    return int(rows[0][0])


async def _waiting(helix, session_id: str) -> str:
    """The id of the call the session's run waits on (a second run's is re-keyed)."""
    return (await pending_calls(helix, session_id))[0].tool_call_id


@pytest.mark.parametrize("parked", [False, True])
async def test_the_final_write_deletes_the_checkpoints_dbos_would(
    helix, make_agent, mock_llm, database_url, dbos_deletes, parked
):
    """In a run that waited in memory, and in one parked and brought back, whose
    replay of the wait's transaction lists the datasource for DBOS again."""
    ran: list[str] = []
    agent = _gated(make_agent, mock_llm, ran)
    handle = await helix.execute(agent, "delete it")
    await _waiting(helix, handle.session_id)
    workflow_id = (await helix.get_run(handle.run_id)).workflow_id
    assert _checkpoints(database_url, workflow_id) >= 1  # the wait's datasource transaction
    parking = helix.runtime.parking
    resumed = parking.resumed_total
    if parked:
        for _ in range(1200):
            if parking.in_memory:
                break
            await asyncio.sleep(0.05)
        assert parking.park_all() == 1
    await helix.approve(handle.session_id, "d1")
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and ran == ["/tmp/x"]
    assert parking.resumed_total - resumed == (1 if parked else 0)
    assert _checkpoints(database_url, workflow_id) == 0
    assert workflow_id not in dbos_deletes  # the final write took them: DBOS had none to


async def test_a_transaction_after_the_final_write_is_deleted_by_dbos(
    helix, make_agent, mock_llm, database_url, dbos_deletes
):
    """The ending run's workflow opens the next queued message's run, in a datasource
    transaction of its own after the final write: DBOS deletes that checkpoint."""
    ran: list[str] = []
    agent = _gated(make_agent, mock_llm, ran, runs=2)
    first = await helix.execute(agent, "delete it")
    await _waiting(helix, first.session_id)
    workflow_id = (await helix.get_run(first.run_id)).workflow_id
    second = await helix.execute(
        agent, "and again", session_id=first.session_id, multitask_strategy="enqueue"
    )
    assert isinstance(second, QueuedRunHandle)
    await helix.approve(first.session_id, "d1")
    assert (await asyncio.wait_for(first.result(), 60)).status == "completed"
    for _ in range(1200):  # the first workflow returns after it opened the second run
        if workflow_id in dbos_deletes:
            break
        await asyncio.sleep(0.05)
    assert workflow_id in dbos_deletes
    assert _checkpoints(database_url, workflow_id) == 0
    started = await asyncio.wait_for(second.started(), 60)
    assert started is not None
    call_id = await _waiting(helix, started.session_id)
    await helix.approve(started.session_id, call_id)
    assert (await asyncio.wait_for(started.result(), 60)).status == "completed"
    assert ran == ["/tmp/x", "/tmp/x"]
