"""Helix's runs and chunks as A2A tasks and events (pure functions, no I/O).

A task is a helix run (task id = run id) and its context is the run's session
(context id = session id). A run waiting for a human is `TASK_STATE_INPUT_REQUIRED`,
with the pending calls in the status message's data part; an aborted or interrupted
run is `TASK_STATE_CANCELED`. The run's answer is the artifact `response`: text deltas
append to it while the run works and the final output replaces it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from a2a.helpers import new_data_part, new_text_part
from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from helix_dbos.api.answers import HUMAN_REQUESTS as HUMAN_REQUESTS
from helix_dbos.api.runs import PendingToolCall, RunInfo
from helix_dbos.orchestration.types import Message as HelixMessage
from helix_dbos.streaming.chunks import StreamChunk

RESPONSE_ARTIFACT = "response"
TOOL_EVENTS = frozenset({"tool_start", "tool_end"})
STATE_BY_STATUS: dict[str, TaskState] = {
    "running": TaskState.TASK_STATE_WORKING,
    "waiting": TaskState.TASK_STATE_WORKING,  # INPUT_REQUIRED when a call waits (below)
    "paused": TaskState.TASK_STATE_WORKING,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "aborted": TaskState.TASK_STATE_CANCELED,
    "interrupted": TaskState.TASK_STATE_CANCELED,
}
FINAL_STATES = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
# Where a stream stops: the run ended, or it waits for an answer the client sends.
STOP_STATES = FINAL_STATES | {TaskState.TASK_STATE_INPUT_REQUIRED}
_TERMINAL_CHUNKS: dict[str, TaskState] = {
    "run_completed": TaskState.TASK_STATE_COMPLETED,
    "run_failed": TaskState.TASK_STATE_FAILED,
    "run_aborted": TaskState.TASK_STATE_CANCELED,
    "run_interrupted": TaskState.TASK_STATE_CANCELED,
}


def task_state(run: RunInfo, pending: Sequence[PendingToolCall]) -> TaskState:
    waits = any(p.run_id == run.run_id or p.depth > 0 for p in pending)
    if run.status in ("waiting", "paused") and waits:
        return TaskState.TASK_STATE_INPUT_REQUIRED
    return STATE_BY_STATUS.get(run.status, TaskState.TASK_STATE_WORKING)


def value_parts(value: Any) -> list[Part]:
    """A helix value as parts: text as a text part, anything else as a data part."""
    if value is None:
        return []
    if isinstance(value, str):
        return [new_text_part(value)]
    return [new_data_part(json.loads(json.dumps(value, default=str)))]


def agent_message(parts: list[Part], message_id: str, task_id: str, context_id: str) -> Message:
    return Message(
        message_id=message_id,
        role=Role.ROLE_AGENT,
        parts=parts,
        task_id=task_id,
        context_id=context_id,
    )


def pending_payload(pending: Sequence[PendingToolCall]) -> list[dict[str, Any]]:
    return [
        {
            "tool_call_id": p.tool_call_id,
            "tool_name": p.tool_name,
            "kind": p.kind,
            "input": p.input,
            "session_id": p.session_id,
        }
        for p in pending
    ]


def status_message(
    run: RunInfo, state: TaskState, pending: Sequence[PendingToolCall]
) -> Message | None:
    """What the status says beyond its state: the questions waiting, or the error."""
    if state == TaskState.TASK_STATE_INPUT_REQUIRED:
        asks = ", ".join(f"{p.kind} for {p.tool_name} ({p.tool_call_id})" for p in pending)
        parts = [
            new_text_part(f"Waiting for: {asks}"),
            new_data_part(
                json.loads(json.dumps({"pending": pending_payload(pending)}, default=str))
            ),
        ]
        return agent_message(parts, f"{run.run_id}:input-required", run.run_id, run.session_id)
    if state in (TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED) and run.error:
        parts = failure_parts(run.error, run.stop_reason)
        return agent_message(parts, f"{run.run_id}:{run.status}", run.run_id, run.session_id)
    return None


def failure_parts(error: str, stop_reason: str | None) -> list[Part]:
    """The error as text; a control's stop (`usage_limit`, `guardrail`) as a data part."""
    parts = [new_text_part(error)]
    if stop_reason:
        parts.append(new_data_part({"stop_reason": stop_reason}))
    return parts


def response_artifact(parts: list[Part]) -> Artifact:
    return Artifact(artifact_id=RESPONSE_ARTIFACT, name=RESPONSE_ARTIFACT, parts=parts)


def history(messages: Sequence[HelixMessage], run: RunInfo) -> list[Message]:
    """The run's user and assistant texts (tool traffic stays in helix's transcript)."""
    out = []
    for i, m in enumerate(messages):
        if m.role not in ("user", "assistant") or not m.content:
            continue
        role = Role.ROLE_USER if m.role == "user" else Role.ROLE_AGENT
        out.append(
            Message(
                message_id=f"{run.run_id}:{i}",
                role=role,
                parts=[new_text_part(m.content)],
                task_id=run.run_id,
                context_id=run.session_id,
            )
        )
    return out


def build_task(
    run: RunInfo,
    pending: Sequence[PendingToolCall],
    messages: Sequence[HelixMessage] = (),
    streamed_text: str = "",
) -> Task:
    state = task_state(run, pending)
    status = TaskStatus(state=state)
    said = status_message(run, state, pending)
    if said is not None:
        status.message.CopyFrom(said)
    task = Task(id=run.run_id, context_id=run.session_id, status=status)
    if state == TaskState.TASK_STATE_COMPLETED:
        task.artifacts.append(response_artifact(value_parts(run.output)))
    elif streamed_text:
        task.artifacts.append(response_artifact([new_text_part(streamed_text)]))
    task.history.extend(history(messages, run))
    task.metadata.update({"helix": {"agent": run.agent_name, "status": run.status}})
    return task


class ChunkEvents:
    """One run's chunks as A2A events, in order; `text` keeps what the deltas said."""

    def __init__(self, run_id: str, session_id: str) -> None:
        self.run_id, self.session_id = run_id, session_id
        self.text = ""

    def status(self, state: TaskState, message: Message | None = None) -> TaskStatusUpdateEvent:
        event = TaskStatusUpdateEvent(
            task_id=self.run_id, context_id=self.session_id, status=TaskStatus(state=state)
        )
        if message is not None:
            event.status.message.CopyFrom(message)
        return event

    def artifact(self, parts: list[Part], *, append: bool, last: bool) -> TaskArtifactUpdateEvent:
        return TaskArtifactUpdateEvent(
            task_id=self.run_id,
            context_id=self.session_id,
            artifact=response_artifact(parts),
            append=append,
            last_chunk=last,
        )

    def of(self, chunk: StreamChunk) -> list[TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
        """The events one chunk stands for (none for the ones A2A has no word for).
        A human request is handled by the caller, which knows every pending call."""
        own = chunk.run_id == self.run_id
        if chunk.type == "text_delta" and own:
            delta = str(chunk.payload.get("delta", ""))
            first = not self.text
            self.text += delta
            return [self.artifact([new_text_part(delta)], append=not first, last=False)]
        if chunk.type in TOOL_EVENTS:
            data = {"type": chunk.type, "agent": chunk.agent_name, **chunk.payload}
            message = agent_message(
                [new_data_part(json.loads(json.dumps(data, default=str)))],
                f"{chunk.session_id}:{chunk.seq}",
                self.run_id,
                self.session_id,
            )
            return [self.status(TaskState.TASK_STATE_WORKING, message)]
        if chunk.type == "run_resumed" and own:
            return [self.status(TaskState.TASK_STATE_WORKING)]
        if chunk.type in _TERMINAL_CHUNKS and own:
            state = _TERMINAL_CHUNKS[chunk.type]
            if state == TaskState.TASK_STATE_COMPLETED:
                output = value_parts(chunk.payload.get("output"))
                return [
                    self.artifact(output, append=False, last=True),
                    self.status(state),
                ]
            error = chunk.payload.get("error") or chunk.payload.get("reason")
            stop_reason = chunk.payload.get("stop_reason")
            said = (
                agent_message(
                    failure_parts(str(error), str(stop_reason) if stop_reason else None),
                    f"{self.run_id}:{chunk.type}",
                    self.run_id,
                    self.session_id,
                )
                if error
                else None
            )
            return [self.status(state, said)]
        return []
