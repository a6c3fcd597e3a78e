"""The chunk a stream reader receives. One model, discriminated by `type`.

Payloads by type:
- text_delta {delta}; thinking {text}
- tool_start {tool_call_id, tool_name, arguments}
- tool_end {tool_call_id, tool_name, success, result | error}
- tool_approval_request / client_tool_request / human_input_request
  {tool_call_id, tool_name, input, deadline}
- state_patch {set: {...}, removed: [...]}; custom {event, data}
- output {output}; error {error, stop_reason?}
- run_started {turn}; run_resumed {tool_call_ids}; run_interrupted {reason};
  run_completed {output}; run_failed {error, stop_reason?}; run_aborted {error}
  (`stop_reason`: "usage_limit" or "guardrail" when a control ended the run)
- run_stopped {reason, step}: a custom stop condition ended the run (before run_completed)
- double texting (a message sent while a run is live; docs/double-texting.md):
  message_queued {message_id, strategy, content}: stored, on the live run's stream;
  run_interrupted_by_message {message_id}: that message interrupts this run;
  run_rolled_back {message_id, messages, usage_rows}: this run left the visible history;
  message_steered {message_id, content, step}: taken into this run's model input at `step`
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

ChunkType = Literal[
    "text_delta",
    "thinking",
    "tool_start",
    "tool_end",
    "tool_approval_request",
    "client_tool_request",
    "human_input_request",
    "state_patch",
    "custom",
    "output",
    "error",
    "run_started",
    "run_resumed",
    "run_interrupted",
    "run_completed",
    "run_failed",
    "run_aborted",
    "run_stopped",
    "message_queued",
    "run_interrupted_by_message",
    "run_rolled_back",
    "message_steered",
]
CHUNK_TYPES: tuple[str, ...] = ChunkType.__args__  # type: ignore[attr-defined]
TERMINAL_CHUNK_TYPES: frozenset[str] = frozenset(
    {"run_completed", "run_failed", "run_aborted", "run_interrupted"}
)


class _Payload(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextDelta(_Payload):
    delta: str


class Thinking(_Payload):
    text: str


class ToolStart(_Payload):
    tool_call_id: str
    tool_name: str
    arguments: Any = None


class ToolEnd(_Payload):
    tool_call_id: str
    tool_name: str
    success: bool
    result: Any = None
    error: str | None = None


class HumanRequest(_Payload):
    """tool_approval_request, client_tool_request and human_input_request."""

    tool_call_id: str
    tool_name: str
    input: Any = None
    deadline: datetime | None = None  # ISO 8601 in the payload (older rows: an epoch)


class StatePatch(_Payload):
    set: dict[str, Any]
    removed: list[str]


class Custom(_Payload):
    event: str
    data: Any = None


class Output(_Payload):
    output: Any = None


class Error(_Payload):
    error: str | None = None
    stop_reason: str | None = None  # "usage_limit", "guardrail": the control that ended it


class RunStarted(_Payload):
    turn: int


class RunResumed(_Payload):
    tool_call_ids: list[str]


class RunInterrupted(_Payload):
    reason: str | None = None


class RunStopped(_Payload):
    reason: str
    step: int


class MessageQueued(_Payload):
    message_id: str
    strategy: str
    content: str | None = None


class RunInterruptedByMessage(_Payload):
    message_id: str


class RunRolledBack(_Payload):
    message_id: str
    messages: int = 0
    usage_rows: int = 0


class MessageSteered(_Payload):
    message_id: str
    content: str | None = None
    step: int


ChunkPayload = (
    TextDelta
    | Thinking
    | ToolStart
    | ToolEnd
    | HumanRequest
    | StatePatch
    | Custom
    | Output
    | Error
    | RunStarted
    | RunResumed
    | RunInterrupted
    | RunStopped
    | MessageQueued
    | RunInterruptedByMessage
    | RunRolledBack
    | MessageSteered
)
PAYLOAD_MODELS: dict[str, type[_Payload]] = {
    "text_delta": TextDelta,
    "thinking": Thinking,
    "tool_start": ToolStart,
    "tool_end": ToolEnd,
    "tool_approval_request": HumanRequest,
    "client_tool_request": HumanRequest,
    "human_input_request": HumanRequest,
    "state_patch": StatePatch,
    "custom": Custom,
    "output": Output,
    "error": Error,
    "run_started": RunStarted,
    "run_resumed": RunResumed,
    "run_interrupted": RunInterrupted,
    "run_completed": Output,
    "run_failed": Error,
    "run_aborted": Error,
    "run_stopped": RunStopped,
    "message_queued": MessageQueued,
    "run_interrupted_by_message": RunInterruptedByMessage,
    "run_rolled_back": RunRolledBack,
    "message_steered": MessageSteered,
}


class StreamChunk(BaseModel):
    """One chunk of a session's stream. A root session's stream also carries its
    sub-agents' chunks (seed 002: "stream events flow to the parent's stream"): those
    name the sub-agent's own session, run and agent, and `via_run_id` is the run of this
    stream that the sub-agent works for (`None` for the session's own chunks)."""

    seq: int
    session_id: str
    run_id: str | None = None
    agent_name: str | None = None
    step: int | None = None
    type: ChunkType
    payload: dict[str, Any]
    timestamp: datetime
    via_run_id: str | None = None

    @property
    def data(self) -> ChunkPayload:
        """The payload as its typed model (`payload` stays the plain JSON wire form)."""
        return PAYLOAD_MODELS[self.type].model_validate(self.payload)  # type: ignore[return-value]

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> StreamChunk:
        seq, session_id, run_id, agent_name, step, kind, payload, created_at, via = row
        return cls(
            via_run_id=via,
            seq=seq,
            session_id=session_id,
            run_id=run_id,
            agent_name=agent_name,
            step=step,
            type=kind,
            payload=payload if isinstance(payload, dict) else {"value": payload},
            timestamp=created_at,
        )
