"""The client half of the tasks mapping, for the SDK's own `mcp.Client`.

`Client(url, extensions=[HelixTasks()], elicitation_callback=...)` advertises the tasks
extension, so a helix tool call comes back as a task; `call_tool` then polls it to the
end (answering its input requests through the client's elicitation callback) and
returns the run's result, while `task_id` (= the helix run id) can be kept to poll or
cancel later from any connection: `get_task`, `task_result`, `cancel_task`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext, ClientSession

from helix_dbos.protocols.mcp_tasks import TASKS_EXTENSION


class TaskCreated(types.Result):
    """A task-augmented `tools/call` result (`resultType: "task"`)."""

    result_type: Literal["task"] = "task"
    task: types.Task


class TaskState(types.Result, types.Task):
    """`tasks/get`: the task, and the input requests it waits on (if the client elicits)."""

    input_requests: dict[str, Any] | None = None


class UpdateTaskParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any]


class UpdateTaskRequest(types.Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskParams


class GetTaskPayload(types.Request[types.GetTaskPayloadRequestParams, Literal["tasks/result"]]):
    method: Literal["tasks/result"] = "tasks/result"
    params: types.GetTaskPayloadRequestParams


TERMINAL = frozenset({"completed", "failed", "cancelled"})


async def get_task(session: ClientSession, task_id: str) -> TaskState:
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return await session.send_request(request, TaskState)


async def task_result(session: ClientSession, task_id: str) -> types.CallToolResult:
    """The run's tool result; the server blocks until the run ends."""
    params = types.GetTaskPayloadRequestParams(task_id=task_id)
    return await session.send_request(GetTaskPayload(params=params), types.CallToolResult)


async def cancel_task(session: ClientSession, task_id: str) -> types.Task:
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    return await session.send_request(request, types.CancelTaskResult)


async def list_tasks(session: ClientSession, cursor: str | None = None) -> types.ListTasksResult:
    request = types.ListTasksRequest(params=types.PaginatedRequestParams(cursor=cursor))
    return await session.send_request(request, types.ListTasksResult)


async def update_task(session: ClientSession, task_id: str, responses: dict[str, Any]) -> None:
    params = UpdateTaskParams(task_id=task_id, input_responses=responses)
    await session.send_request(UpdateTaskRequest(params=params), types.EmptyResult)


async def answer_inputs(session: ClientSession, state: TaskState) -> None:
    """Run each input request through the client's callbacks; send the answers back."""
    responses: dict[str, Any] = {}
    for key, raw in (state.input_requests or {}).items():
        request = types.ElicitRequest.model_validate(raw, by_name=False)
        ctx = ClientRequestContext(session=session, request_id=key, meta=None)
        answer = await session.dispatch_input_request(ctx, request)
        if isinstance(answer, types.ErrorData):
            answer = types.ElicitResult(action="cancel")
        responses[key] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
    if responses:
        await update_task(session, state.task_id, responses)


async def follow_task(
    session: ClientSession, task_id: str, poll_seconds: float = 0.5
) -> types.CallToolResult:
    """Poll a task to its end, answering its input requests; then its result."""
    answered: set[str] = set()
    while True:
        state = await get_task(session, task_id)
        if state.status in TERMINAL:
            return await task_result(session, task_id)
        fresh = {k for k in state.input_requests or {} if k not in answered}
        if fresh:
            answered |= fresh
            await answer_inputs(session, state)
            continue
        await anyio.sleep(poll_seconds)


class HelixTasks(ClientExtension):
    """The tasks extension for `mcp.Client`: a task result is followed to its end."""

    identifier = TASKS_EXTENSION

    def __init__(self, poll_seconds: float = 0.5) -> None:
        self.poll_seconds = poll_seconds

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskCreated, resolve=self._resolve)]

    async def _resolve(self, created: TaskCreated, ctx: ClaimContext) -> types.CallToolResult:
        return await follow_task(ctx.session, created.task.task_id, self.poll_seconds)
