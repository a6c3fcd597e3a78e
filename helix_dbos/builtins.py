"""Hyphen's built-in tools (seed 003), durable like every other tool. Opt-in:

    Agent("triage", tools=["__complete__", "__log_progress__", search])
    Agent("ops", tools=[complete_tool(), run_workflow_tool({"wf_abc123": screening})])

- `__complete__` ends the run; the output is `{result_key: {answer, confidence, summary}}`.
- `__run_workflow__` starts a registered DBOS workflow as a durable child.
- `__workflow_status__` reports such a child's status, and its result once done (for
  `__run_workflow__` with `wait: false`: seed 003's "can check status later").
- `__pause_for_human__` pauses the run (status `paused`) until `{human_input, approved}`
  arrives on `helix.human_input`.
- `__store_memory__` / `__retrieve_memory__` keep values for one run in `helix.memory`.
- `__log_progress__` records a milestone in `helix.progress` and on the stream.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import Any, Literal

from dbos import DBOS, SetWorkflowID
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import text

from helix_dbos.definitions.tool import Tool, named_tool, register_named_tool
from helix_dbos.definitions.tool_context import ToolContext
from helix_dbos.errors import StateUpdateError
from helix_dbos.runtime.dbos.dbos_internals import registered_workflow
from helix_dbos.runtime.process.process_runtime import current_runtime

DEFAULT_RESULT_KEY = "@agentResult"
WORKFLOW_POLL_SECONDS = 0.5
_DONE = {
    "SUCCESS": "completed",
    "ERROR": "failed",
    "CANCELLED": "cancelled",
    "MAX_RECOVERY_ATTEMPTS_EXCEEDED": "failed",
}


# Explicit input models (not signatures): the documented fields, defaults and bounds
# (confidence 0-1, timeout_ms > 0, ttl_seconds > 0, urgency low|medium|high) are part of the
# schema the model sees and are validated before the tool runs; a violation is a tool error.


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CompleteInput(_Input):
    answer: str = Field(description="The final answer or result")
    confidence: float = Field(1.0, ge=0, le=1, description="Confidence score 0-1 (default: 1.0)")
    summary: str | None = Field(None, description="Brief summary of work performed")


class RunWorkflowInput(_Input):
    workflow_id: str | None = Field(
        None, description="ID of the workflow to run (or give workflow_name)"
    )
    workflow_name: str | None = Field(
        None, description="Name of the workflow (alternative to workflow_id)"
    )
    input: dict[str, Any] = Field(description="Input payload for the workflow")
    wait: bool = Field(True, description="Wait for completion (default: true)")
    timeout_ms: int = Field(60000, gt=0, description="Timeout in milliseconds (default: 60000)")


class WorkflowStatusInput(_Input):
    workflow_run_id: str = Field(
        description="The workflow_run_id that __run_workflow__ returned (with wait: false)"
    )


class PauseForHumanInput(_Input):
    question: str = Field(description="Question for the human reviewer")
    options: list[str] | None = Field(None, description="List of choices to present")
    context_summary: str | None = Field(None, description="Summary of work done so far")
    urgency: Literal["low", "medium", "high"] | None = Field(
        None, description='"low", "medium", or "high"'
    )


class StoreMemoryInput(_Input):
    key: str = Field(description="Storage key")
    value: Any = Field(description="Value to store (string, number, object, array)")
    ttl_seconds: float | None = Field(
        None, gt=0, description="Time-to-live before automatic expiration"
    )


class RetrieveMemoryInput(_Input):
    key: str = Field(description="Storage key to retrieve")


class LogProgressInput(_Input):
    message: str = Field(description="Progress description")
    milestone: str | None = Field(None, description="Named milestone identifier")
    data: dict[str, Any] | None = Field(
        None, description="Structured data associated with the milestone"
    )


def _builtin(tool: Tool) -> Tool:
    tool.builtin = True
    return tool


def complete_tool(result_key: str = DEFAULT_RESULT_KEY) -> Tool:
    """`__complete__(answer, confidence=1.0, summary=None)`: finish with the final answer."""

    def complete(
        answer: str, ctx: ToolContext, confidence: float = 1.0, summary: str | None = None
    ) -> dict[str, Any]:
        result = {"answer": answer, "confidence": confidence, "summary": summary}
        # A state_schema without room for the key keeps its state; the output still carries it.
        with contextlib.suppress(StateUpdateError):
            ctx.update_state({result_key: result})
        return result

    return _builtin(
        Tool(
            "__complete__",
            complete,
            description="Signal that the task is finished and give the final answer.",
            input_model=CompleteInput,
            finish_with=True,
            finish_with_transform=lambda result: {result_key: result},
        )
    )


def run_workflow_tool(workflows: dict[str, Callable[..., Any] | str] | None = None) -> Tool:
    """`__run_workflow__`: start a DBOS workflow (by id from `workflows`, or by registered name).

    The workflow receives `input` as its one argument. The child's id is
    `<run_id>-<tool_call_id>`, so a recovered run finds its child again.
    """
    catalogue = dict(workflows or {})

    async def run_workflow(
        ctx: ToolContext,
        input: dict[str, Any],
        workflow_id: str | None = None,
        workflow_name: str | None = None,
        wait: bool = True,
        timeout_ms: int = 60000,
    ) -> dict[str, Any]:
        if not workflow_id and not workflow_name:
            raise ValueError("Either workflow_id or workflow_name is required")
        label = workflow_id or workflow_name or ""
        func = _resolve_workflow(catalogue, workflow_id, workflow_name)
        child_id = f"{ctx.run_id}-{ctx.tool_call_id}"
        with SetWorkflowID(child_id):
            await DBOS.start_workflow_async(func, input)
        if not wait:
            return {
                "workflow_run_id": child_id,
                "workflow_id": label,
                "status": "running",
                "result": None,
                "context": {},
            }
        deadline = await DBOS.run_step_async({"name": "helix.clock"}, time.time) + timeout_ms / 1000
        while True:
            status = await DBOS.get_workflow_status_async(child_id)
            outcome = _DONE.get(status.status) if status is not None else None
            if outcome == "completed":
                result = await DBOS.get_result_async(child_id)
                return {
                    "workflow_run_id": child_id,
                    "workflow_id": label,
                    "status": "completed",
                    "result": result,
                    "context": {},
                }
            if outcome is not None:
                raise RuntimeError(
                    f"Workflow '{label}' (run {child_id}) {outcome}: {getattr(status, 'error', None)}"
                )
            now = await DBOS.run_step_async({"name": "helix.clock"}, time.time)
            if now >= deadline:
                raise TimeoutError(
                    f"Workflow '{label}' did not finish within {timeout_ms} ms; it continues as run {child_id}"
                )
            await DBOS.sleep_async(min(WORKFLOW_POLL_SECONDS, deadline - now))

    return _builtin(
        Tool(
            "__run_workflow__",
            run_workflow,
            description="Trigger another workflow with an input payload; wait for its result or not.",
            input_model=RunWorkflowInput,
            runs_in_workflow=True,
        )
    )


def workflow_status_tool() -> Tool:
    """`__workflow_status__(workflow_run_id)`: the status of a workflow `__run_workflow__`
    started in this session, and its result once it completed (its error once it failed).

    Runs in workflow code like `__run_workflow__`: DBOS records each status and result
    read as a step, so a recovered run sees what it saw. Only children of this session's
    runs are visible, so a model cannot read another session's workflows."""

    async def workflow_status(ctx: ToolContext, workflow_run_id: str) -> dict[str, Any]:
        status = await DBOS.get_workflow_status_async(workflow_run_id)
        parent = status.parent_workflow_id if status is not None else None
        mine = parent is not None and await DBOS.run_step_async(
            {"name": "helix.workflow_of_session"}, _run_of_session, ctx.session_id, parent
        )
        if status is None or not mine:
            raise LookupError(
                f"No workflow run '{workflow_run_id}' was started by __run_workflow__ "
                "in this session"
            )
        found: dict[str, Any] = {"workflow_run_id": workflow_run_id, "result": None}
        outcome = _DONE.get(status.status)
        if outcome is None:
            return {**found, "status": "queued" if status.status == "ENQUEUED" else "running"}
        if outcome == "completed":
            result = await DBOS.get_result_async(workflow_run_id)
            return {**found, "status": "completed", "result": result}
        return {**found, "status": outcome, "error": str(status.error)}

    return _builtin(
        Tool(
            "__workflow_status__",
            workflow_status,
            description="Check a workflow started with __run_workflow__ (wait: false): its "
            "status (queued, running, completed, failed, cancelled) and, once completed, "
            "its result.",
            input_model=WorkflowStatusInput,
            runs_in_workflow=True,
        )
    )


async def _run_of_session(session_id: str, workflow_id: str) -> bool:
    """Whether `workflow_id` is the workflow of one of the session's runs."""
    async with current_runtime().engine.connect() as conn:
        row = await conn.execute(
            text("SELECT 1 FROM helix.runs WHERE workflow_id = :wid AND session_id = :sid"),
            {"wid": workflow_id, "sid": session_id},
        )
        return row.first() is not None


def _resolve_workflow(
    catalogue: dict[str, Any], workflow_id: str | None, workflow_name: str | None
) -> Callable[..., Any]:
    for key in (workflow_id, workflow_name):
        if key is None:
            continue
        named = catalogue.get(key, key)
        target = registered_workflow(named) if isinstance(named, str) else named
        if target is not None:
            return target
    raise LookupError(f"Unknown workflow '{workflow_id or workflow_name}'")


def pause_for_human_tool() -> Tool:
    """`__pause_for_human__`: pause until a human answers `{human_input, approved}`."""

    def pause_for_human(
        question: str,
        options: list[str] | None = None,
        context_summary: str | None = None,
        urgency: Literal["low", "medium", "high"] | None = None,
    ) -> None:
        """Never called: the runtime pauses the run and the human's answer is the result."""

    return _builtin(
        Tool(
            "__pause_for_human__",
            pause_for_human,
            description="Pause and ask a human reviewer a question; their answer comes back as the result.",
            input_model=PauseForHumanInput,
            human_input=True,
        )
    )


def store_memory_tool() -> Tool:
    """`__store_memory__(key, value, ttl_seconds=None)`: keep a value for this run."""

    async def store_memory(
        key: str,
        value: Any,
        ctx: ToolContext,
        ttl_seconds: float | None = None,
    ) -> dict[str, Any]:
        async with current_runtime().engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO helix.memory (run_id, key, value, stored_at, expires_at) VALUES (:rid, :key, "
                    "CAST(:value AS jsonb), now(), CASE WHEN CAST(:ttl AS double precision) IS NULL THEN NULL "
                    "ELSE now() + make_interval(secs => CAST(:ttl AS double precision)) END) "
                    "ON CONFLICT (run_id, key) DO UPDATE SET value = EXCLUDED.value, stored_at = EXCLUDED.stored_at, "
                    "expires_at = EXCLUDED.expires_at"
                ),
                {"rid": ctx.run_id, "key": key, "value": _json(value), "ttl": ttl_seconds},
            )
        return {"stored": True, "key": key, "message": f'Stored value under key "{key}"'}

    return _builtin(
        Tool(
            "__store_memory__",
            store_memory,
            description="Save a value under a key for later in this run.",
            input_model=StoreMemoryInput,
        )
    )


def retrieve_memory_tool() -> Tool:
    """`__retrieve_memory__(key)`: the value stored in this run, unless it expired."""

    async def retrieve_memory(key: str, ctx: ToolContext) -> dict[str, Any]:
        async with current_runtime().engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT value, to_char(stored_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') "
                        "FROM helix.memory WHERE run_id = :rid AND key = :key "
                        "AND (expires_at IS NULL OR expires_at > now())"
                    ),
                    {"rid": ctx.run_id, "key": key},
                )
            ).first()
        if row is None:
            return {"found": False, "key": key, "message": f'No memory found for key "{key}"'}
        return {"found": True, "key": key, "value": row[0], "stored_at": row[1]}

    return _builtin(
        Tool(
            "__retrieve_memory__",
            retrieve_memory,
            description="Recall a value stored earlier in this run.",
            input_model=RetrieveMemoryInput,
        )
    )


def log_progress_tool() -> Tool:
    """`__log_progress__(message, milestone=None, data=None)`: record a milestone."""

    async def log_progress(
        message: str,
        ctx: ToolContext,
        milestone: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        async with current_runtime().engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO helix.progress (run_id, tool_call_id, session_id, agent_name, message, milestone, data) "
                    "VALUES (:rid, :tcid, :sid, :agent, :message, :milestone, CAST(:data AS jsonb)) ON CONFLICT DO NOTHING"
                ),
                {
                    "rid": ctx.run_id,
                    "tcid": ctx.tool_call_id,
                    "sid": ctx.session_id,
                    "agent": ctx.agent_name,
                    "message": message,
                    "milestone": milestone,
                    "data": _json(data),
                },
            )
        await ctx.emit("progress", {"message": message, "milestone": milestone, "data": data})
        return {"logged": True, "milestone": milestone, "message": "Progress logged"}

    return _builtin(
        Tool(
            "__log_progress__",
            log_progress,
            description="Record a progress milestone for observability.",
            input_model=LogProgressInput,
        )
    )


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=str)


BUILTINS: dict[str, Callable[[], Tool]] = {
    "__complete__": complete_tool,
    "__run_workflow__": run_workflow_tool,
    "__workflow_status__": workflow_status_tool,
    "__pause_for_human__": pause_for_human_tool,
    "__store_memory__": store_memory_tool,
    "__retrieve_memory__": retrieve_memory_tool,
    "__log_progress__": log_progress_tool,
}


for _name, _factory in BUILTINS.items():
    register_named_tool(_name, _factory)


def get_builtin(name: str) -> Tool:
    """A built-in tool by name, as an agent's `tools=["__complete__", ...]` uses it."""
    if name not in BUILTINS:
        return named_tool(name)  # raises, naming the built-ins
    return BUILTINS[name]()


def builtin_tools(*names: str) -> list[Tool]:
    """Several built-ins at once; all of them when no name is given."""
    return [get_builtin(n) for n in (names or tuple(BUILTINS))]
