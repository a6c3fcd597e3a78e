"""The client half of the tasks mapping, for the SDK's own client (`MCPTasks`).

`Client(url, extensions=[MCPTasks()], elicitation_callback=...)` advertises the tasks
extension, so a helix tool call comes back as a task; `call_tool` then polls it to the
end (answering its input requests through the client's elicitation callback) and
returns the run's result. On a `ClientSession` of your own, `MCPTasks.session_claims()`
lets `call_tool(..., allow_claimed=True)` return the task itself, whose id (= the helix
run id) polls or cancels it later from any connection: `MCPTasks.get`, `.result`,
`.cancel`, `.list`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext, ClientSession

from helix_dbos.server.protocols.mcp_tasks import TASKS_EXTENSION


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


async def _refuse(created: TaskCreated, ctx: ClaimContext) -> types.CallToolResult:
    raise RuntimeError(
        "call_tool(..., allow_claimed=True) returns the task; follow it with MCPTasks"
    )


class MCPTasks(ClientExtension):
    """The tasks extension for `mcp.Client`, and the `tasks/*` requests on any session."""

    identifier = TASKS_EXTENSION

    def __init__(self, poll_seconds: float = 0.5) -> None:
        self.poll_seconds = poll_seconds

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskCreated, resolve=self._resolve)]

    async def _resolve(self, created: TaskCreated, ctx: ClaimContext) -> types.CallToolResult:
        return await MCPTasks.follow(ctx.session, created.task.task_id, self.poll_seconds)

    @staticmethod
    def session_claims() -> dict[str, Sequence[ResultClaim[Any]]]:
        """`result_claims` for a `ClientSession` that takes the task shape itself (pass
        `extensions={TASKS_EXTENSION: {}}` too, to ask for it)."""
        return {
            TASKS_EXTENSION: [ResultClaim(result_type="task", model=TaskCreated, resolve=_refuse)]
        }

    @staticmethod
    async def get(session: ClientSession, task_id: str) -> TaskState:
        request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
        return await session.send_request(request, TaskState)

    @staticmethod
    async def result(session: ClientSession, task_id: str) -> types.CallToolResult:
        """The run's tool result; the server blocks until the run ends."""
        params = types.GetTaskPayloadRequestParams(task_id=task_id)
        return await session.send_request(GetTaskPayload(params=params), types.CallToolResult)

    @staticmethod
    async def cancel(session: ClientSession, task_id: str) -> types.Task:
        request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
        return await session.send_request(request, types.CancelTaskResult)

    @staticmethod
    async def list(session: ClientSession, cursor: str | None = None) -> types.ListTasksResult:
        request = types.ListTasksRequest(params=types.PaginatedRequestParams(cursor=cursor))
        return await session.send_request(request, types.ListTasksResult)

    @staticmethod
    async def update(session: ClientSession, task_id: str, responses: dict[str, Any]) -> None:
        params = UpdateTaskParams(task_id=task_id, input_responses=responses)
        await session.send_request(UpdateTaskRequest(params=params), types.EmptyResult)

    @staticmethod
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
            await MCPTasks.update(session, state.task_id, responses)

    @staticmethod
    async def follow(
        session: ClientSession, task_id: str, poll_seconds: float = 0.5
    ) -> types.CallToolResult:
        """Poll a task to its end, answering its input requests; then its result."""
        answered: set[str] = set()
        while True:
            state = await MCPTasks.get(session, task_id)
            if state.status in TERMINAL:
                return await MCPTasks.result(session, task_id)
            fresh = {k for k in state.input_requests or {} if k not in answered}
            if fresh:
                answered |= fresh
                await MCPTasks.answer_inputs(session, state)
                continue
            await anyio.sleep(poll_seconds)
