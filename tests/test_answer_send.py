"""An answer is claimed and sent in one transaction (issue 34, item 4): the message row
DBOS delivers is written with the claim, so both commit, or neither does."""

from __future__ import annotations

import asyncio

import pytest
from helpers import sql
from test_hitl import calls, make_deleter, wait_until_waiting

from helix_dbos.errors import ToolCallAlreadyAnsweredError
from helix_dbos.runtime.answer_send import send_with_claim
from helix_dbos.runtime.event_loop import on_target_loop
from helix_dbos.runtime.hitl import TOPICS
from helix_dbos.store.answer_claim import claim_answer


class Abandoned(Exception):
    """Raised inside the claiming transaction, so it rolls back."""


async def test_a_claim_rolled_back_takes_its_answer_with_it(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    agent = make_agent(tools=[make_deleter(ran)])
    mock_llm.add_responses(
        calls(("d1", "delete_file", {"path": "/x"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "delete /x")
    await wait_until_waiting(helix, handle.session_id)
    engine = helix.runtime.engine
    answer = {"tool_call_id": "d1", "approved": True, "reason": None}

    async def claim_send_and_fail() -> None:
        async with engine.begin() as conn:
            row = await claim_answer(conn, handle.session_id, "d1", "approval")
            assert row is not None
            key = f"{row.run_id}:d1"
            sent = await send_with_claim(
                engine, conn, row.workflow_id, answer, TOPICS["approval"], key
            )
            assert sent  # DBOS's tables share helix's database: written in this transaction
            inside = await conn.exec_driver_sql(
                "SELECT count(*) FROM dbos.notifications WHERE message_uuid LIKE %(k)s",
                {"k": f"{key}%"},
            )
            assert inside.scalar() == 1
            raise Abandoned

    with pytest.raises(Abandoned):
        await on_target_loop(claim_send_and_fail)
    run_id = handle.run_id
    assert sql(
        database_url,
        "SELECT count(*) FROM dbos.notifications WHERE message_uuid LIKE %s",
        f"{run_id}:d1%",
    ) == [(0,)]
    assert sql(
        database_url,
        "SELECT status, answered_at IS NULL FROM helix.tool_calls WHERE run_id = %s",
        run_id,
    ) == [("pending", True)]
    await asyncio.sleep(0.3)
    assert ran == []  # nothing reached the run

    await helix.approve(handle.session_id, "d1")  # the real answer, once
    result = await handle.result()
    assert result.status == "completed"
    assert ran == ["/x"]
    with pytest.raises(ToolCallAlreadyAnsweredError):
        await helix.approve(handle.session_id, "d1")
