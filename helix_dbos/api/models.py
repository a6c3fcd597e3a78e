"""Request and response bodies of the HTTP API.

Every endpoint declares its models here, so the OpenAPI document describes each
body completely. Requests forbid unknown fields: a typo is a 422 with a message,
not a silently ignored option.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# The API's own models, re-exported here with the rest of the HTTP bodies.
from helix_dbos.api.runs import PendingToolCall as PendingToolCall
from helix_dbos.api.runs import RunInfo, SessionInfo, UsageSummary
from helix_dbos.api.runs import ToolCallKind as ToolCallKind
from helix_dbos.orchestration.completion import DEFAULT_NUDGE_MESSAGE
from helix_dbos.orchestration.double_texting import MultitaskStrategy
from helix_dbos.orchestration.parts import BinaryContent, DocumentUrl, ImageUrl, StoredBlob
from helix_dbos.orchestration.usage_limits import UsageLimits

AnswerKind = Literal["client-tool-result", "approval-response", "human-input"]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: An image or a document sent with a message: `{"kind": "binary", "data": <base64>,
#: "media_type": "application/pdf", "identifier": "q3.pdf"}`, `{"kind": "image-url",
#: "url": ...}` or `{"kind": "document-url", "url": ...}` (docs/content-parts.md).
ContentPart = Annotated[BinaryContent | ImageUrl | DocumentUrl, Field(discriminator="kind")]
#: What a transcript shows of a part: a stored blob's reference (its bytes at
#: `GET /sessions/{id}/parts/{sha256}`) or a URL.
PartReference = Annotated[StoredBlob | ImageUrl | DocumentUrl, Field(discriminator="kind")]
PARTS_HELP = (
    "Images and documents sent with the message: base64 bytes (kind 'binary') or URLs "
    "('image-url', 'document-url'); stored once by sha256"
)


STRATEGY_HELP = (
    "What to do if the session already has a live run (double texting, LangGraph's name "
    "and values): reject (409, the default unless the agent sets one), enqueue, "
    "interrupt, rollback, or steer"
)


class ErrorResponse(BaseModel):
    """Every error: a message a person can act on."""

    detail: str = Field(description="What went wrong and, where possible, what to do")


# --- runs -------------------------------------------------------------------


class UsageLimitsBody(_Request):
    """`UsageLimits` over the wire: caps over the run and its descendants
    (docs/agent-controls.md); unset fields are no limit."""

    requests: int | None = Field(None, ge=0, description="Model calls")
    input_tokens: int | None = Field(None, ge=0)
    output_tokens: int | None = Field(None, ge=0)
    total_tokens: int | None = Field(None, ge=0)
    cost_usd: float | None = Field(None, ge=0, allow_inf_nan=False, description="Priced cost")

    def limits(self) -> UsageLimits:
        return UsageLimits(**self.model_dump(exclude_none=True))


class StartRequest(_Request):
    agent: str = Field(description="Name of a registered agent")
    input: str | None = Field(None, description="The user's message (omit to run without one)")
    parts: list[ContentPart] = Field(default_factory=list, description=PARTS_HELP)
    session_id: str | None = Field(
        None, description="Continue this session (a new turn); omit to start a new session"
    )
    state: dict[str, Any] | None = Field(
        None, description="Initial custom state, validated against the agent's state_schema"
    )
    priority: int | None = Field(
        None,
        ge=1,
        le=2**31 - 1,
        description="Enqueue the run on its agent's queue with this priority (1 runs first)",
    )
    idempotency_key: str | None = Field(
        None,
        min_length=1,
        description="Start at most once: a repeated start with the same key answers the "
        "run the first one started (a remote parent's replayed step, a client's retry)",
    )
    multitask_strategy: MultitaskStrategy | None = Field(None, description=STRATEGY_HELP)
    tenant: str | None = Field(
        None,
        min_length=1,
        description="Who the run is for: its tenant's share of a limited model's calls "
        "(docs/limits.md); helix.runs.tenant in SQL",
    )
    usage_limits: UsageLimitsBody | None = Field(
        None,
        description="Stop the run (failed, stop_reason usage_limit) once it and its "
        "descendants reach one of these (docs/agent-controls.md)",
    )


class ResumeRequest(_Request):
    session_id: str
    message: str | None = Field(None, description="Optional user message for the new run")


class RunStarted(BaseModel):
    session_id: str
    run_id: str
    workflow_id: str = Field(description="DBOS workflow id: the destination of DBOS.send answers")
    message_id: str | None = Field(
        None,
        description="Set when the message was stored (double texting): `run_id` is then the "
        "run it will start (a steered message joins the live run instead; see /queue)",
    )


class QueuedMessage(BaseModel):
    """A message stored while its session had a live run (double texting)."""

    message_id: str
    session_id: str
    strategy: str
    content: str | None = None
    status: str = Field(description="queued, started, steered or cancelled")
    position: int | None = Field(None, description="Place in line while queued (1 = next)")
    run_id: str | None = Field(None, description="The run it started or was steered into")
    step: int | None = None
    target_run_id: str | None = Field(None, description="The run that was live when it arrived")
    created_at: datetime | None = None
    taken_at: datetime | None = None


class CancelQueuedRequest(_Request):
    session_id: str
    message_id: str


class StatusResponse(BaseModel):
    session: SessionInfo
    current_run: RunInfo | None = Field(description="The live run, or null when nothing runs")
    last_run: RunInfo | None = Field(description="The most recent run, live or ended")
    pending_tool_calls: list[PendingToolCall]


class ControlRequest(_Request):
    session_id: str
    reason: str | None = None


class ChatControlRequest(_Request):
    """`/chat/{session_id}/interrupt` and `/abort`: the session is in the path."""

    reason: str | None = None


class ControlResponse(BaseModel):
    session_id: str
    run_id: str | None = Field(
        description="The session's own live run, or null when only sessions below it had one"
    )
    run_ids: list[str] = Field(
        default_factory=list,
        description="Every run reached: the session's own first, then those of the sessions "
        "below it (sub-agents, companions, theirs)",
    )
    action: Literal["interrupt_requested", "aborted"] = Field(
        description="interrupt_requested: the run stops at its next step boundary; "
        "aborted: the run was cancelled now"
    )


class ChatSubmitToolResultRequest(_Request):
    """One answer to a pending tool call; `kind` says which fields apply.

    - client-tool-result: `result` or `error` (exactly one)
    - approval-response: `approved`, optional `reason`
    - human-input: `human_input`, optional `approved`

    `/chat/{session_id}/submit-tool-result` takes this body (the session is in the path).
    """

    tool_call_id: str
    kind: AnswerKind
    result: Any = None
    error: str | None = None
    approved: bool | None = None
    reason: str | None = None
    human_input: str | None = None
    answered_by: str | None = None  # who answers, shown in the inbox (default: "HTTP API")

    @model_validator(mode="after")
    def _fields_match_kind(self) -> ChatSubmitToolResultRequest:
        allowed = {
            "client-tool-result": {"result", "error"},
            "approval-response": {"approved", "reason"},
            "human-input": {"human_input", "approved"},
        }[self.kind]
        given = self.model_fields_set - {"session_id", "tool_call_id", "kind", "answered_by"}
        stray = sorted(given - allowed)
        if stray:
            raise ValueError(
                f"{', '.join(stray)} does not apply to kind '{self.kind}' "
                f"(it takes {', '.join(sorted(allowed))})"
            )
        if self.kind == "client-tool-result" and len(given & {"result", "error"}) != 1:
            raise ValueError("a client-tool-result needs exactly one of result or error")
        if self.kind == "approval-response" and self.approved is None:
            raise ValueError("an approval-response needs approved: true or false")
        return self


class SubmitToolResultRequest(ChatSubmitToolResultRequest):
    """`/submit-tool-result`: the answer and the session it is for."""

    session_id: str


class SubmitToolResultResponse(BaseModel):
    session_id: str
    tool_call_id: str
    kind: AnswerKind
    accepted: bool = Field(True, description="The answer was recorded and sent to the run")


class Workspace(BaseModel):
    """Seed 002's workspaces: the DBOS runtime has none, so `GET /workspaces` is empty."""

    id: str
    name: str | None = None


# --- reads for the inbox ------------------------------------------------------


class RunSummary(BaseModel):
    run_id: str
    session_id: str
    agent_name: str
    workflow_id: str
    turn: int
    status: str
    step_count: int
    waiting_for: str | None = None
    waiting_since: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    stop_reason: str | None = Field(
        None, description="What ended it when the model did not: stop_when, usage_limit"
    )
    tenant: str | None = Field(None, description="Who the run is for (`execute(tenant=...)`)")
    queued_for: str | None = Field(
        None, description="The model queue a running run waits on for a call slot"
    )
    root_session_id: str | None = Field(
        None, description="The root of the run's session tree (itself for a root session)"
    )
    depth: int = Field(0, description="How far below its root the run's session is")
    app_version: str | None = Field(
        None,
        description="The application version that started the run's workflow: only a "
        "worker of that version resumes it (docs/upgrading.md)",
    )
    tool_calls: list[PendingToolCall] = Field(
        default_factory=list, description="Pending tool calls (runs waiting for a human)"
    )


class AnsweredCall(BaseModel):
    """A tool call that got its answer (or timed out), for the inbox's "Recently answered"."""

    run_id: str
    session_id: str
    agent_name: str
    tool_call_id: str
    tool_name: str
    kind: str
    status: str
    input: Any = None
    reason: str | None = None
    error: str | None = None
    answered_at: datetime | None = None
    answered_by: str | None = Field(
        None, description='"DBOS.send" for a raw DBOS message; None: the Python API'
    )
    resolved_at: datetime | None = None
    run_status: str


class TranscriptMessage(BaseModel):
    seq: int
    run_id: str | None = None
    role: str
    content: str | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    created_at: datetime | None = None
    parts: list[PartReference] = Field(
        default_factory=list,
        description="Images and documents beside the text, as references",
    )


class UsageRow(BaseModel):
    key: str | None = Field(description="The model, session or agent this row sums up")
    llm_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int


class UsageResponse(BaseModel):
    session_id: str
    include_children: bool = False  # the sessions below it are counted too
    totals: UsageSummary
    by_model: list[UsageRow]


# --- chat (seed 004) ------------------------------------------------------------


class TerminatingConfigModel(_Request):
    """Seed 004: the named tools end the run; their output is the response."""

    tool_ids: list[str] = Field(min_length=1, description="Tool names that end the run")
    consecutive_nudges: int = Field(1, ge=0)
    nudge_message: str = DEFAULT_NUDGE_MESSAGE
    max_invocations: int = Field(64, ge=1)


class _ChatRequest(_Request):
    context_id: str = Field(description="The conversation: a helix session id")
    agent: str | None = Field(None, description="Agent name (default: the server's default)")
    terminating_config: TerminatingConfigModel | None = None
    multitask_strategy: MultitaskStrategy | None = Field(None, description=STRATEGY_HELP)
    tenant: str | None = Field(
        None,
        min_length=1,
        description="Who the run is for: its tenant's share of a limited model's calls "
        "(docs/limits.md); helix.runs.tenant in SQL",
    )


class ChatRequest(_ChatRequest):
    message: str
    parts: list[ContentPart] = Field(default_factory=list, description=PARTS_HELP)


class ChatInvokeRequest(_ChatRequest):
    pass


class AddAIMessageRequest(_ChatRequest):
    prompt: str | None = Field(None, description="Optional instruction for the AI's next message")


class ChatResponse(BaseModel):
    """Seed 004's response, plus where to find the run."""

    response: str | None = Field(
        description="The terminating tool's output (or the final text) as a string"
    )
    saved_ai_messages: bool = Field(True, description="The messages are stored in the session")
    generated_messages: list[dict[str, Any]] = Field(
        description="This run's messages: {sender, message}, {type: tool_call, ...}, "
        "{type: tool_response, ...}"
    )
    session_id: str
    run_id: str
    status: str = Field(description="completed, or waiting (HTTP 202) when a human must answer")
    pending_tool_calls: list[PendingToolCall] = Field(default_factory=list)


class ChatErrorResponse(ErrorResponse):
    """A chat run that ended without completing (failed, interrupted, aborted)."""

    session_id: str
    run_id: str
    status: str
    generated_messages: list[dict[str, Any]] = Field(default_factory=list)


# --- time travel (docs/time-travel.md) ---------------------------------------------


class ForkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    at: str = Field(description="The checkpoint to fork from (its checkpoint_id)")
    state: dict[str, Any] | None = Field(
        None, description="The fork's state instead of the checkpoint's (validated)"
    )
    new_session_id: str | None = Field(
        None, description="The new session's id (a new one when omitted)"
    )


class Forked(BaseModel):
    session_id: str = Field(description="The new session: resume it, or start a run in it")
    forked_from_session_id: str
    forked_from_checkpoint_id: str
