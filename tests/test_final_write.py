"""A run's last write: the one-statement end (`end_step_and_run`) against the two
statements it replaces (`commit_step_rows`, then `end_run`), on twin runs of real
sessions, in every state a last write can meet: a head written before it, an abort that
got there first, a replay after a crash or a lost connection."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from helix_dbos import HelixDBOS
from helix_dbos.orchestration.types import LLMUsage, Message, ToolCall
from helix_dbos.runtime.steps.closing import close_run
from helix_dbos.store import repository as repo
from helix_dbos.store import run_bounds
from helix_dbos.store.database import sqlalchemy_url
from helix_dbos.store.driver import DriverConnection
from helix_dbos.store.repository import UsageRecord
from helix_dbos.store.run_bounds import EndedRun, end_run, end_step_and_run, open_new_session_run

AGENT = "final_write_agent"


@pytest.fixture
async def conn(helix: HelixDBOS, database_url: str) -> AsyncIterator[AsyncConnection]:
    """An autocommit connection of this test's own (the helix fixture made the schema)."""
    engine = create_async_engine(sqlalchemy_url(database_url))
    async with engine.connect() as connection:
        yield await connection.execution_options(isolation_level="AUTOCOMMIT")
    await engine.dispose()


async def on_psycopg(conn: AsyncConnection) -> DriverConnection:
    """`conn`'s own psycopg connection, under the driver helix's statements go through."""
    raw = (await conn.get_raw_connection()).driver_connection
    assert isinstance(raw, psycopg.AsyncConnection)
    return DriverConnection(raw)


async def open_run(conn: AsyncConnection) -> tuple[str, str]:
    session_id, run_id = f"ses_{uuid.uuid4().hex}", f"run_{uuid.uuid4().hex}"
    await open_new_session_run(
        conn,
        session_id=session_id,
        run_id=run_id,
        workflow_id=f"wf_{run_id}",
        agent_name=AGENT,
        state={"n": 0},
        max_steps=10,
        options={},
        messages=[Message(role="user", content="go")],
    )
    await repo.unlock_run_start(conn, run_id)
    return session_id, run_id


class LastStep:
    """One scripted last step, written to a given run."""

    def __init__(self, tools: int, events: int, state: bool, status: str) -> None:
        self.tools, self.events, self.state, self.status = tools, events, state, status

    def messages(self) -> list[Message]:
        calls = [ToolCall(id=f"c{i}", name="ping", arguments={"i": i}) for i in range(self.tools)]
        out = [Message(role="assistant", content="thinking", tool_calls=calls)]
        out += [
            Message(role="tool", content=f"pong {i}", tool_call_id=f"c{i}", tool_name="ping")
            for i in range(self.tools)
        ]
        return out

    def usage(self, run_id: str) -> list[UsageRecord]:
        llm = LLMUsage(model="m", input_tokens=100, output_tokens=7, cache_read_tokens=40)
        rows = [UsageRecord(f"{run_id}:3:llm", "llm", 3, llm=llm)]
        rows += [
            UsageRecord(f"{run_id}:3:tool:c{i}", "tool", 3, tool_name="ping", duration_ms=1.5)
            for i in range(self.tools)
        ]
        return rows

    def chunks(self, run_id: str) -> list[tuple[str, str, Any]]:
        return [
            (f"{run_id}:3:e{i}", "custom", {"event": "tick", "data": {"i": i}})
            for i in range(self.events)
        ]

    def end_chunks(self, run_id: str) -> list[tuple[str, str, Any]]:
        payload = {"output": {"k": 1}} if self.status == "completed" else {"error": "it broke"}
        return [(f"{run_id}:end:{self.status}", f"run_{self.status}", payload)]

    def step_args(self, session_id: str, run_id: str) -> dict[str, Any]:
        return {
            "session_id": session_id,
            "run_id": run_id,
            "agent_name": AGENT,
            "step": 3,
            "messages": self.messages(),
            "state": {"n": 3} if self.state else None,
            "usage": self.usage(run_id),
            "head_messages": 1,
        }

    def end_args(self) -> dict[str, Any]:
        error = "it broke" if self.status == "failed" else None
        output = {"k": 1} if self.status == "completed" else None
        return {"status": self.status, "output": output, "error": error, "stop_reason": None}

    async def write_head(self, conn: AsyncConnection, session_id: str, run_id: str) -> None:
        args = self.step_args(session_id, run_id)
        await repo.commit_step_head(
            conn,
            **{k: args[k] for k in ("session_id", "run_id", "agent_name", "step")},
            messages=args["messages"][:1],
            usage=args["usage"][:1],
        )

    async def two_statements(self, conn: AsyncConnection, session_id: str, run_id: str) -> EndedRun:
        await repo.commit_step_rows(
            conn, **self.step_args(session_id, run_id), chunks=self.chunks(run_id)
        )
        return await end_run(
            conn,
            session_id=session_id,
            run_id=run_id,
            agent_name=AGENT,
            step=3,
            **self.end_args(),
            chunks=self.end_chunks(run_id),
            notify=False,
        )

    async def one_statement(self, conn: AsyncConnection, session_id: str, run_id: str) -> EndedRun:
        return await end_step_and_run(
            await on_psycopg(conn),  # as runs send it: straight to psycopg
            **self.step_args(session_id, run_id),
            step_chunks=self.chunks(run_id),
            **self.end_args(),
            end_chunks=self.end_chunks(run_id),
            notify=False,
        )


async def snapshot(conn: AsyncConnection, session_id: str, run_id: str) -> dict[str, Any]:
    """What users read, with the run's own ids taken out so twins compare equal."""

    async def rows(query: str) -> list[tuple[Any, ...]]:
        result = await conn.exec_driver_sql(query, (session_id, run_id))
        return [tuple(str(v).replace(run_id, "R") for v in row) for row in result]

    return {
        "messages": await rows(
            "SELECT seq, role, content, tool_calls, tool_call_id, tool_name FROM helix.messages "
            "WHERE session_id = %s AND run_id = %s ORDER BY seq"
        ),
        "usage": await rows(
            "SELECT usage_id, kind, step, model, input_tokens, output_tokens, cache_read_tokens, "
            "tool_name, duration_ms FROM helix.usage WHERE session_id = %s AND run_id = %s "
            "ORDER BY usage_id"
        ),
        "chunks": await rows(
            "SELECT chunk_key, type, payload, step FROM helix.stream_chunks "
            "WHERE session_id = %s AND run_id = %s ORDER BY seq"
        ),
        "run": await rows(
            "SELECT status, output, error, step_count, committed_step, committed_head, "
            "waiting_for, finished_at IS NOT NULL, stop_reason FROM helix.runs "
            "WHERE session_id = %s AND run_id = %s"
        ),
        "session": await rows(
            "SELECT s.status, s.output, s.error, s.state, s.message_seq, s.turn_count, "
            "s.chunk_seq >= (SELECT max(seq) FROM helix.stream_chunks c "
            "WHERE c.session_id = s.session_id) FROM helix.sessions s "
            "WHERE s.session_id = %s AND CAST(%s AS text) IS NOT NULL"
        ),
    }


async def tool_results(conn: AsyncConnection, session_id: str) -> dict[str, str]:
    """Each call's one result (asserting it has no second)."""
    rows = list(
        await conn.exec_driver_sql(
            "SELECT tool_call_id, content FROM helix.messages WHERE session_id = %s "
            "AND role = 'tool' ORDER BY seq",
            (session_id,),
        )
    )
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)), f"a call with two results: {ids}"
    return {r[0]: str(r[1]) for r in rows}


@pytest.mark.parametrize("one_statement", [True, False], ids=["end_step_and_run", "step_rows"])
async def test_an_abort_committing_while_the_last_write_waits_leaves_one_result_per_call(
    conn: AsyncConnection, database_url: str, one_statement: bool
) -> None:
    """The abort holds the run's row (its transaction has paired the head's calls) when
    the step's late write starts: the write's statement snapshot predates the abort's
    commit, so only what it reads under the row lock can tell it the calls are paired."""
    step = LastStep(2, 1, True, "completed")
    session_id, run_id = await open_run(conn)
    await step.write_head(conn, session_id, run_id)
    engine = create_async_engine(sqlalchemy_url(database_url))
    try:
        async with engine.connect() as aborting, aborting.begin():
            assert await close_run(aborting, session_id, run_id, "Run aborted", "aborted")
            write = asyncio.ensure_future(
                step.one_statement(conn, session_id, run_id)
                if one_statement
                else step.two_statements(conn, session_id, run_id)
            )
            await asyncio.sleep(0.5)
            assert not write.done()  # it waits for the abort's row lock
        ended = await write
    finally:
        await engine.dispose()
    assert not ended.ended
    results = await tool_results(conn, session_id)
    assert sorted(results) == ["c0", "c1"]
    assert all("Run aborted" in r for r in results.values())


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    tools=st.integers(0, 3),
    events=st.integers(0, 2),
    state=st.booleans(),
    status=st.sampled_from(["completed", "failed"]),
    head_before=st.booleans(),
    aborted_before=st.booleans(),
    replays=st.integers(0, 2),
)
async def test_the_one_statement_end_writes_what_the_two_statements_wrote(
    conn: AsyncConnection,
    tools: int,
    events: int,
    state: bool,
    status: str,
    head_before: bool,
    aborted_before: bool,
    replays: int,
) -> None:
    step = LastStep(tools, events, state, status)
    twins = [await open_run(conn), await open_run(conn)]
    for session_id, run_id in twins:
        if head_before:  # a slow step's head, written while its tools ran
            await step.write_head(conn, session_id, run_id)
        if aborted_before:  # an abort closed the run (pairing its calls) before its last write
            assert await close_run(conn, session_id, run_id, "Run aborted", "aborted")
    (old_sid, old_rid), (new_sid, new_rid) = twins
    for attempt in range(1 + replays):  # a replay writes nothing and ends nothing
        old = await step.two_statements(conn, old_sid, old_rid)
        new = await step.one_statement(conn, new_sid, new_rid)
        assert new == old
        assert new.ended is (attempt == 0 and not aborted_before)
        assert new.usage["llm_calls"] == 1 and new.usage["tool_calls"] == tools
        assert new.usage["input_tokens"] == 100 and new.usage["cache_read_tokens"] == 40
    after_old = await snapshot(conn, old_sid, old_rid)
    after_new = await snapshot(conn, new_sid, new_rid)
    assert after_new == after_old
    # what the twins hold is what the step said, once: exactly one result per call,
    # the tool's own unless an abort paired the call first (issue 46)
    assert len(after_new["messages"]) == 2 + tools  # the input, the model, the results
    results = await tool_results(conn, new_sid)
    assert sorted(results) == [f"c{i}" for i in range(tools)]
    paired_by_abort = aborted_before and head_before
    assert all(("pong" not in r) is paired_by_abort for r in results.values())
    assert [c[1] for c in after_new["chunks"]][-1] == f"run_{status}"
    expected_status = "aborted" if aborted_before else status
    assert after_new["run"][0][0] == expected_status
    assert after_new["session"][0][0] == expected_status
    assert after_new["session"][0][-1] == "True"  # the chunk counter is past every chunk


async def test_the_last_write_is_one_short_call_of_a_function_the_migration_made(
    conn: AsyncConnection,
) -> None:
    """The statement a run sends is a call of `helix.end_step_and_run` (migrations/0020),
    not SQL glued in Python; the function is plain PL/pgSQL, readable in the database."""
    sent = run_bounds._END_STEP_AND_RUN.text
    assert sent.startswith("SELECT * FROM helix.end_step_and_run(") and "WITH" not in sent
    row = (
        await conn.exec_driver_sql(
            "SELECT l.lanname, pg_get_function_arguments(p.oid) FROM pg_proc p "
            "JOIN pg_language l ON l.oid = p.prolang JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'helix' AND p.proname = 'end_step_and_run'"
        )
    ).one()
    assert row[0] == "plpgsql" and "OUT ended boolean, OUT llm_calls bigint" in row[1]
