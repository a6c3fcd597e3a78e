"""Sessions, runs, pending calls and usage as the API shows them: what `HelixDBOS`
returns and what the HTTP API and the client carry."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

# Who must answer a pending tool call: a human approving it, a client running it, a human
# typing an input.
ToolCallKind = Literal["approval", "client", "human_input"]


class SessionInfo(BaseModel):
    session_id: str
    agent_name: str
    status: str
    state: dict[str, Any]
    output: Any = None
    error: str | None = None
    parent_session_id: str | None = None
    turn_count: int = 0
    # The agent a later message goes to: the target of the session's latest handoff
    # (docs/handoffs.md), else `agent_name`.
    current_agent: str | None = None


class RunInfo(BaseModel):
    run_id: str
    session_id: str
    workflow_id: str
    agent_name: str
    turn: int
    status: str
    step_count: int
    output: Any = None
    error: str | None = None
    waiting_for: str | None = None
    started_at: Any = None
    finished_at: Any = None
    # What ended the run when the model did not: "stop_when", "usage_limit".
    stop_reason: str | None = None


class PendingToolCall(BaseModel):
    """A tool call waiting for a human or a client (`HelixDBOS.pending_tool_calls`)."""

    tool_call_id: str
    tool_name: str
    kind: ToolCallKind
    input: Any = None
    run_id: str
    deadline_at: datetime | None = None
    answered: bool = Field(False, description="An answer was sent; the run has not applied it yet")
    session_id: str | None = Field(
        None, description="The session whose run waits: a sub-agent's when `depth` > 0"
    )
    agent_name: str | None = Field(None, description="That session's agent")
    depth: int = Field(
        0,
        description="How far below the session asked about (a run list: below its root) "
        "the waiting session is: 0 itself, 1 a sub-agent or companion, 2 theirs, ...",
    )


class UsageSummary(BaseModel):
    """Calls and tokens of a session, a run or a session tree (`HelixDBOS.get_usage`).
    Tokens count the work itself: a `subagent` row counts only in `subagent_calls`."""

    llm_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    subagent_calls: int = 0
