"""The MCP tasks mapping: a helix run seen as an MCP task, and approvals as elicitations.

Pure translation, no I/O: the task id is the run id, so a task is found again from
helix's own tables after any restart; a run's status maps to the task's status; a
pending approval becomes a form elicitation (`approved`, `reason`) keyed by its tool
call id, and the client's answer back into `approve(..)`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import mcp_types as types

from helix_dbos.api.runs import PendingToolCall, RunInfo

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK_META = "io.modelcontextprotocol/related-task"
SESSION_PREFIX = "mcp_"  # sessions that MCP tool calls open; a task is a run in one of them
POLL_INTERVAL_MS = 1000
FINAL_STATUSES = frozenset({"completed", "failed", "interrupted", "aborted"})

_STATUS: dict[str, types.TaskStatus] = {
    "running": "working",
    "paused": "working",
    "waiting": "input_required",
    "completed": "completed",
    "failed": "failed",
    "interrupted": "cancelled",
    "aborted": "cancelled",
}

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "title": "Approve", "description": "Run the tool call"},
        "reason": {"type": "string", "title": "Reason", "description": "Optional, for the log"},
    },
    "required": ["approved"],
}


@dataclass(frozen=True)
class Answer:
    """One approval answer read from an elicitation result."""

    tool_call_id: str
    approved: bool
    reason: str | None


def task_status(run: RunInfo, pending: list[PendingToolCall] | None = None) -> types.TaskStatus:
    """`waiting` is `input_required` only while a call waits for an answer (a run that
    waits on its sub-agents, or on an answer not applied yet, is `working`)."""
    if run.status == "waiting" and not pending:
        return "working"
    return _STATUS.get(run.status, "working")


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value) if value is not None else ""


def status_message(run: RunInfo, pending: list[PendingToolCall], inbox: str) -> str | None:
    if run.status == "failed":
        return run.error or "the run failed"
    if run.status in ("interrupted", "aborted"):
        return f"the run was {run.status}" + (f": {run.error}" if run.error else "")
    approvals = sorted({p.tool_name for p in pending if p.kind == "approval"})
    others = sorted(
        {f"{p.kind.replace('_', ' ')} for {p.tool_name}" for p in pending if p.kind != "approval"}
    )
    if not approvals and not others:
        return None
    asks = ([f"approval of {', '.join(approvals)}"] if approvals else []) + others
    return f"waiting for {'; '.join(asks)}: answer the input request or in the inbox ({inbox})"


def task_of(run: RunInfo, pending: list[PendingToolCall], inbox: str) -> types.Task:
    """The MCP task a run is (task id = run id); `pending`: the unanswered calls its
    session tree waits on."""
    created = _iso(run.started_at)
    return types.Task(
        task_id=run.run_id,
        status=task_status(run, pending),
        status_message=status_message(run, pending, inbox),
        created_at=created,
        last_updated_at=_iso(run.finished_at) or created,
        ttl=None,  # runs are kept until pruned: no expiry
        poll_interval=POLL_INTERVAL_MS,
    )


def task_wire(task: types.Task) -> dict[str, Any]:
    return task.model_dump(by_alias=True, mode="json", exclude_none=True) | {"ttl": task.ttl}


def approval_request(call: PendingToolCall) -> types.ElicitRequest:
    """A pending approval as a form elicitation the client can show its user."""
    arguments = json.dumps(call.input, default=str)[:2000]
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message=f"Approve the call of {call.tool_name} with {arguments}?",
            requested_schema=APPROVAL_SCHEMA,
        )
    )


def input_requests(pending: list[PendingToolCall]) -> dict[str, Any]:
    """The wire `inputRequests` map: one elicitation per approval, keyed by tool call id."""
    return {
        p.tool_call_id: approval_request(p).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
        for p in pending
        if p.kind == "approval"
    }


def read_answers(responses: dict[str, Any], pending: list[PendingToolCall]) -> list[Answer]:
    """Elicitation results -> approval answers; keys that are no pending approval are
    ignored (answered meanwhile, in the inbox, or never asked). Raises ValueError for a
    response that is not an elicitation result."""
    waiting = {p.tool_call_id for p in pending if p.kind == "approval"}
    answers = []
    for key, raw in responses.items():
        if key not in waiting:
            continue
        result = raw if isinstance(raw, types.ElicitResult) else _elicit_result(key, raw)
        content = result.content or {}
        approved = result.action == "accept" and content.get("approved") is True
        reason = content.get("reason")
        if result.action != "accept":
            reason = f"the MCP client answered '{result.action}'"
        answers.append(Answer(key, approved, reason if isinstance(reason, str) else None))
    return answers


def _elicit_result(key: str, raw: Any) -> types.ElicitResult:
    try:
        return types.ElicitResult.model_validate(raw, by_name=False)
    except ValueError as exc:
        raise ValueError(f"inputResponses[{key!r}] is not an elicitation result") from exc


def tool_result(run: RunInfo) -> types.CallToolResult:
    """A finished run as the `tools/call` result: its output, or an error naming why."""
    structured = {"run_id": run.run_id, "session_id": run.session_id, "status": run.status}
    if run.status == "completed":
        output = run.output
        text = output if isinstance(output, str) else json.dumps(output, default=str)
        return types.CallToolResult(
            content=[types.TextContent(text=text)],
            structured_content=structured | {"output": output},
            _meta={RELATED_TASK_META: {"taskId": run.run_id}},
        )
    message = status_message(run, [], "") or f"the run ended {run.status}"
    if run.stop_reason:  # a control ended it (`usage_limit`, `guardrail`)
        structured["stop_reason"] = run.stop_reason
    return types.CallToolResult(
        content=[types.TextContent(text=message)],
        structured_content=structured | {"error": message},
        is_error=True,
        _meta={RELATED_TASK_META: {"taskId": run.run_id}},
    )
