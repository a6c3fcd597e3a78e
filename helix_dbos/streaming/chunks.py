"""The chunk a stream reader receives. One model, discriminated by `type`.

Payloads by type:
- text_delta {delta}; thinking {text}
- tool_start {tool_call_id, tool_name, arguments}
- tool_end {tool_call_id, tool_name, success, result | error}
- tool_approval_request / client_tool_request / human_input_request
  {tool_call_id, tool_name, input, deadline}
- state_patch {set: {...}, removed: [...]}; custom {event, data}
- output {output}; error {error}
- run_started {turn}; run_resumed {tool_call_ids}; run_interrupted {reason};
  run_completed {output}; run_failed {error}; run_aborted {error}
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

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
]
CHUNK_TYPES: tuple[str, ...] = ChunkType.__args__  # type: ignore[attr-defined]
TERMINAL_CHUNK_TYPES: frozenset[str] = frozenset(
    {"run_completed", "run_failed", "run_aborted", "run_interrupted"}
)


class StreamChunk(BaseModel):
    seq: int
    session_id: str
    run_id: str | None = None
    agent_name: str | None = None
    step: int | None = None
    type: ChunkType
    payload: dict[str, Any]
    timestamp: datetime

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> StreamChunk:
        seq, session_id, run_id, agent_name, step, kind, payload, created_at = row
        return cls(
            seq=seq,
            session_id=session_id,
            run_id=run_id,
            agent_name=agent_name,
            step=step,
            type=kind,
            payload=payload if isinstance(payload, dict) else {"value": payload},
            timestamp=created_at,
        )
