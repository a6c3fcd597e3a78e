"""Human-in-the-loop inside the agent workflow: gate, suspend, wait, resume.

A gated call (approval or client-executed) is recorded in `helix.tool_calls`
with a deadline, announced with a stream chunk, and answered by a DBOS message
(`helix.approval`, `helix.tool_result`, `helix.human_input`). The wait is
`recv_async`, so a waiting run holds no thread. Deadlines come from the database
clock in the suspend transaction (checkpointed); whether a wait timed out is read
from `recv`'s recorded result and, when it holds nothing, a recorded clock, so a replay
takes the same path.

DBOS's `recv` returns nothing before its timeout when a late notification wakes it: its
check at the start finds a message already stored and takes it, and that message's
NOTIFY (sent after the commit, coalesced) then wakes the next `recv` on the topic, which
finds nothing to take. A pending call must not time out for it (patch
`RECV_WOKEN_EARLY`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

from dbos import DBOS
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from helix_dbos.api.answers import HUMAN_REQUEST_KINDS
from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.hooks import HookContext, RunEvent, fire_safely
from helix_dbos.definitions.tool import Tool
from helix_dbos.errors import ToolArgumentsError, ToolOutputError
from helix_dbos.log_events import RUN_RESUMED, RUN_SUSPENDED, gate_event, log_event
from helix_dbos.orchestration.messages import to_json_text
from helix_dbos.orchestration.types import ToolCall
from helix_dbos.runtime.dbos.dbos_internals import execution_owner
from helix_dbos.runtime.process.patches import RECV_WOKEN_EARLY
from helix_dbos.runtime.process.process_runtime import Runtime, current_runtime
from helix_dbos.runtime.steps.commit import StepCommit, write_head
from helix_dbos.runtime.steps.step_types import ChunkRecord, GateDecision, GateKind, ToolOutcome
from helix_dbos.runtime.steps.tool_step import TOOL_STARTED, tool_context
from helix_dbos.store import repository as repo
from helix_dbos.store.repository import PendingToolCall
from helix_dbos.store.wait_resume import WaitResumed, resume_wait

INTERRUPT_TOPIC = "helix.interrupt"
TOPICS: dict[GateKind, str] = {k: r.topic for k, r in HUMAN_REQUEST_KINDS.items()}
WAITING_FOR: dict[GateKind, str] = {k: r.waiting_for for k, r in HUMAN_REQUEST_KINDS.items()}
CHUNK_TYPES: dict[GateKind, str] = {k: r.chunk_type for k, r in HUMAN_REQUEST_KINDS.items()}
T = TypeVar("T")


class ApprovalAnswer(BaseModel):
    """`{"tool_call_id": ..., "approved": true|false, "reason": "..."}` on `helix.approval`."""

    model_config = ConfigDict(extra="forbid")
    tool_call_id: str
    approved: bool
    reason: str | None = None


class ToolResultAnswer(BaseModel):
    """`{"tool_call_id": ..., "result": ...}` or `{"tool_call_id": ..., "error": "..."}` on `helix.tool_result`."""

    model_config = ConfigDict(extra="forbid")
    tool_call_id: str
    result: Any = None
    error: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> ToolResultAnswer:
        if self.error is not None and self.result is not None:
            raise ValueError("give either result or error, not both")
        return self


class HumanInputAnswer(BaseModel):
    """`{"tool_call_id": ..., "human_input": "...", "approved": true}` on `helix.human_input`."""

    model_config = ConfigDict(extra="forbid")
    tool_call_id: str
    human_input: str | None = None
    approved: bool | None = None


ANSWER_MODELS: dict[
    GateKind, type[ApprovalAnswer] | type[ToolResultAnswer] | type[HumanInputAnswer]
] = {
    "approval": ApprovalAnswer,
    "client": ToolResultAnswer,
    "human_input": HumanInputAnswer,
}


class InterruptNotice(BaseModel):
    """`{"interrupt": true, "reason": "..."}` on any answer topic: stop waiting now
    (`interrupt()` sends it to a waiting run; any DBOS client may too)."""

    model_config = ConfigDict(extra="forbid")
    interrupt: Literal[True]
    reason: str | None = None


AnswerPayload = ApprovalAnswer | ToolResultAnswer | HumanInputAnswer


@dataclass(frozen=True)
class Answer:
    """One pending call's answer as the workflow received it (`None`: the deadline passed)."""

    kind: GateKind
    payload: AnswerPayload | None
    wait_ms: float


@dataclass(frozen=True)
class Resolution:
    """How a pending `helix.tool_calls` row is closed when the run resumes."""

    tool_call_id: str
    status: Literal["approved", "denied", "timed_out", "completed", "failed", "interrupted"]
    result: Any = None
    error: str | None = None
    reason: str | None = None
    kind: GateKind | None = None  # what the call waited for (for its log event)

    @classmethod
    def of(cls, call_id: str, answer: Answer) -> Resolution:
        p, kind = answer.payload, answer.kind
        if p is None:
            return cls(call_id, "timed_out", kind=kind)
        if isinstance(p, ApprovalAnswer):
            status: Literal["approved", "denied"] = "approved" if p.approved else "denied"
            return cls(call_id, status, reason=p.reason, kind=kind)
        if isinstance(p, ToolResultAnswer):
            failed = p.error is not None
            return cls(
                call_id,
                "failed" if failed else "completed",
                result=p.result,
                error=p.error,
                kind=kind,
            )
        return cls(call_id, "completed", result=p.model_dump(), kind=kind)


async def evaluate_gates(
    session_id: str,
    run_id: str,
    agent_name: str,
    step: int,
    calls: list[ToolCall],
    state: dict[str, Any],
) -> GateDecision:
    """Which calls need a human: client tools, and approval predicates (fail closed)."""
    agent = current_runtime().agent(agent_name)
    gated: dict[str, GateKind] = {}
    for call in calls:
        tool = agent.tool(call.name)
        if tool is None:
            continue
        if tool.human_input:
            try:
                tool.validate_arguments(call.arguments)
            except ToolArgumentsError:
                continue  # runs as a plain call, which returns the argument error to the model
            gated[call.id] = "human_input"
        elif tool.execute == "client":
            gated[call.id] = "client"
        elif tool.require_approval:
            ctx = tool_context(agent, session_id, run_id, step, call, state)
            if await tool.needs_approval(call.arguments, ctx):
                gated[call.id] = "approval"
    return GateDecision(gated)


def needs_gate_step(agent: Agent, calls: list[ToolCall]) -> bool:
    for call in calls:
        tool = agent.tool(call.name)
        if tool is not None and tool.waits_for_answer:
            return True
    return False


async def _suspend(
    session: repo.SQLConnection,
    workflow_id: str,
    head: StepCommit,
    pending: list[PendingToolCall],
) -> dict[str, float] | None:
    """Record the pending calls and their deadlines, mark the run waiting, and write the
    step's head first, so the transcript shows the model's request while the run waits.

    A run that ended first (an abort that committed before this transaction took the
    run's row) gets no head, and its calls' requests are recorded already closed: the
    abort could not see them, so each gets its one result here (issue 46)."""
    session_id, run_id, agent_name, step = head.session_id, head.run_id, head.agent_name, head.step
    await write_head(session, head)
    if await repo.interrupt_pending(session, workflow_id):
        return None  # interrupted before the wait began: the run does not suspend
    deadlines = await repo.insert_pending_tool_calls(
        session, session_id, run_id, workflow_id, pending
    )
    waiting_for = ",".join(sorted({WAITING_FOR[p.kind] for p in pending}))
    # A run paused only for human input shows as `paused`; approvals and client tools as `waiting`.
    status = "paused" if all(p.kind == "human_input" for p in pending) else "waiting"
    if not await repo.update_live_run(
        session, run_id, status=status, waiting_for=waiting_for, waiting_since_now=True
    ):
        run = await repo.get_run(session, run_id)
        reason = (run.error if run else None) or "Not asked: the run had ended"
        await repo.abort_pending_tool_calls(session, run_id, reason)
        return deadlines  # the ended run's workflow goes no further (it was cancelled)
    await repo.update_session(session, session_id, status=status)
    await repo.insert_chunks(
        session,
        session_id,
        run_id,
        agent_name,
        step,
        [
            ChunkRecord(
                f"{run_id}:{step}:{p.tool_call_id}:request",
                CHUNK_TYPES[p.kind],
                {
                    "tool_call_id": p.tool_call_id,
                    "tool_name": p.tool_name,
                    "input": p.input,
                    # ISO 8601 like every time helix shows (/status, the CLI's JSON)
                    "deadline": datetime.fromtimestamp(
                        deadlines[p.tool_call_id], tz=timezone.utc
                    ).isoformat(),
                },
            )
            for p in pending
        ],
    )
    ids: dict[str, Any] = {
        "run_id": run_id,
        "session_id": session_id,
        "agent_name": agent_name,
        "step": step,
    }
    for p in pending:
        log_event(
            gate_event(p.kind, "suspended"),
            tool_call_id=p.tool_call_id,
            tool_name=p.tool_name,
            timeout_seconds=p.timeout_seconds,
            **ids,
        )
    log_event(RUN_SUSPENDED, waiting_for=waiting_for, status=status, **ids)
    return deadlines


async def _resume(rt: Runtime, head: StepCommit, resolutions: list[Resolution]) -> None:
    """Close the wait's calls and, if the run works again, say so in a `run_resumed` chunk
    that names the agent and the step that waited, like every chunk: one statement from
    workflow code, no step of its own (`store/wait_resume.py` says why none is needed)."""
    session_id, run_id = head.session_id, head.run_id
    ids = [r.tool_call_id for r in resolutions]
    chunk = ChunkRecord(f"{run_id}:resumed:{','.join(ids)}", "run_resumed", {"tool_call_ids": ids})
    done = await rt.on_connection(
        "helix.resume_wait",
        lambda conn: resume_wait(
            conn,
            session_id,
            run_id,
            head.agent_name,
            head.step,
            resolutions,
            chunk,
            owner=execution_owner(),
        ),
    )
    _log_resolutions(session_id, run_id, resolutions, done)


def _log_resolutions(
    session_id: str, run_id: str, resolutions: list[Resolution], done: WaitResumed
) -> None:
    """`<kind>.timeout` and `<kind>.aborted` per call the wait closed without an answer,
    and `run.resumed` if the run works again (an abort may have closed it). Only what
    this resume did is logged: replayed, it resolves nothing and logs nothing."""
    ids: dict[str, Any] = {"run_id": run_id, "session_id": session_id}
    for r in resolutions:
        if r.kind is None or r.status not in ("timed_out", "interrupted"):
            continue
        if r.tool_call_id not in done.resolved:
            continue
        action, cause = ("timeout", None) if r.status == "timed_out" else ("aborted", "interrupted")
        log_event(
            gate_event(r.kind, action),
            logging.WARNING,
            tool_call_id=r.tool_call_id,
            reason=r.reason,
            cause=cause,
            **ids,
        )
    if done.resumed:
        log_event(RUN_RESUMED, tool_call_ids=[r.tool_call_id for r in resolutions], **ids)


async def _woken_early(deadline: float) -> bool:
    """Whether a `recv` that returned nothing did so before `deadline` (a late
    notification woke it), by a clock recorded as a step. A history recorded before the
    patch holds its next step here: it replays its old reading, a timeout."""
    if not await DBOS.patch_async(RECV_WOKEN_EARLY):
        return False
    now = await DBOS.run_step_async({"name": "helix.wait_clock"}, time.time)
    return bool(now < deadline)


class HumanWait:
    """Suspend a run on some pending calls and collect one answer for each."""

    def __init__(self, rt: Runtime, agent: Agent, head: StepCommit) -> None:
        self.rt = rt
        self.agent = agent
        self.head = head  # the step that waits: its head is written when the run suspends
        self.session_id = head.session_id
        self.run_id = head.run_id
        self.step = head.step
        self.hook_ctx = HookContext(head.session_id, head.run_id, agent.name, head.step)
        self.tool_names: dict[str, str] = {}  # the pending calls' tools, by call id

    async def wait(self, pending: list[PendingToolCall]) -> WaitResult:
        """One answer per pending call, or an interrupt that ends the wait at once."""
        workflow_id = DBOS.workflow_id
        assert workflow_id is not None
        self.tool_names = {p.tool_call_id: p.tool_name for p in pending}
        deadlines = await self.rt.transaction(
            "helix.suspend",
            _suspend,
            workflow_id,
            self.head,
            pending,
        )
        if deadlines is None:  # an interrupt was already waiting: take it, do not suspend
            message = await DBOS.recv_async(INTERRUPT_TOPIC, timeout_seconds=0)
            reason = message.get("reason") if isinstance(message, dict) else None
            return WaitResult({}, InterruptNotice(interrupt=True, reason=reason))
        kinds = sorted({p.kind for p in pending})
        await self._fire(
            "on_agent_suspended",
            "waiting",
            {
                "reason": ",".join(WAITING_FOR[k] for k in kinds),
                "tool_call_ids": [p.tool_call_id for p in pending],
            },
        )
        started = time.time()  # only for wait_ms, which feeds a step input, never a checkpoint
        answers: dict[str, Answer] = {}
        interrupt: InterruptNotice | None = None
        for kind in kinds:
            waiting = {p.tool_call_id for p in pending if p.kind == kind}
            interrupt = await self._collect(kind, waiting, deadlines, started, answers)
            if interrupt is not None:
                break
        resolutions = [Resolution.of(call_id, answer) for call_id, answer in answers.items()]
        resolutions += [
            Resolution(p.tool_call_id, "interrupted", reason=interrupt.reason, kind=p.kind)
            for p in pending
            if interrupt is not None and p.tool_call_id not in answers
        ]
        resume = functools.partial(_resume, self.rt, self.head, resolutions)
        if interrupt is None and self.agent.hooks.on_agent_resumed is None:
            # Answered, no hook to fire first: the caller runs the resume write beside
            # the approved tools' steps, off the approval's path (see `WaitResult.resume`).
            return WaitResult(answers, None, resume)
        await resume()
        why = "interrupted" if interrupt is not None else "answered"
        await self._fire(
            "on_agent_resumed", "running", {"reason": why, "tool_call_ids": list(answers)}
        )
        return WaitResult(answers, interrupt)

    def _forget_transcript(self) -> None:
        self.rt.history.forget(self.session_id)

    async def _collect(
        self,
        kind: GateKind,
        waiting: set[str],
        deadlines: dict[str, float],
        started: float,
        answers: dict[str, Answer],
    ) -> InterruptNotice | None:
        """Answers of one kind until none is missing; an interrupt notice stops at once."""
        topic = TOPICS[kind]
        model = ANSWER_MODELS[kind]
        while waiting:
            now = time.time()  # only sets recv's timeout; recv's recorded result is what replays
            soonest = min(deadlines[c] for c in waiting)
            timeout = max(0.0, soonest - now)
            # A long wait lets go of its memory: its coroutine, and its session's cached
            # transcript (its resume reads it again, in the one statement of a first read).
            with self.rt.parking.waiting(topic, timeout, on_park=self._forget_transcript):
                message = await DBOS.recv_async(topic, timeout_seconds=timeout)
            if message is None:
                if await _woken_early(soonest):
                    continue
                for call_id in [c for c in waiting if deadlines[c] <= soonest]:
                    answers[call_id] = Answer(kind, None, (deadlines[call_id] - started) * 1000)
                    waiting.discard(call_id)
                continue
            if isinstance(message, dict) and "interrupt" in message:
                try:
                    return InterruptNotice.model_validate(message)
                except ValidationError as exc:
                    self._ignored(kind, topic, f"a malformed interrupt: {exc}")
                    continue
            try:
                parsed = model.model_validate(message)
            except ValidationError as exc:
                self._ignored(kind, topic, f"a malformed message: {exc}")
                continue
            call_id = parsed.tool_call_id
            if call_id not in waiting:
                self._ignored(kind, topic, "no such pending call (duplicate or late)", call_id)
                continue
            if isinstance(parsed, ToolResultAnswer):
                parsed = self._checked(parsed)
            answered = time.time()
            answers[call_id] = Answer(kind, parsed, (answered - started) * 1000)
            waiting.discard(call_id)
        return None

    def _checked(self, answer: ToolResultAnswer) -> ToolResultAnswer:
        """A client's result checked against its tool's `output_schema`: one that does not
        match (sent around `submit_tool_result`, which refuses it) is a tool error the
        model sees, never a success (logged from workflow code: a replay logs it again)."""
        tool = self.agent.tool(self.tool_names.get(answer.tool_call_id, ""))
        if answer.error is not None or tool is None:
            return answer
        try:
            result = checked_client_result(
                tool, answer.result, self.session_id, self.run_id, answer.tool_call_id
            )
        except ToolOutputError as exc:
            return ToolResultAnswer(tool_call_id=answer.tool_call_id, error=str(exc))
        return ToolResultAnswer(tool_call_id=answer.tool_call_id, result=result)

    def _ignored(self, kind: GateKind, topic: str, why: str, call_id: str | None = None) -> None:
        """A message the wait ignored (logged from workflow code: a replay logs it again)."""
        log_event(
            gate_event(kind, "validation_failed"),
            logging.WARNING,
            f"run {self.run_id} ignored a message on {topic}: {why}",
            run_id=self.run_id,
            session_id=self.session_id,
            topic=topic,
            tool_call_id=call_id,
            error=why,
        )

    async def _fire(self, hook_name: str, status: str, details: dict[str, Any]) -> None:
        hook = getattr(self.agent.hooks, hook_name)
        if hook is not None:
            await DBOS.run_step_async(
                {"name": f"helix.hook:{hook_name}"},
                fire_safely,
                hook,
                RunEvent(self.hook_ctx, status, details=details),
            )


@dataclass(frozen=True)
class WaitResult:
    answers: dict[str, Answer]
    interrupt: InterruptNotice | None = None  # the wait ended on an interrupt
    # The resume write (close the calls, mark the run running), still to run: the
    # caller runs it beside the approved tools' steps, once one is under way
    # (`with_resume`), so an approval reaches its tool without waiting for that commit.
    # It is no step (it draws no step id), and a replay sends it again, to no effect
    # (`store/wait_resume.py`). `None`: already done.
    resume: Callable[[], Awaitable[None]] | None = None


async def with_resume(resume: Callable[[], Awaitable[None]] | None, work: Awaitable[T]) -> T:
    """`work` (the approved tools' steps), and `resume` once a tool is under way or the
    work has ended (both to the end, the first error raised): the resume's statement
    does not compete with the tool step's own check on the way to the tool."""
    if resume is None:
        return await work
    tool_started = asyncio.Event()
    token = TOOL_STARTED.set(tool_started)
    try:
        second = asyncio.ensure_future(work)  # its tool steps see `tool_started`
    finally:
        TOOL_STARTED.reset(token)
    signal = asyncio.ensure_future(tool_started.wait())
    first: asyncio.Future[None] | None = None
    try:
        await asyncio.wait({second, signal}, return_when=asyncio.FIRST_COMPLETED)
        first = asyncio.ensure_future(resume())
        await asyncio.wait({first, second})
    except asyncio.CancelledError:
        for task in (first, second):
            if task is not None:
                task.cancel()
        raise
    finally:
        signal.cancel()
    first.result()
    return second.result()


def interrupted_message(reason: str | None) -> str:
    return f"Interrupted: {reason}" if reason else "Interrupted"


def denial_message(call_id: str, reason: str | None) -> str:
    base = f"Tool call {call_id} was not approved by the user"
    return f"{base}: {reason}" if reason else base


def timeout_message(call: ToolCall, kind: GateKind, seconds: float) -> str:
    what = {"approval": "approval", "client": "the client's result", "human_input": "human input"}[
        kind
    ]
    return f"Tool call {call.id} ({call.name}) timed out after {seconds:g}s waiting for {what}"


def answer_outcome(
    call: ToolCall, kind: GateKind, answer: Answer, timeout_seconds: float
) -> ToolOutcome | None:
    """What a human's answer makes of a gated call; `None`: approved, so it runs now."""
    p = answer.payload
    if kind == "approval":
        if isinstance(p, ApprovalAnswer) and p.approved:
            return None
        reason = p.reason if isinstance(p, ApprovalAnswer) else None
        if p is None:
            return ToolOutcome.not_executed(timeout_message(call, kind, timeout_seconds))
        return ToolOutcome.not_executed(denial_message(call.id, reason))
    content: str | None = None
    error: str | None = None
    if p is None:
        error = timeout_message(call, kind, timeout_seconds)
    elif isinstance(p, HumanInputAnswer):
        content = to_json_text({"human_input": p.human_input, "approved": p.approved})
    elif isinstance(p, ToolResultAnswer) and p.error is not None:
        error = p.error
    elif isinstance(p, ToolResultAnswer):
        content = to_json_text(p.result)
    return ToolOutcome.answered(kind, content, error, answer.wait_ms)


def checked_client_result(
    tool: Tool, result: Any, session_id: str, run_id: str, tool_call_id: str
) -> Any:
    """A client tool's `result` checked against its `output_schema`; a mismatch is logged
    as the client gate's failed validation and raised (`ToolOutputError`)."""
    try:
        return tool.check_client_result(result)
    except ToolOutputError as exc:
        log_event(
            gate_event("client", "validation_failed"),
            logging.WARNING,
            session_id=session_id,
            run_id=run_id,
            tool_call_id=tool_call_id,
            tool_name=tool.name,
            error=str(exc),
        )
        raise
