"""A2A agents as remote sub-agents: `remote_sub_agent_tool(url, ..., protocol="a2a")`.

The same two durable steps as a helix child (runtime/children/remote_children.py), spoken in
A2A: `helix.remote_start` sends the message with `return_immediately`, its message id
the call's idempotency key and its context id the call's derived session id, both
deterministic, so a step replayed after a crash sends the same message (a helix server
answers it with the task the first send started) and records the task id in the row;
`helix.remote_wait` re-attaches with `tasks/subscribe` (and `tasks/get`) until the task
ends, and cancels it when the parent is aborted or interrupted. A task waiting for input
keeps the call waiting: its human answers the child's server. The child's events are
not copied into the parent's stream (A2A events carry no position to key them by).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timezone

import httpx
from a2a.client import A2AClientError, AgentCardResolutionError, Client, ClientConfig
from a2a.client.client_factory import ClientFactory
from a2a.helpers import get_data_parts, get_text_parts, new_text_part
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError, InternalError, TaskNotFoundError

from helix_dbos.a2a_wire.mapping import FINAL_STATES, RESPONSE_ARTIFACT
from helix_dbos.client.tls import shared_ssl_context
from helix_dbos.definitions.remote_subagent import RemoteSubAgentTool
from helix_dbos.orchestration.messages import to_json_text
from helix_dbos.runtime.children.remote_children import parent_aborted, record_start
from helix_dbos.runtime.dbos.dbos_internals import execution_owner
from helix_dbos.runtime.process.process_runtime import Runtime, current_runtime
from helix_dbos.runtime.steps.live_chunks import write_chunks
from helix_dbos.runtime.steps.step_types import ChunkRecord, ToolOutcome
from helix_dbos.runtime.waits.hitl import interrupted_message
from helix_dbos.store import repository as repo
from helix_dbos.store.features import remote_children as store
from helix_dbos.store.features.remote_children import RemoteRef

CONTROL_POLL_SECONDS = 0.5
# How long a wait step re-reads a task that waits for input before it subscribes again.
INPUT_POLL_SECONDS = 2.0


class A2AUnavailable(Exception):
    """The A2A agent cannot be reached or answered with a server error: retried."""


def transient(exc: BaseException) -> bool:
    """A network error, a 5xx or 429, or an internal error of the agent: try again."""
    if isinstance(exc, A2AUnavailable):
        return True
    if isinstance(exc, AgentCardResolutionError):
        return exc.status_code is None or exc.status_code >= 500 or exc.status_code == 429
    if isinstance(exc, A2AClientError):
        cause = exc.__cause__
        if isinstance(cause, httpx.HTTPStatusError):
            code = cause.response.status_code
            return code >= 500 or code == 429
        return True  # a network error, a timeout, a broken stream
    return isinstance(exc, InternalError)


@asynccontextmanager
async def a2a_client(
    tool: RemoteSubAgentTool, *, streaming: bool, timeout: float = 30.0
) -> AsyncIterator[Client]:
    """A client for the agent at `tool.url` (its card read from there), the tool's token
    as the bearer; a network failure is `A2AUnavailable`, so the step retries."""
    token = tool.token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(
        headers=headers, timeout=timeout, verify=shared_ssl_context()
    ) as http:
        factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))
        client = await factory.create_from_url(tool.url)
        try:
            yield client
        finally:
            await client.close()


def task_output(task: Task) -> tuple[str, object]:
    """The task's answer (its `response` artifact, or all artifacts) as text and value."""
    chosen = [a for a in task.artifacts if a.artifact_id == RESPONSE_ARTIFACT] or list(
        task.artifacts
    )
    parts = [p for a in chosen for p in a.parts]
    data = get_data_parts(parts)
    texts = get_text_parts(parts)
    if data and not texts:
        value = data[0] if len(data) == 1 else data
        return json.dumps(value), value
    text = "\n".join(texts)
    return text, text


def status_text(task: Task) -> str:
    return (
        "\n".join(get_text_parts(task.status.message.parts))
        if task.status.HasField("message")
        else ""
    )


def _tool(rt: Runtime, ref: RemoteRef) -> RemoteSubAgentTool:
    tool = rt.agent(ref.parent_agent_name).tool(ref.tool_name)
    assert isinstance(tool, RemoteSubAgentTool), ref.tool_name
    return tool


async def start_a2a(ref: RemoteRef, shown: ChunkRecord) -> tuple[str | None, str | None, bool]:
    """The body of `helix.remote_start` for an A2A child: (task id, error, interrupted)."""
    rt = current_runtime()
    tool = _tool(rt, ref)
    if await rt.read(repo.interrupt_pending, ref.parent_workflow_id):
        return None, interrupted_message(None), True
    await rt.on_connection(
        "a remote child's row", lambda conn: store.open_ref(conn, ref, execution_owner())
    )
    await write_chunks(
        rt, ref.parent_session_id, ref.parent_run_id, ref.parent_agent_name, ref.step, [shown]
    )
    request = SendMessageRequest(
        message=Message(
            message_id=ref.idempotency_key,
            context_id=ref.remote_session_id,
            role=Role.ROLE_USER,
            parts=[new_text_part(ref.input)],
        ),
        configuration=SendMessageConfiguration(return_immediately=True),
    )
    try:
        async with a2a_client(tool, streaming=False) as client:
            async for response in client.send_message(request):
                if response.HasField("task"):
                    task_id = response.task.id
                    break
            else:
                raise A2AUnavailable("the agent answered with no task")
    except A2AError as exc:
        if transient(exc):
            raise
        error = f"A2A agent '{ref.agent_name}' at {ref.url} refused the call: {exc}"
        await _finish(rt, ref, "failed", error)
        return None, error, False
    await record_start(rt, ref, task_id, lambda: cancel_a2a_task(tool, task_id))
    return task_id, None, False


async def follow_a2a(ref: RemoteRef, task_id: str) -> ToolOutcome:
    """The body of `helix.remote_wait` for an A2A child: re-attach until the task ends."""
    rt = current_runtime()
    tool = _tool(rt, ref)
    row = await rt.read(store.get_ref, ref.parent_run_id, ref.tool_call_id)
    opened = row.created_at if row is not None else datetime.now(timezone.utc)
    where = f"A2A agent '{ref.agent_name}' at {ref.url}"
    async with a2a_client(tool, streaming=True) as client:
        control = asyncio.ensure_future(_forward_control(rt, ref, client, task_id))
        try:
            task = await _until_final(client, task_id)
        except TaskNotFoundError:
            error = f"{where} lost its task {task_id}"
            await _finish(rt, ref, "failed", error)
            return _failed(error, opened)
        except A2AError as exc:
            if transient(exc):
                raise
            error = f"{where}: {exc}"
            await _finish(rt, ref, "failed", error)
            return _failed(error, opened)
        finally:
            control.cancel()
            with contextlib.suppress(BaseException):
                await control
    duration_ms = _ms_since(opened)
    if task.status.state == TaskState.TASK_STATE_COMPLETED:
        text, value = task_output(task)
        await _finish(rt, ref, "completed", None)
        return ToolOutcome(
            success=True,
            content=text if isinstance(value, str) else to_json_text(value),
            result=value,
            duration_ms=duration_ms,
            usage_kind="subagent",
        )
    state = TaskState.Name(task.status.state).removeprefix("TASK_STATE_").lower()
    why = status_text(task)
    status = "aborted" if task.status.state == TaskState.TASK_STATE_CANCELED else "failed"
    await _finish(rt, ref, status, why or None)
    return _failed(f"A2A agent '{ref.agent_name}' {state}{': ' + why if why else ''}", opened)


async def _until_final(client: Client, task_id: str) -> Task:
    """Subscribe (again and again) until the task reaches a final state."""
    while True:
        with contextlib.suppress(A2AClientError):  # a dropped stream: read the task below
            async for response in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                state = (
                    response.task.status.state
                    if response.HasField("task")
                    else response.status_update.status.state
                    if response.HasField("status_update")
                    else None
                )
                if state in FINAL_STATES or state == TaskState.TASK_STATE_INPUT_REQUIRED:
                    break
        task = await client.get_task(GetTaskRequest(id=task_id))
        if task.status.state in FINAL_STATES:
            return task
        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await asyncio.sleep(INPUT_POLL_SECONDS)  # a human answers at the agent's server


def _failed(error: str, opened: datetime) -> ToolOutcome:
    return ToolOutcome(
        success=False,
        content=None,
        error=error,
        duration_ms=_ms_since(opened),
        usage_kind="subagent",
    )


def _ms_since(opened: datetime) -> float:
    return max(0.0, (datetime.now(timezone.utc) - opened).total_seconds() * 1000)


async def _finish(rt: Runtime, ref: RemoteRef, status: str, error: str | None) -> None:
    await rt.on_connection(
        "a remote child's row",
        lambda conn: store.finish(
            conn, ref.parent_run_id, ref.tool_call_id, status, error, owner=execution_owner()
        ),
    )


async def _forward_control(rt: Runtime, ref: RemoteRef, client: Client, task_id: str) -> None:
    """The parent's abort or interrupt cancels the task (A2A has no softer stop)."""
    while True:
        aborted = await parent_aborted(rt, ref.parent_run_id)
        if aborted or await rt.read(repo.interrupt_pending, ref.parent_workflow_id):
            with contextlib.suppress(A2AError):
                await client.cancel_task(CancelTaskRequest(id=task_id))
            return
        await asyncio.sleep(CONTROL_POLL_SECONDS)


async def cancel_a2a_task(tool: RemoteSubAgentTool, task_id: str) -> None:
    """Cancel an A2A child's task (the parent's abort, from any process)."""
    with contextlib.suppress(A2AError, httpx.HTTPError):
        async with a2a_client(tool, streaming=False, timeout=5.0) as client:
            await client.cancel_task(CancelTaskRequest(id=task_id))
