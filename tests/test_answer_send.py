"""An answer is claimed and sent in one transaction (issue 34, item 4): the message row
DBOS delivers is written with the claim, so both commit, or neither does."""

from __future__ import annotations

import asyncio

import pytest
from dbos import DBOS
from helpers import calls, sql, wait_until_waiting
from test_hitl import make_deleter

from helix_dbos.errors import ToolCallAlreadyAnsweredError
from helix_dbos.runtime.control import run_control
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.waits.answer_send import send_with_claim
from helix_dbos.runtime.waits.hitl import TOPICS
from helix_dbos.store.answer_claim import claim_answer


class Abandoned(Exception):
    """Raised inside the claiming transaction, so it rolls back."""


async def _waiting_for_approval(helix, make_agent, mock_llm, ran: list[str]):
    """A run waiting for the approval of `delete_file("/x")` (call `d1`)."""
    agent = make_agent(tools=[make_deleter(ran)])
    mock_llm.add_responses(
        calls(("d1", "delete_file", {"path": "/x"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "delete /x")
    await wait_until_waiting(helix, handle.session_id)
    return handle


async def test_a_claim_rolled_back_takes_its_answer_with_it(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    handle = await _waiting_for_approval(helix, make_agent, mock_llm, ran)
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


async def test_an_approval_is_claimed_and_sent_in_one_statement(
    helix, make_agent, mock_llm, database_url, monkeypatch
):
    """The message row is DBOS.send's own (same key): a retried send of the same answer
    through DBOS is not delivered twice, and a claim that claims nothing sends nothing."""

    ran: list[str] = []
    handle = await _waiting_for_approval(helix, make_agent, mock_llm, ran)
    run = await helix.get_run(handle.run_id)
    slow_path: list[str] = []

    async def claim_in_a_transaction(*args, **kwargs):
        slow_path.append("claim_answer")
        return await claim_answer(*args, **kwargs)

    monkeypatch.setattr(run_control, "claim_answer", claim_in_a_transaction)
    await helix.approve(handle.session_id, "d1", reason="ok")
    assert slow_path == []  # one statement: no transaction, no separate send
    key = f"{handle.run_id}:d1"
    await DBOS.send_async(
        run.workflow_id,
        {"tool_call_id": "d1", "approved": True, "reason": "ok"},
        TOPICS["approval"],
        idempotency_key=key,
    )
    result = await handle.result()
    assert result.status == "completed" and ran == ["/x"]
    assert sql(
        database_url,
        "SELECT message_uuid, topic FROM dbos.notifications WHERE destination_uuid = %s",
        run.workflow_id,
    ) == [(f"{key}::{run.workflow_id}", "helix.approval")]
    with pytest.raises(ToolCallAlreadyAnsweredError):
        await helix.approve(handle.session_id, "d1")
    assert sql(
        database_url,
        "SELECT count(*) FROM dbos.notifications WHERE destination_uuid = %s",
        run.workflow_id,
    ) == [(1,)]
    rows = sql(
        database_url,
        "SELECT status, reason FROM helix.tool_calls WHERE run_id = %s",
        handle.run_id,
    )
    assert rows == [("approved", "ok")]


async def test_answers_sent_at_once_to_one_call_apply_once(
    helix, make_agent, mock_llm, database_url
):
    """Ten approvals and denials of one call at once: one statement claims it, the rest
    are refused as answered, one message is sent and the tool runs at most once."""
    ran: list[str] = []
    handle = await _waiting_for_approval(helix, make_agent, mock_llm, ran)
    answers = [
        helix.approve(handle.session_id, "d1")
        if i % 2
        else helix.deny(handle.session_id, "d1", reason="no")
        for i in range(10)
    ]
    outcomes = await asyncio.gather(*answers, return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, ToolCallAlreadyAnsweredError)]
    assert len(refused) == 9 and outcomes.count(None) == 1
    result = await handle.result()
    assert result.status == "completed"
    run = await helix.get_run(handle.run_id)
    assert sql(
        database_url,
        "SELECT count(*) FROM dbos.notifications WHERE destination_uuid = %s",
        run.workflow_id,
    ) == [(1,)]
    status = sql(
        database_url, "SELECT status FROM helix.tool_calls WHERE run_id = %s", handle.run_id
    )
    assert status in ([("approved",)], [("denied",)])
    assert ran == (["/x"] if status == [("approved",)] else [])
