"""Agents as MCP tools (the official `mcp` SDK, streamable HTTP at `/mcp`).

`mount_mcp(app, ctx, agents)` (what `create_app(helix, mcp_agents=...)` calls) adds one
MCP tool per chosen agent, served by the SDK's low-level `Server` behind the app's
edge guard, so the bearer auth, Host/Origin checks and body limits of every other
route apply. A call is a helix run in a session of its own (`mcp_<hex>`):

- plain `tools/call`: waits for the run and returns its output; an approval on the way
  is asked of a client that can elicit (2026-07-28: an `input_required` result, whose
  loop the SDK's `Client` runs; handshake era: an `elicitation/create` request), and
  otherwise stays in the inbox;
- with the tasks extension (`io.modelcontextprotocol/tasks` in the client's
  capabilities, or `task` in the call's params): the call returns at once with a task
  whose id IS the run id; `tasks/get`, `tasks/result`, `tasks/update` (elicitation
  answers), `tasks/cancel` and `tasks/list` read and steer the run. The task lives in
  helix's tables, so a reconnect or a restarted server finds it again.

Bad input is answered in the protocol's own shape: an unknown tool or task is a
JSON-RPC error (-32602), a missing `input` a tool error; never an HTTP 5xx.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from fastapi import FastAPI
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field
from starlette.routing import Route

from helix_dbos.api.answers import verdict
from helix_dbos.errors import (
    HelixError,
    InvalidInputError,
    RunNotFoundError,
    SessionNotFoundError,
)
from helix_dbos.runtime.steps.results import PendingToolCall, RunInfo
from helix_dbos.server.http.auth import Principal
from helix_dbos.server.http.route_context import ServerContext
from helix_dbos.server.http.visibility import sees
from helix_dbos.server.protocols import mcp_tasks as tasks
from helix_dbos.server.protocols.mcp_openapi import document_mcp

MCP_PATH = "/mcp"
NOBODY = Principal(name="nobody", sessions=())  # no principal from the edge guard: fail closed
Ctx = ServerRequestContext[Any, Any]


class TaskIdParams(types.RequestParams):
    task_id: str = Field(min_length=1, max_length=200)


class UpdateTaskParams(TaskIdParams):
    input_responses: dict[str, Any] = Field(default_factory=dict)


def chosen_agents(ctx: ServerContext, mcp_agents: bool | Sequence[str]) -> Callable[[], list[str]]:
    """The agents served as tools: all registered ones (`True`, read at each request, so
    agents registered later appear), or the named ones (checked now)."""
    if mcp_agents is True:
        return lambda: sorted(ctx.helix.agents)
    names = [mcp_agents] if isinstance(mcp_agents, str) else list(mcp_agents or [])
    unknown = [n for n in names if n not in ctx.helix.agents]
    if unknown:
        raise ValueError(
            f"mcp_agents names unregistered agents: {', '.join(unknown)} "
            f"(registered: {', '.join(sorted(ctx.helix.agents)) or 'none'})"
        )
    return lambda: list(names)


class MCPAgentServer:
    """The handlers: `tools/*` over agents, `tasks/*` over their runs."""

    def __init__(
        self, ctx: ServerContext, agents: Callable[[], list[str]], *, poll_seconds: float = 0.2
    ) -> None:
        self.ctx = ctx
        self.helix = ctx.helix
        self.agents = agents
        self.poll_seconds = poll_seconds
        self.inbox = "/inbox"

    def build(self) -> Server[Any]:
        server: Server[Any] = Server(
            "helix_dbos",
            instructions="Each tool is a durable helix agent; long runs are MCP tasks.",
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )
        server.extensions[tasks.TASKS_EXTENSION] = {}
        server.add_request_handler("tasks/get", TaskIdParams, self.get_task)
        server.add_request_handler("tasks/result", TaskIdParams, self.task_result)
        server.add_request_handler("tasks/update", UpdateTaskParams, self.update_task)
        server.add_request_handler("tasks/cancel", TaskIdParams, self.cancel_task)
        server.add_request_handler("tasks/list", types.PaginatedRequestParams, self.list_tasks)
        return server

    # --- tools -----------------------------------------------------------------------

    async def list_tools(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[self._tool(name) for name in self.agents()])

    def _tool(self, name: str) -> types.Tool:
        agent = self.helix.agents[name]
        prompt = agent.system_prompt if isinstance(agent.system_prompt, str) else ""
        return types.Tool(
            name=name,
            description=f"Run the helix agent '{name}'." + (f" {prompt[:500]}" if prompt else ""),
            input_schema={
                "type": "object",
                "properties": {
                    "input": {"type": "string", "description": "The message for the agent"}
                },
                "required": ["input"],
            },
            execution=types.ToolExecution(task_support="optional"),
        )

    async def call_tool(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        if params.name not in self.agents():
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}")
        principal = _principal(ctx)
        if params.request_state is not None:  # a retry answering our input request
            run = await self._run(principal, params.request_state)
            if run.agent_name != params.name:
                raise MCPError(INVALID_PARAMS, "requestState names a run of another tool")
            await self._answer(run, params.input_responses or {})
            return await self._settle_for_call(ctx, run.run_id)
        text = (params.arguments or {}).get("input")
        if not isinstance(text, str) or not text.strip():
            return _tool_error(
                "arguments.input must be a non-empty string: the message for the agent"
            )
        session_id = f"{tasks.SESSION_PREFIX}{uuid.uuid4().hex}"
        if not principal.may_see(session_id):
            return _tool_error(
                f"{principal.name or 'this principal'} may only use its own sessions; an MCP tool "
                "call opens a new one"
            )
        try:
            handle = await self.helix.execute(params.name, text, session_id=session_id)
        except InvalidInputError as exc:  # e.g. a NUL in the input: the caller's to fix
            return _tool_error(str(exc))
        if _wants_task(ctx, params):
            run = await self.helix.get_run(handle.run_id)
            task = tasks.task_of(run, [], self.inbox)
            return {"resultType": "task", "task": tasks.task_wire(task)}
        return await self._settle_for_call(ctx, handle.run_id)

    async def _settle_for_call(self, ctx: Ctx, run_id: str) -> Any:
        """Wait for the run's end, or for an approval: asked of a client that can elicit
        (2026-07-28: an `input_required` result, `requestState` = the run id; handshake
        era: an `elicitation/create` request on the call's stream), otherwise left to
        the inbox."""
        while True:
            run, pending = await self._settle(run_id)
            if run.status in tasks.FINAL_STATUSES:
                return tasks.tool_result(run)
            approvals = [p for p in pending if p.kind == "approval"]
            if not approvals or not _can_elicit(ctx):
                break
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                return types.InputRequiredResult(
                    input_requests={p.tool_call_id: tasks.approval_request(p) for p in approvals},
                    request_state=run.run_id,
                )
            answers = {}
            for call in approvals:
                asked = tasks.approval_request(call).params
                assert isinstance(asked, types.ElicitRequestFormParams)
                answers[call.tool_call_id] = await ctx.session.elicit_form(
                    asked.message, asked.requested_schema, ctx.request_id
                )
            await self._answer(run, answers)
        message = tasks.status_message(run, pending, self.inbox) or "the run waits"
        return types.CallToolResult(
            content=[types.TextContent(text=message)],
            structured_content={
                "run_id": run.run_id,
                "session_id": run.session_id,
                "status": run.status,
            },
        )

    async def _settle(self, run_id: str) -> tuple[RunInfo, list[PendingToolCall]]:
        """The run once it ended or waits for an answer (its tree's unanswered calls)."""
        while True:
            run = await self.helix.get_run(run_id)
            if run.status in tasks.FINAL_STATUSES:
                return run, []
            pending = await self._pending(run)
            if pending:
                return run, pending
            await asyncio.sleep(self.poll_seconds)

    # --- tasks -------------------------------------------------------------------------

    async def get_task(self, ctx: Ctx, params: TaskIdParams) -> dict[str, Any]:
        run = await self._run(_principal(ctx), params.task_id)
        pending = await self._pending(run)
        wire = tasks.task_wire(tasks.task_of(run, pending, self.inbox))
        if _can_elicit(ctx) and (requests := tasks.input_requests(pending)):
            wire["inputRequests"] = requests
        return wire

    async def task_result(self, ctx: Ctx, params: TaskIdParams) -> dict[str, Any]:
        """The run's `tools/call` result; blocks until the run ends (as the spec says)."""
        run = await self._run(_principal(ctx), params.task_id)
        if run.status not in tasks.FINAL_STATUSES:
            run = await self.helix.wait_for_run_end(run.session_id, run.run_id, poll_seconds=1.0)
        return tasks.tool_result(run).model_dump(by_alias=True, mode="json", exclude_none=True)

    async def update_task(self, ctx: Ctx, params: UpdateTaskParams) -> dict[str, Any]:
        run = await self._run(_principal(ctx), params.task_id)
        await self._answer(run, params.input_responses)
        return {}

    async def cancel_task(self, ctx: Ctx, params: TaskIdParams) -> dict[str, Any]:
        run = await self._run(_principal(ctx), params.task_id)
        if run.status in tasks.FINAL_STATUSES:
            raise MCPError(
                INVALID_PARAMS,
                f"Task {run.run_id} is already {tasks.task_status(run)}: nothing to cancel",
            )
        await self.helix.abort(run.session_id, reason="cancelled by the MCP client")
        run = await self.helix.get_run(run.run_id)
        return tasks.task_wire(tasks.task_of(run, [], self.inbox))

    async def list_tasks(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> dict[str, Any]:
        """MCP tasks (runs in MCP sessions) the caller may see, newest first, 50 a page."""
        offset = _offset(params.cursor if params else None)
        rows = await self.helix.sql(
            "SELECT run_id FROM helix.runs WHERE session_id LIKE :prefix "
            "ORDER BY started_at DESC, run_id LIMIT 51 OFFSET :offset",
            {"prefix": tasks.SESSION_PREFIX + "%", "offset": offset},
        )
        principal = _principal(ctx)
        listed = []
        for row in rows[:50]:
            run = await self.helix.get_run(row.run_id)
            if await self._visible(principal, run.session_id):
                listed.append(
                    tasks.task_wire(tasks.task_of(run, await self._pending(run), self.inbox))
                )
        page: dict[str, Any] = {"tasks": listed}
        if len(rows) > 50:
            page["nextCursor"] = str(offset + 50)
        return page

    # --- shared ------------------------------------------------------------------------

    async def _run(self, principal: Principal, task_id: str) -> RunInfo:
        """The run a task id names; one the caller may not see is as unknown as none."""
        try:
            run = await self.helix.get_run(task_id)
        except (RunNotFoundError, SessionNotFoundError):
            run = None
        if run is None or not run.session_id.startswith(tasks.SESSION_PREFIX):
            raise MCPError(INVALID_PARAMS, f"Unknown task: {task_id[:200]}")
        if not await self._visible(principal, run.session_id):
            raise MCPError(INVALID_PARAMS, f"Unknown task: {task_id[:200]}")
        return run

    async def _visible(self, principal: Principal, session_id: str) -> bool:
        return principal.sees_everything or await sees(self.ctx, principal, session_id)

    async def _pending(self, run: RunInfo) -> list[PendingToolCall]:
        if run.status != "waiting":
            return []
        calls = await self.helix.pending_tool_calls(run.session_id)
        return [c for c in calls if not c.answered]

    async def _answer(self, run: RunInfo, responses: dict[str, Any]) -> None:
        try:
            answers = tasks.read_answers(responses, await self._pending(run))
        except ValueError as exc:
            raise MCPError(INVALID_PARAMS, str(exc)) from None
        for answer in answers:
            try:
                await self.helix.answer(
                    run.session_id, answer.tool_call_id, verdict(answer.approved, answer.reason)
                )
            except HelixError as exc:  # answered already, a run no live worker resumes, ...
                raise MCPError(INVALID_PARAMS, str(exc)) from None


def _principal(ctx: Ctx) -> Principal:
    request = ctx.request
    scope = getattr(request, "scope", None) or {}
    principal = scope.get("state", {}).get("helix_principal")
    return principal if isinstance(principal, Principal) else NOBODY


def _can_elicit(ctx: Ctx) -> bool:
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and capabilities.elicitation is not None


def _wants_task(ctx: Ctx, params: types.CallToolRequestParams) -> bool:
    """Task-augmented: the call asks for it, or a modern client speaks the tasks extension.

    Only a 2026-07-28 wire can carry the task shape (`resultType: "task"`); the SDK
    validates a handshake-era `tools/call` result as a plain tool result."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    extensions = (capabilities.extensions if capabilities else None) or {}
    return params.task is not None or tasks.TASKS_EXTENSION in extensions


def _tool_error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def _offset(cursor: str | None) -> int:
    if cursor is None:
        return 0
    if not cursor.isdigit() or len(cursor) > 9:
        raise MCPError(INVALID_PARAMS, "Invalid cursor")
    return int(cursor)


def mount_mcp(app: FastAPI, ctx: ServerContext, mcp_agents: bool | Sequence[str]) -> None:
    """Serve the chosen agents as MCP tools at `/mcp`, inside the app (so behind its edge
    guard), with the SDK's session manager running in the app's lifespan."""
    agents = chosen_agents(ctx, mcp_agents)
    server = MCPAgentServer(ctx, agents).build()
    manager = StreamableHTTPSessionManager(app=server)
    app.state.helix_mcp = manager  # mounted as a sub-app: enter `manager.run()` in your lifespan
    app.router.routes.append(Route(MCP_PATH, endpoint=StreamableHTTPASGIApp(manager)))
    document_mcp(app, MCP_PATH)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(fastapi_app: Any) -> AsyncIterator[Any]:
        async with inner(fastapi_app) as state, manager.run():
            yield state

    app.router.lifespan_context = lifespan
