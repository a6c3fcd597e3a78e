"""Handoffs over HTTP (issue 50): the AG-UI stream carries the handoff as a tool call and
its result, then the target's answer; `GET /status` shows the session's current agent."""

from __future__ import annotations

import json
import uuid

import httpx
from helpers import calls
from live_server import serve

from helix_dbos.server import create_app


def events(body: str) -> list[dict]:
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]


async def test_ag_ui_streams_the_handoff_and_status_shows_the_current_agent(
    helix, make_agent, mock_llm
):
    billing = make_agent()
    triage = make_agent(handoffs=[billing])
    name = f"transfer_to_{billing.name}"
    mock_llm.add_responses(calls(("h1", name, {})), agent=triage.name)
    mock_llm.add_responses({"type": "text", "content": "You owe 10 EUR."}, agent=billing.name)
    thread = f"ses_{uuid.uuid4().hex}"
    body = {
        "threadId": thread,
        "runId": uuid.uuid4().hex,
        "messages": [{"id": "u1", "role": "user", "content": "What do I owe?"}],
    }
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        async with httpx.AsyncClient(timeout=60) as http:
            streamed = await http.post(f"{url}/ag-ui/{triage.name}", json=body)
            assert streamed.status_code == 200, streamed.text
            status = await http.get(f"{url}/status", params={"session_id": thread})
    seen = events(streamed.text)
    kinds = [e["type"] for e in seen]
    assert kinds[-1] == "RUN_FINISHED", kinds
    starts = [e for e in seen if e["type"] == "TOOL_CALL_START"]
    assert [(e["toolCallId"], e["toolCallName"]) for e in starts] == [("h1", name)]
    results = [e for e in seen if e["type"] == "TOOL_CALL_RESULT"]
    assert [(e["toolCallId"], e["content"]) for e in results] == [
        ("h1", f"Transferred to {billing.name}")
    ]
    text = "".join(e["delta"] for e in seen if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "You owe 10 EUR."
    assert kinds.index("TOOL_CALL_RESULT") < kinds.index("TEXT_MESSAGE_CONTENT")
    assert status.status_code == 200
    session = status.json()["session"]
    assert (session["agent_name"], session["current_agent"]) == (triage.name, billing.name)
