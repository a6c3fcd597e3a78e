"""Every route of the helix server as a typed call: method, path, body, response model.

The sync and async clients send these the same way, so each route is described once,
with the server's own request and response models (`helix_dbos.api.models`): a
request the server would refuse for its shape fails here already, with pydantic's
message, and every answer comes back as the model the OpenAPI document names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, TypeAdapter

from helix_dbos.api.checkpoints import Checkpoint, CheckpointView
from helix_dbos.api.models import (
    AddAIMessageRequest,
    AnsweredCall,
    CancelQueuedRequest,
    ChatInvokeRequest,
    ChatRequest,
    ChatResponse,
    ControlRequest,
    ControlResponse,
    Forked,
    ForkRequest,
    QueuedMessage,
    ResumeRequest,
    RunStarted,
    RunSummary,
    StartRequest,
    StatusResponse,
    SubmitToolResultRequest,
    SubmitToolResultResponse,
    TranscriptMessage,
    UsageResponse,
    Workspace,
)
from helix_dbos.api.schedules import (
    Backfilled,
    BackfillRequest,
    FiringInfo,
    ScheduleInfo,
    ScheduleRequest,
    Triggered,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[Any], T]
    params: dict[str, Any] = field(default_factory=dict)
    body: BaseModel | None = None
    runs_a_turn: bool = False  # the answer comes when a whole turn ended (the chat routes)
    raw: bool = False  # the answer is bytes (a content part's download), not JSON

    def json(self) -> Any:
        """The body as the server reads it: only the fields the caller set."""
        if self.body is None:
            return None
        return self.body.model_dump(mode="json", exclude_unset=True)


def _model(kind: type[T]) -> Callable[[Any], T]:
    adapter = TypeAdapter(kind)
    return adapter.validate_python


def _segment(value: str) -> str:
    return quote(value, safe="")


def _fields(**values: Any) -> dict[str, Any]:
    """Only the arguments given (None: not sent), so the server's defaults apply."""
    return {k: v for k, v in values.items() if v is not None}


def start(**values: Any) -> Call[RunStarted]:
    return Call("POST", "/start", _model(RunStarted), body=StartRequest(**_fields(**values)))


def resume(session_id: str, message: str | None) -> Call[RunStarted]:
    body = ResumeRequest(**_fields(session_id=session_id, message=message))
    return Call("POST", "/resume", _model(RunStarted), body=body)


def status(session_id: str) -> Call[StatusResponse]:
    return Call("GET", "/status", _model(StatusResponse), params={"session_id": session_id})


def control(action: str, session_id: str, reason: str | None) -> Call[ControlResponse]:
    body = ControlRequest(**_fields(session_id=session_id, reason=reason))
    return Call("POST", f"/{action}", _model(ControlResponse), body=body)


def submit_tool_result(**values: Any) -> Call[SubmitToolResultResponse]:
    body = SubmitToolResultRequest(**values)
    return Call("POST", "/submit-tool-result", _model(SubmitToolResultResponse), body=body)


def list_runs(status: str | None, session_id: str | None, limit: int) -> Call[list[RunSummary]]:
    params = _fields(status=status, session_id=session_id, limit=limit)
    return Call("GET", "/runs", _model(list[RunSummary]), params=params)


def messages(session_id: str) -> Call[list[TranscriptMessage]]:
    path = f"/sessions/{_segment(session_id)}/messages"
    return Call("GET", path, _model(list[TranscriptMessage]))


def part(session_id: str, sha256: str) -> Call[bytes]:
    path = f"/sessions/{_segment(session_id)}/parts/{_segment(sha256)}"
    return Call("GET", path, bytes, raw=True)


def usage(session_id: str, children: bool) -> Call[UsageResponse]:
    path = f"/sessions/{_segment(session_id)}/usage"
    return Call("GET", path, _model(UsageResponse), params={"children": children})


def checkpoints(session_id: str) -> Call[list[Checkpoint]]:
    path = f"/sessions/{_segment(session_id)}/checkpoints"
    return Call("GET", path, _model(list[Checkpoint]))


def checkpoint(session_id: str, checkpoint_id: str) -> Call[CheckpointView]:
    path = f"/sessions/{_segment(session_id)}/checkpoints/{_segment(checkpoint_id)}"
    return Call("GET", path, _model(CheckpointView))


def fork(session_id: str, **values: Any) -> Call[Forked]:
    path = f"/sessions/{_segment(session_id)}/fork"
    return Call("POST", path, _model(Forked), body=ForkRequest(**_fields(**values)))


def answered(limit: int) -> Call[list[AnsweredCall]]:
    return Call("GET", "/answered", _model(list[AnsweredCall]), params={"limit": limit})


def queue(session_id: str) -> Call[list[QueuedMessage]]:
    params = {"session_id": session_id}
    return Call("GET", "/queue", _model(list[QueuedMessage]), params=params)


def cancel_queued(session_id: str, message_id: str) -> Call[QueuedMessage]:
    body = CancelQueuedRequest(session_id=session_id, message_id=message_id)
    return Call("POST", "/queue/cancel", _model(QueuedMessage), body=body)


def workspaces() -> Call[list[Workspace]]:
    return Call("GET", "/workspaces", _model(list[Workspace]))


def chat(**values: Any) -> Call[ChatResponse]:
    body = ChatRequest(**_fields(**values))
    return Call("POST", "/chat", _model(ChatResponse), body=body, runs_a_turn=True)


def chat_invoke(**values: Any) -> Call[ChatResponse]:
    body = ChatInvokeRequest(**_fields(**values))
    return Call("POST", "/chat/invoke", _model(ChatResponse), body=body, runs_a_turn=True)


def add_ai_message(**values: Any) -> Call[ChatResponse]:
    body = AddAIMessageRequest(**_fields(**values))
    return Call("POST", "/chat/add-ai-message", _model(ChatResponse), body=body, runs_a_turn=True)


# --- schedules (docs/schedules.md) ---------------------------------------------------


def schedules(agent: str | None) -> Call[list[ScheduleInfo]]:
    return Call("GET", "/schedules", _model(list[ScheduleInfo]), params=_fields(agent=agent))


def create_schedule(**values: Any) -> Call[ScheduleInfo]:
    body = ScheduleRequest(**_fields(**values))
    return Call("POST", "/schedules", _model(ScheduleInfo), body=body)


def schedule(name: str) -> Call[ScheduleInfo]:
    return Call("GET", f"/schedules/{_segment(name)}", _model(ScheduleInfo))


def schedule_action(name: str, action: str) -> Call[ScheduleInfo]:
    """`pause` or `resume`."""
    return Call("POST", f"/schedules/{_segment(name)}/{action}", _model(ScheduleInfo))


def delete_schedule(name: str) -> Call[ScheduleInfo]:
    return Call("DELETE", f"/schedules/{_segment(name)}", _model(ScheduleInfo))


def backfill_schedule(name: str, **values: Any) -> Call[Backfilled]:
    body = BackfillRequest(**_fields(**values))
    return Call("POST", f"/schedules/{_segment(name)}/backfill", _model(Backfilled), body=body)


def trigger_schedule(name: str) -> Call[Triggered]:
    return Call("POST", f"/schedules/{_segment(name)}/trigger", _model(Triggered))


def schedule_firings(name: str, limit: int) -> Call[list[FiringInfo]]:
    path = f"/schedules/{_segment(name)}/firings"
    return Call("GET", path, _model(list[FiringInfo]), params={"limit": limit})


def stream_params(session_id: str, run_id: str | None, after_seq: int) -> dict[str, Any]:
    return _fields(session_id=session_id, run_id=run_id, after_seq=after_seq or None)


def answer_fields(
    kind: str,
    *,
    result: Any = None,
    error: str | None = None,
    approved: bool | None = None,
    reason: str | None = None,
    human_input: str | None = None,
) -> dict[str, Any]:
    """The fields of one answer kind (`SubmitToolResultRequest` refuses any other)."""
    if kind == "client-tool-result":
        return {"error": error} if error is not None else {"result": result}
    if kind == "approval-response":
        return _fields(approved=approved, reason=reason)
    return _fields(human_input=human_input, approved=approved)
