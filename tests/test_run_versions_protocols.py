"""Answers over each protocol to a run no live worker resumes (issue 45 item 4): A2A, MCP
tasks, AG-UI, the AI SDK UI stream, the Python client and the HTTP interrupt refuse in
their own error shape (HTTP 409 where the protocol answers with statuses), naming the
run's version; nothing is claimed or sent. Once the version is served again, the same
answer is taken and the tool runs once.

The run is made "of another version" as in `test_run_versions.py`: its DBOS workflow row
names `helix-4` while this session's helix (`helix-test`) is the live worker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import mcp_types as types
import pytest
from a2a.types import CancelTaskRequest, SendMessageRequest, TaskState
from a2a.utils.errors import UnsupportedOperationError
from helpers import answered, approval_gated_delete, messages_to, pending_calls, set_version
from live_server import serve
from mcp.shared.exceptions import MCPError
from test_a2a import a2a, user_message
from test_mcp_server import session as mcp_session

from helix_dbos import AsyncHelixClient, HelixClient, RunHandle, tool
from helix_dbos import MCPTasks as tc
from helix_dbos.client.errors import ConflictError
from helix_dbos.server import create_app
from helix_dbos.server.protocols.mcp_tasks import SESSION_PREFIX

OLD, OURS = "helix-4", "helix-test"


@tool(execute="client")
def get_location() -> dict:
    """Ask the user's device for its location."""


@dataclass
class Stranded:
    """A run waiting for an approval (`d1`) and, with a client tool, a result (`c1`),
    whose version no live worker runs."""

    handle: RunHandle
    agent: str
    ran: list[str]
    calls: list[str]
    database_url: str

    def untouched(self) -> None:
        """Nothing claimed, nothing sent to the workflow."""
        assert answered(self.database_url, self.handle.run_id) == [(c, None) for c in self.calls]
        assert messages_to(self.database_url, self.handle.run_id) == 0

    def served_again(self) -> None:
        set_version(self.database_url, self.handle.run_id, OURS)

    async def completes_once(self) -> None:
        result = await asyncio.wait_for(self.handle.result(), 60)
        assert result.status == "completed" and self.ran == ["/tmp/v"]


@pytest.fixture
def strand(helix, make_agent, mock_llm, database_url) -> Iterator[Any]:
    """Makes stranded runs; at the end, every one is of this process's version again
    (the session database is shared: other tests list the runs of `helix-4`)."""
    made: list[str] = []

    async def make(*, client_tool: bool = True, session_id: str | None = None) -> Stranded:
        ran: list[str] = []
        tools = [approval_gated_delete(ran)] + ([get_location] if client_tool else [])
        agent = make_agent(tools=tools)
        asked = [{"id": "d1", "name": "delete_file", "arguments": {"path": "/tmp/v"}}]
        if client_tool:
            asked.append({"id": "c1", "name": "get_location", "arguments": {}})
        mock_llm.add_responses(
            {"type": "tool_calls", "tool_calls": asked},
            {"type": "text", "content": "done"},
            agent=agent.name,
        )
        handle = await helix.execute(agent, "delete /tmp/v", session_id=session_id)
        await pending_calls(helix, handle.session_id, len(asked))
        set_version(database_url, handle.run_id, OLD)
        made.append(handle.run_id)
        calls = sorted(c["id"] for c in asked)
        return Stranded(handle, agent.name, ran, calls, database_url)

    yield make
    for run_id in made:
        set_version(database_url, run_id, OURS)


@pytest.fixture
def base_url(helix) -> Iterator[str]:
    with serve(create_app(helix, allow_unauthenticated=True, mcp_agents=True)) as url:
        yield url


def refused_409(response: httpx.Response, field: str = "detail") -> None:
    assert response.status_code == 409, response.text
    assert f"application version '{OLD}'" in response.json()[field]
    assert f"HELIX_APP_VERSION={OLD}" in response.json()[field]


# --- A2A -------------------------------------------------------------------------------


def a2a_answer(run: Stranded, data: dict[str, Any]) -> SendMessageRequest:
    message = user_message(data, task_id=run.handle.run_id, context_id=run.handle.session_id)
    return SendMessageRequest(message=message)


async def test_a2a_refuses_with_a_json_rpc_error_then_answers(strand, base_url):
    run = await strand()
    approval = {"tool_call_id": "d1", "approved": True}
    location = {"tool_call_id": "c1", "result": {"lat": 1}}
    async with a2a(f"{base_url}/a2a/{run.agent}", streaming=False) as client:
        for answer in (approval, location):
            with pytest.raises(UnsupportedOperationError, match=f"version '{OLD}'"):
                [_ async for _ in client.send_message(a2a_answer(run, answer))]
        run.untouched()
    async with a2a(f"{base_url}/a2a/{run.agent}", streaming=True) as streaming:
        with pytest.raises(UnsupportedOperationError, match=f"version '{OLD}'"):
            [_ async for _ in streaming.send_message(a2a_answer(run, approval))]
    run.untouched()
    async with a2a(f"{base_url}/a2a/{run.agent}", streaming=False) as client:
        # The raw JSON-RPC answer: an error object (not an internal error) with the message.
        rpc = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": uuid.uuid4().hex,
                    "role": "ROLE_USER",
                    "taskId": run.handle.run_id,
                    "parts": [{"data": approval}],
                }
            },
        }
        async with httpx.AsyncClient(timeout=60) as http:
            raw = await http.post(
                f"{base_url}/a2a/{run.agent}", json=rpc, headers={"A2A-Version": "1.0"}
            )
        error = raw.json()["error"]
        assert raw.status_code == 200 and error["code"] == -32004, raw.json()
        assert f"version '{OLD}'" in error["message"]
        run.untouched()

        run.served_again()
        [_ async for _ in client.send_message(a2a_answer(run, approval))]
        [_ async for _ in client.send_message(a2a_answer(run, location))]
    await run.completes_once()


async def test_a2a_cancels_a_task_no_worker_resumes(strand, base_url, database_url):
    run = await strand(client_tool=False)
    async with a2a(f"{base_url}/a2a/{run.agent}", streaming=False) as client:
        canceled = await client.cancel_task(CancelTaskRequest(id=run.handle.run_id))
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED  # the fix the error names
    assert run.ran == []


# --- MCP tasks -------------------------------------------------------------------------


async def test_mcp_refuses_with_an_invalid_params_error_then_answers(strand, base_url):
    run = await strand(client_tool=False, session_id=f"{SESSION_PREFIX}{uuid.uuid4().hex}")
    accept = {"d1": {"action": "accept", "content": {"approved": True}}}
    async with mcp_session(f"{base_url}/mcp") as mcp:
        # tasks/update, and a tools/call retry that carries the answer (requestState).
        with pytest.raises(MCPError, match=f"version '{OLD}'") as refused:
            await tc.update(mcp, run.handle.run_id, accept)
        assert refused.value.code == types.INVALID_PARAMS
        retry = types.CallToolRequest(
            params=types.CallToolRequestParams(
                name=run.agent,
                arguments={},
                request_state=run.handle.run_id,
                input_responses=accept,
            )
        )
        with pytest.raises(MCPError, match=f"version '{OLD}'") as refused:
            await mcp.send_request(retry, types.CallToolResult)
        assert refused.value.code == types.INVALID_PARAMS
        run.untouched()

        run.served_again()
        await tc.update(mcp, run.handle.run_id, accept)
    await run.completes_once()


# --- AG-UI -----------------------------------------------------------------------------


def ag_ui_resume(run: Stranded, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "threadId": run.handle.session_id,
        "runId": uuid.uuid4().hex,
        "messages": [],
        "resume": entries,
    }


async def test_ag_ui_refuses_with_409_then_resumes(strand, base_url):
    run = await strand()
    url = f"{base_url}/ag-ui/{run.agent}"
    approval = {"interruptId": "d1", "status": "resolved", "payload": True}
    location = {"interruptId": "c1", "status": "resolved", "payload": {"lat": 1}}
    async with httpx.AsyncClient(timeout=60) as http:
        for entries in ([approval], [location], [approval, location]):
            refused_409(await http.post(url, json=ag_ui_resume(run, entries)))
        # AG-UI's front-end tool convention: the result as a trailing tool message.
        tool_message = {"id": "t1", "role": "tool", "toolCallId": "c1", "content": '{"lat": 1}'}
        body = {**ag_ui_resume(run, []), "messages": [tool_message]}
        del body["resume"]
        refused_409(await http.post(url, json=body))
        run.untouched()

        run.served_again()
        resumed = await http.post(url, json=ag_ui_resume(run, [approval, location]))
        assert resumed.status_code == 200 and "RUN_FINISHED" in resumed.text
    await run.completes_once()


# --- Vercel AI SDK UI stream -----------------------------------------------------------


def ai_sdk_answer(run: Stranded, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": run.handle.session_id,
        "messages": [{"id": "m1", "role": "assistant", "parts": parts}],
    }


async def test_ai_sdk_refuses_with_409_and_its_error_object_then_answers(strand, base_url):
    run = await strand()
    url = f"{base_url}/ai-sdk/chat"
    approval = {
        "type": "tool-delete_file",
        "toolCallId": "d1",
        "state": "approval-responded",
        "approval": {"id": "d1", "approved": True},
    }
    location = {
        "type": "tool-get_location",
        "toolCallId": "c1",
        "state": "output-available",
        "output": {"lat": 1},
    }
    async with httpx.AsyncClient(timeout=60) as http:
        for parts in ([approval], [location], [approval, location]):
            refused_409(await http.post(url, json=ai_sdk_answer(run, parts)), "errorText")
        run.untouched()

        run.served_again()
        answered_now = await http.post(url, json=ai_sdk_answer(run, [approval, location]))
        assert answered_now.status_code == 200 and '"type":"finish"' in answered_now.text
    await run.completes_once()


# --- the Python client and the HTTP interrupt ------------------------------------------


async def test_the_clients_and_the_interrupt_route_refuse_with_409_then_answer(strand, base_url):
    run = await strand()
    sid = run.handle.session_id
    async with httpx.AsyncClient(timeout=60) as http:
        refused_409(await http.post(f"{base_url}/interrupt", json={"session_id": sid}))
        refused_409(await http.post(f"{base_url}/chat/{sid}/interrupt"))
        approve = {"tool_call_id": "d1", "kind": "approval-response", "approved": True}
        refused_409(await http.post(f"{base_url}/chat/{sid}/submit-tool-result", json=approve))
    async with AsyncHelixClient(base_url) as client:
        for answer in (
            client.approve(sid, "d1"),
            client.deny(sid, "d1"),
            client.submit_tool_result(sid, "c1", {"lat": 1}),
            client.interrupt(sid),
        ):
            with pytest.raises(ConflictError, match=f"version '{OLD}'") as refused:
                await answer
            assert refused.value.status_code == 409
    with HelixClient(base_url) as sync_client:
        with pytest.raises(ConflictError, match=f"HELIX_APP_VERSION={OLD}"):
            sync_client.approve(sid, "d1")
        with pytest.raises(ConflictError, match=f"version '{OLD}'"):
            sync_client.interrupt(sid)
    run.untouched()

    run.served_again()
    async with AsyncHelixClient(base_url) as client:
        await client.approve(sid, "d1")
        await client.submit_tool_result(sid, "c1", {"lat": 1})
    await run.completes_once()
