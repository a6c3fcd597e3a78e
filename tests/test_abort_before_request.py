"""An abort that commits before a waiting tool's request is written (issue 46).

The abort pairs the calls it can see; a request written after it (the pending-call row of
an approval, a client tool or human input, by a transaction that took the run's row only
once the abort had committed) used to stay `pending` for ever, in an inbox, on a run that
had ended, and set the aborted session back to `waiting`. Now it is recorded closed, with
the abort's reason, and nothing else of the wait is written."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from test_final_write import conn, open_run  # noqa: F401 - the fixture

from helix_dbos.orchestration.types import Message, ToolCall
from helix_dbos.runtime.steps.closing import close_run
from helix_dbos.runtime.steps.commit import StepCommit
from helix_dbos.runtime.waits.hitl import _suspend
from helix_dbos.store.database import sqlalchemy_url
from helix_dbos.store.repository import PendingToolCall

AGENT = "final_write_agent"


async def test_a_request_written_after_the_abort_is_closed_not_pending(
    conn: AsyncConnection,  # noqa: F811
    database_url: str,
) -> None:
    session_id, run_id = await open_run(conn)
    call = ToolCall(id="ask1", name="approve_me", arguments={"x": 1})
    head = StepCommit(session_id, run_id, AGENT, 1, head_messages=1)
    head.messages = [Message(role="assistant", content="may I?", tool_calls=[call])]
    pending = [PendingToolCall("ask1", "approve_me", "approval", {"x": 1}, 60.0)]
    assert await close_run(conn, session_id, run_id, "Run aborted: stop", "aborted")

    engine = create_async_engine(sqlalchemy_url(database_url))
    try:
        async with engine.connect() as suspending, suspending.begin():
            deadlines = await _suspend(suspending, f"wf_{run_id}", head, pending)
    finally:
        await engine.dispose()

    assert set(deadlines or {}) == {"ask1"}
    rows = list(
        await conn.exec_driver_sql(
            "SELECT status, reason FROM helix.tool_calls WHERE run_id = %s", (run_id,)
        )
    )
    assert [tuple(r) for r in rows] == [("aborted", "Run aborted: stop")]
    state = (
        await conn.exec_driver_sql(
            "SELECT r.status, s.status, (SELECT count(*) FROM helix.messages m "
            "WHERE m.session_id = s.session_id AND m.role = 'assistant'), "
            "(SELECT count(*) FROM helix.stream_chunks c WHERE c.run_id = r.run_id "
            "AND c.type = 'tool_approval_request') FROM helix.runs r "
            "JOIN helix.sessions s USING (session_id) WHERE r.run_id = %s",
            (run_id,),
        )
    ).one()
    assert tuple(state) == ("aborted", "aborted", 0, 0)  # no head, no request on the stream
