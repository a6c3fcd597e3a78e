"""DBOS's check of each step runs in one statement without a transaction (issue 48).

The check's two SELECTs (is the workflow cancelled? is the step recorded?) ran in a
READ COMMITTED transaction, where each statement sees its own snapshot anyway; helix
runs them as one joined statement in autocommit, three round trips and a commit fewer
per DBOS step. These tests watch the real statements sent to psycopg (helix sends them
on connections of DBOS's pool without SQLAlchemy's `Connection`, DBOS through it) and
check that the answers are the same: recorded steps are found, a cancelled workflow stops.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from dbos import DBOS
from helpers import calls

from helix_dbos import tool
from helix_dbos.runtime.dbos import dbos_internals, step_bookkeeping
from helix_dbos.runtime.process.event_loop import on_target_loop


def text(content: str) -> dict:
    return {"type": "text", "content": content}


@contextmanager
def statements_seen(
    monkeypatch: pytest.MonkeyPatch, seen: Callable[[psycopg.Cursor, str, Any], None]
) -> Iterator[None]:
    """Call `seen(cursor, statement, parameters)` before every statement a psycopg
    cursor sends (from any thread), for the block's duration."""
    original = psycopg.Cursor.execute

    def execute(self: psycopg.Cursor, query: Any, params: Any = None, **kwargs: Any) -> Any:
        seen(self, str(query), params)
        return original(self, query, params, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(psycopg.Cursor, "execute", execute)
        yield


def in_a_transaction(cursor: psycopg.Cursor) -> bool:
    """Whether the statement about to be sent runs in a transaction (one open already,
    or one psycopg opens for it: a connection not in autocommit)."""
    connection = cursor.connection
    idle = connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    return not (idle and connection.autocommit)


@tool
def echo(text: str) -> str:
    """Say something back."""
    return text


async def test_each_step_check_runs_outside_a_transaction(helix, make_agent, mock_llm, monkeypatch):
    agent = make_agent(tools=[echo])
    mock_llm.add_responses(
        calls(("a", "echo", {"text": "1"})),
        calls(("b", "echo", {"text": "2"})),
        text("done"),
        agent=agent.name,
    )
    checks: list[tuple[str, bool]] = []  # (workflow id, a transaction was open)
    statuses: list[str] = []  # workflow ids whose check read the status in that statement

    def on_statement(cursor, statement, parameters) -> None:
        if not statement.lstrip().startswith("SELECT") or "dbos.operation_outputs" not in statement:
            return
        if "function_id" not in str(parameters):
            return
        ids = [v for v in (parameters or {}).values() if isinstance(v, str)]
        checks.extend((i, in_a_transaction(cursor)) for i in ids)
        statuses.extend(i for i in ids if "dbos.workflow_status" in statement)

    sys_db = dbos_internals._dbos_module._get_dbos_instance()._sys_db
    with statements_seen(monkeypatch, on_statement):
        handle = await helix.execute(agent, "go")
        result = await asyncio.wait_for(handle.result(), 60)
        assert result.status == "completed"
        mine = [in_tx for wf, in_tx in checks if wf == handle.workflow_id]
        # three LLM steps and two tool steps at least, each checked once
        assert len(mine) >= 5, checks
        assert not any(mine), f"a step's check ran inside a transaction: {mine}"
        # one statement a check: the record and the workflow's status (cancelled?) together
        assert statuses.count(handle.workflow_id) == len(mine)

        # Outside helix's workflows (an application's own DBOS workflow), DBOS's own
        # check, in its transaction, answers the same: recorded or not.
        checks.clear()
        assert sys_db.check_operation_execution(handle.workflow_id, 10_000, "x") is None
        assert checks == [(handle.workflow_id, True)]


async def test_a_cancelled_workflow_still_stops_at_its_next_check(helix, make_agent, mock_llm):
    release = asyncio.Event()
    ran: list[str] = []

    @tool
    async def slow(text: str) -> str:
        """Wait for the test."""
        ran.append(text)
        await release.wait()
        return text

    agent = make_agent(tools=[slow])
    mock_llm.add_responses(
        calls(("s1", "slow", {"text": "1"})),
        calls(("s2", "slow", {"text": "2"})),
        text("done"),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    for _ in range(400):
        if ran:
            break
        await asyncio.sleep(0.05)
    assert ran == ["1"]
    await on_target_loop(lambda: DBOS.cancel_workflow_async(handle.workflow_id))
    release.set()
    await helix.reconcile_runs()
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.status == "aborted"
    assert ran == ["1"], "no step ran after the cancellation"


async def test_each_step_record_is_one_statement_outside_a_transaction(
    helix, make_agent, mock_llm, monkeypatch
):
    agent = make_agent(tools=[echo])
    mock_llm.add_responses(calls(("a", "echo", {"text": "1"})), text("done"), agent=agent.name)
    records: list[tuple[str, bool]] = []  # (statement, a transaction was open)

    def on_statement(cursor, statement, parameters) -> None:
        if "dbos.operation_outputs" in statement and "INSERT" in statement:
            records.append((statement, in_a_transaction(cursor)))

    with statements_seen(monkeypatch, on_statement):
        handle = await helix.execute(agent, "go")
        assert (await asyncio.wait_for(handle.result(), 60)).status == "completed"
    mine = [in_tx for statement, in_tx in records if "FOR NO KEY UPDATE" in statement]
    assert len(mine) >= 3, records  # two LLM steps and a tool step, each recorded once
    assert not any(mine), "a step's record ran inside a transaction"


def _in_a_helix_workflow(call, *args, **kwargs):
    """`call(*args, **kwargs)` in the context a helix workflow's step runs in."""

    def marked():
        dbos_internals.checks_in_autocommit()
        return call(*args, **kwargs)

    return contextvars.copy_context().run(marked)


def _record_in_a_helix_workflow(sys_db, result, **kwargs) -> None:
    """`record_operation_result` as a helix workflow's step calls it."""
    _in_a_helix_workflow(sys_db.record_operation_result, result, **kwargs)


def probe_result(workflow_id: str, function_id: int) -> dict:
    """A step's result as DBOS hands it to `record_operation_result` (output `"x"`)."""
    return {
        "workflow_uuid": workflow_id,
        "function_id": function_id,
        "function_name": "probe",
        "output": '"x"',
        "error": None,
        "serialization": None,
        "started_at_epoch_ms": 1,
        "child_workflow_id": None,
    }


def probes_recorded(database_url: str, workflow_id: str) -> list[tuple]:
    """The workflow's step records written by these tests (function ids above 9,000)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute(
            "SELECT function_id, output, completed_at_epoch_ms, retention_timestamp > 0 "
            "FROM dbos.operation_outputs WHERE workflow_uuid = %s AND function_id > 9000 "
            "ORDER BY function_id",
            (workflow_id,),
        ).fetchall()


async def _completed_workflow(helix, make_agent, mock_llm) -> str:
    """The workflow id of a one-step run that completed."""
    agent = make_agent()
    mock_llm.add_responses(text("done"), agent=agent.name)
    handle = await helix.execute(agent, "go")
    assert (await asyncio.wait_for(handle.result(), 60)).status == "completed"
    return handle.workflow_id


async def test_a_record_keeps_dboss_fence_and_its_nondeterminism_check(
    helix, make_agent, mock_llm, database_url
):
    wid = await _completed_workflow(helix, make_agent, mock_llm)
    sys_db = dbos_internals._dbos_module._get_dbos_instance()._sys_db
    owner = "the-owner"  # an ended workflow has none: as if an execution held it
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE dbos.workflow_status SET owner_xid = %s WHERE workflow_uuid = %s",
            (owner, wid),
        )

    def result(function_id: int) -> dict:
        return probe_result(wid, function_id)

    # Another execution's token: refused, nothing written (DBOS's fence).
    with pytest.raises(step_bookkeeping.DBOSWorkflowConflictIDError):
        _record_in_a_helix_workflow(sys_db, result(9_001), owner_xid="not-the-owner")
    # The owner's write, then its retry with the same time: one row; another time: refused.
    _record_in_a_helix_workflow(sys_db, result(9_002), owner_xid=owner, completed_at_epoch_ms=5)
    _record_in_a_helix_workflow(sys_db, result(9_002), owner_xid=owner, completed_at_epoch_ms=5)
    with pytest.raises(step_bookkeeping.DBOSStepNondeterminismError):
        _record_in_a_helix_workflow(sys_db, result(9_002), owner_xid=owner, completed_at_epoch_ms=6)
    assert probes_recorded(database_url, wid) == [(9_002, '"x"', 5, True)]


async def test_the_one_statement_check_answers_as_dboss_own(helix, make_agent, mock_llm):
    """Recorded, unrecorded, another name, a missing workflow: the same answer or error."""
    wid = await _completed_workflow(helix, make_agent, mock_llm)
    sys_db = dbos_internals._dbos_module._get_dbos_instance()._sys_db
    steps = await asyncio.to_thread(lambda: DBOS.list_workflow_steps(wid))
    first = steps[0]

    def check(workflow_id: str, function_id: int, name: str) -> object:
        try:
            return sys_db.check_operation_execution(workflow_id, function_id, name)
        except (AssertionError, step_bookkeeping.DBOSUnexpectedStepError) as error:
            return type(error)

    def both(workflow_id: str, function_id: int, name: str) -> list[object]:
        """DBOS's own check (outside a helix workflow), then helix's."""
        args = (workflow_id, function_id, name)
        return [contextvars.copy_context().run(check, *args), _in_a_helix_workflow(check, *args)]

    recorded = both(wid, first["function_id"], first["function_name"])
    assert recorded[0] == recorded[1] and recorded[0] is not None
    assert both(wid, 10_000, "x") == [None, None]
    assert (
        both(wid, first["function_id"], "another") == [step_bookkeeping.DBOSUnexpectedStepError] * 2
    )
    assert both("no-such-workflow", 1, "x") == [AssertionError] * 2


async def test_a_check_and_a_record_on_a_lost_connection_are_retried_on_a_new_one(
    helix, make_agent, mock_llm, database_url
):
    """helix's statements go to psycopg on DBOS's pooled connections: one the server
    dropped is invalidated and the statement retried on a new one (DBOS's `db_retry`),
    as through SQLAlchemy, not raised to the workflow."""
    wid = await _completed_workflow(helix, make_agent, mock_llm)
    sys_db = dbos_internals._dbos_module._get_dbos_instance()._sys_db
    steps = await asyncio.to_thread(lambda: DBOS.list_workflow_steps(wid))
    first = steps[0]
    owner = "the-owner"

    def drop_every_other_connection() -> int:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE dbos.workflow_status SET owner_xid = %s WHERE workflow_uuid = %s",
                (owner, wid),
            )
            row = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'"
            ).fetchone()
        return int(row[0])

    def check() -> object:
        return sys_db.check_operation_execution(wid, first["function_id"], first["function_name"])

    def record() -> None:
        sys_db.record_operation_result(
            probe_result(wid, 9_100), owner_xid=owner, completed_at_epoch_ms=7
        )

    expected = await asyncio.to_thread(_in_a_helix_workflow, check)
    assert expected is not None
    # Every pooled connection is dead now: the first statement meets one.
    assert await asyncio.to_thread(drop_every_other_connection) >= 1
    assert await asyncio.to_thread(_in_a_helix_workflow, check) == expected
    assert await asyncio.to_thread(drop_every_other_connection) >= 1
    await asyncio.to_thread(_in_a_helix_workflow, record)
    assert probes_recorded(database_url, wid) == [(9_100, '"x"', 7, True)]
