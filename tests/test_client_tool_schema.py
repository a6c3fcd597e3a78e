"""A client tool's `output_schema` (issue 27 item 3): a result that does not match is refused
at the API edge, and a raw DBOS.send of one is a tool error the model sees."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
from dbos import DBOS
from helpers import calls, sql, wait_until_waiting
from live_server import serve
from pydantic import BaseModel

from helix_dbos import tool
from helix_dbos.errors import InvalidAnswerError
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.server import create_app


class Loc(BaseModel):
    lat: float
    lon: float


def locate_agent(make_agent, mock_llm):
    @tool(execute="client", output_schema=Loc)
    def locate() -> dict:
        """Ask the user's device for its location."""

    agent = make_agent(tools=[locate])
    mock_llm.add_responses(
        calls(("loc", "locate", {})), {"type": "text", "content": "thanks"}, agent=agent.name
    )
    return agent


def tool_messages(messages) -> dict:
    return {m.tool_call_id: m for m in messages if m.role == "tool"}


async def test_a_result_that_does_not_match_is_refused_and_the_run_keeps_waiting(
    helix, make_agent, mock_llm, database_url, caplog
):
    agent = locate_agent(make_agent, mock_llm)
    handle = await helix.execute(agent, "where am I?")
    sid = handle.session_id
    await wait_until_waiting(helix, sid)

    with caplog.at_level(logging.WARNING, logger="helix_dbos"):
        with pytest.raises(InvalidAnswerError, match="lat: Field required"):
            await helix.submit_tool_result(sid, "loc", {"wrong": "shape"})
        with serve(create_app(helix, allow_unauthenticated=True)) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                reply = await client.post(
                    "/submit-tool-result",
                    json={
                        "session_id": sid,
                        "tool_call_id": "loc",
                        "kind": "client-tool-result",
                        "result": {"lat": "north", "lon": 2},
                    },
                )
    assert reply.status_code == 422, reply.text
    assert "lat" in reply.json()["detail"] and "output_schema" in reply.json()["detail"]
    events = [
        r for r in caplog.records if getattr(r, "event", None) == "client_tool.validation_failed"
    ]
    assert [e.tool_call_id for e in events] == ["loc", "loc"]
    # Nothing stored: the call is still pending, unanswered, and the run still waits.
    [(status, answered_at)] = sql(
        database_url,
        "SELECT status, answered_at FROM helix.tool_calls WHERE run_id = %s",
        handle.run_id,
    )
    assert (status, answered_at) == ("pending", None)
    assert (await helix.get_current_run(sid)).status == "waiting"

    await helix.submit_tool_result(sid, "loc", {"lat": 52.5, "lon": 13.4})
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.status == "completed"
    message = tool_messages(await helix.get_messages(sid))["loc"]
    assert not message.is_error and json.loads(message.content) == {"lat": 52.5, "lon": 13.4}


async def test_a_raw_send_that_does_not_match_is_a_tool_error_the_model_sees(
    helix, make_agent, mock_llm, database_url
):
    agent = locate_agent(make_agent, mock_llm)
    handle = await helix.execute(agent, "where am I?")
    await wait_until_waiting(helix, handle.session_id)

    await on_target_loop(
        lambda: DBOS.send_async(
            handle.workflow_id, {"tool_call_id": "loc", "result": {"lat": 1}}, "helix.tool_result"
        )
    )
    result = await asyncio.wait_for(handle.result(), timeout=30)

    assert result.status == "completed"
    message = tool_messages(await helix.get_messages(handle.session_id))["loc"]
    assert message.is_error and "lon: Field required" in message.content
    seen = [r for r in mock_llm.inputs if r.agent_name == agent.name][-1]
    assert [m.is_error for m in seen.messages if m.tool_call_id == "loc"] == [True]
    [(status, error)] = sql(
        database_url,
        "SELECT status, error FROM helix.tool_calls WHERE run_id = %s",
        handle.run_id,
    )
    assert status == "failed" and "output_schema" in error
