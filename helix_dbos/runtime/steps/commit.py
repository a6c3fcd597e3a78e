"""What one agent step writes, and how it is written exactly once.

A step's messages, state, usage and chunks are derived only from checkpointed step
outputs, so a replay rebuilds the very same rows. They are written by the next LLM
step before it reads the transcript for the model, in one statement keyed by
`runs.committed_step` (the key commits atomically with the rows, so a recovered or
retried step writes nothing twice). A run's last step is written with the same key by
the run's final write, in the same statement as the final status, which only a live
run takes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, TypedDict

from sqlalchemy.exc import DBAPIError

from helix_dbos.orchestration.messages import create_tool_result_message
from helix_dbos.orchestration.types import Message, ToolCall
from helix_dbos.runtime.dbos.dbos_internals import checkpoints_workflow, execution_owner
from helix_dbos.runtime.process.outage import is_transient_db_error
from helix_dbos.runtime.process.process_runtime import current_runtime, logger
from helix_dbos.runtime.steps.live_chunks import tool_start_chunk
from helix_dbos.runtime.steps.step_types import ChunkRecord, FinalStatus, ToolOutcome
from helix_dbos.store import repository as repo
from helix_dbos.store.repository import StepWrite, UsageRecord
from helix_dbos.store.run_bounds import EndedRun, end_run, end_step_and_run
from helix_dbos.streaming.notifier import CHANNEL, RUN_END_CHANNEL


class StepKey(TypedDict):
    """Which run's which step a write is about, as the store's functions take it."""

    session_id: str
    run_id: str
    agent_name: str
    step: int


class StepRows(TypedDict):
    """A step's rows but its chunks, as the store's step writes take them."""

    messages: list[Message]
    state: dict[str, Any] | None
    usage: list[UsageRecord]
    head_messages: int


class RunEnding(TypedDict):
    """How the run ends, as the store's final writes take it."""

    status: FinalStatus
    output: Any
    error: str | None
    stop_reason: str | None


@dataclass
class StepCommit:
    """Everything one agent step writes."""

    session_id: str
    run_id: str
    agent_name: str
    step: int
    messages: list[Message] = field(default_factory=list)
    state: dict[str, Any] | None = None
    usage: list[UsageRecord] = field(default_factory=list)
    events: list[ChunkRecord] = field(default_factory=list)
    status: FinalStatus | None = None
    output: Any = None
    error: str | None = None
    stop_reason: str | None = None  # "stop_when" when the agent's stop condition ended it
    # The step's head: its first `head_messages` messages (the model's message) and its
    # LLM usage, which may be written before the rest (`write_head`).
    head_messages: int = 0
    # Messages made in workflow code (nudges, corrections, results of calls that never
    # ran): their on_message hook fires in the step that writes them.
    unannounced: list[Message] = field(default_factory=list)

    def written_messages(self, wrote: StepWrite) -> list[Message]:
        """The messages a write of this step inserted (its head may have gone before)."""
        return self.messages if wrote.with_head else self.messages[self.head_messages :]

    def say(self, message: Message) -> None:
        """Add a message made in workflow code (its on_message fires when it is written)."""
        self.messages.append(message)
        self.unannounced.append(message)

    def key(self) -> StepKey:
        return StepKey(
            session_id=self.session_id,
            run_id=self.run_id,
            agent_name=self.agent_name,
            step=self.step,
        )

    def rows(self) -> StepRows:
        return StepRows(
            messages=self.messages,
            state=self.state,
            usage=self.usage,
            head_messages=self.head_messages,
        )

    def ending(self) -> RunEnding:
        assert self.status is not None
        return RunEnding(
            status=self.status, output=self.output, error=self.error, stop_reason=self.stop_reason
        )

    def end(self, status: FinalStatus, *, output: Any = None, error: str | None = None) -> None:
        """This step ends the run; its rows are written with the final status."""
        self.status, self.output, self.error = status, output, error

    def add_tool_outcome(self, call: ToolCall, outcome: ToolOutcome, *, start_chunk: bool) -> None:
        """The call's result message, usage row and chunks (`tool_start` too when
        `start_chunk`: a call that ran at once has no live one unless it ran long,
        and the keyed insert makes that repeat a no-op)."""
        prefix = f"{self.run_id}:{self.step}"
        if start_chunk:
            self.events.append(tool_start_chunk(self.run_id, self.step, call))
        message = create_tool_result_message(
            call.id,
            call.name,
            result=outcome.content,
            success=outcome.success,
            error=outcome.error,
            attachments=outcome.attachments,
        )
        self.messages.append(message)
        if outcome.duration_ms is None:  # it never ran, so no tool step fired its hooks
            self.unannounced.append(message)
        if outcome.duration_ms is not None:
            self.usage.append(
                UsageRecord(
                    f"{prefix}:tool:{call.id}",
                    outcome.usage_kind,
                    self.step,
                    llm=outcome.tokens,
                    tool_name=call.name,
                    duration_ms=outcome.duration_ms,
                    success=outcome.success,
                    tool_call_id=call.id,
                )
            )
        for i, event in enumerate(outcome.events):
            self.events.append(ChunkRecord(f"{prefix}:{call.id}:{i}", "custom", event))
        end: dict[str, Any] = {
            "tool_call_id": call.id,
            "tool_name": call.name,
            "success": outcome.success,
        }
        end.update({"result": outcome.content} if outcome.success else {"error": outcome.error})
        self.events.append(ChunkRecord(f"{prefix}:{call.id}:end", "tool_end", end))

    @property
    def has_rows(self) -> bool:
        """A step that ran (an LLM call at least), not only an end of the run."""
        return bool(self.messages or self.usage or self.state is not None)


async def write_step_rows(
    conn: repo.SQLConnection,
    commit: StepCommit,
    *,
    workflow_id: str | None = None,
) -> StepWrite:
    """The step's rows in one keyed statement (`first_seq` is `None` when a replay found
    them written); with `workflow_id`, also the state and a pending interrupt.

    They are always written durably. A write that does not wait for its flush is not
    made safe by the next checkpoint's commit: DBOS retries a checkpoint whose
    connection was lost, so after a PostgreSQL crash that lost these rows the retried
    checkpoint commits on the restarted server, the step is never replayed, and the
    rows (a step's tool results, a run's final status) are gone for good (issue 26);
    nor by a durable commit after it on the same connection: its chunks are visible at
    once, and a seq a reader saw must never be handed out again (issue 46).
    """
    written = await repo.commit_step_rows(
        conn,
        **commit.key(),
        **commit.rows(),
        chunks=commit.events,
        workflow_id=workflow_id,
        owner=execution_owner(),  # a fenced worker's late write cannot land
    )
    if written.first_seq is not None and commit.events:
        wake_readers(commit.session_id)
    return written


def wake_readers(session_id: str, ended_run: str | None = None) -> None:
    """Tell the session's stream readers (and, with `ended_run`, the callers waiting for
    that run's result) to look, once the write they announce has committed: a NOTIFY
    inside a step's write would make every such commit in the cluster wait for the one
    before (`runtime/process/wake_ups.py`)."""
    wake_ups = current_runtime().wake_ups
    wake_ups.send_soon(CHANNEL, session_id)
    if ended_run is not None:
        wake_ups.send_soon(RUN_END_CHANNEL, ended_run)


async def write_head(conn: repo.SQLConnection, commit: StepCommit) -> bool:
    """The step's head (the model's message and its LLM usage) ahead of the rest, so the
    transcript shows what the model asked for while the step's tools run or wait.
    Durable like every write that others can see (see `write_step_rows`)."""
    return await repo.commit_step_head(
        conn,
        **commit.key(),
        messages=commit.messages[: commit.head_messages],
        usage=[u for u in commit.usage if u.kind == "llm"],
        owner=execution_owner(),
    )


async def write_now(commit: StepCommit, workflow_id: str | None) -> StepWrite:
    """Write a step's rows (durably: see `write_step_rows`) and read the session's
    state and pending interrupt in the same round trip."""
    return await current_runtime().on_connection(
        f"the rows of step {commit.step}",
        lambda conn: write_step_rows(conn, commit, workflow_id=workflow_id),
    )


class WriteAhead:
    """A step's rows, being written while DBOS checks and starts the next LLM step.

    The workflow starts it as soon as the step's tools are done; the LLM step waits for
    it before reading the transcript, so the rows are written before its checkpoint.
    Writes of one run stay in order (each waits for the one before), and every write is
    keyed, so one started again on replay is a no-op.
    """

    def __init__(
        self, commit: StepCommit, workflow_id: str | None, after: WriteAhead | None
    ) -> None:
        self.commit = commit
        self._workflow_id = workflow_id
        self._task = asyncio.get_running_loop().create_task(self._write(after))

    async def _write(self, after: WriteAhead | None) -> StepWrite:
        if after is not None:
            await after.settled()
        return await write_now(self.commit, self._workflow_id)

    async def result(self) -> StepWrite:
        """The write's outcome (it waits out a database outage); a write that failed
        otherwise is tried once more."""
        try:
            return await asyncio.shield(self._task)
        except Exception:
            return await write_now(self.commit, self._workflow_id)

    async def settled(self) -> bool:
        """Wait for the write; whether it failed (its rows then still need writing)."""
        done = await asyncio.gather(self._task, return_exceptions=True)
        return isinstance(done[0], BaseException)


def terminal_chunks(commit: StepCommit) -> list[ChunkRecord]:
    key = f"{commit.run_id}:end"
    if commit.status == "completed":
        return [
            ChunkRecord(f"{key}:output", "output", {"output": commit.output}),
            ChunkRecord(f"{key}:completed", "run_completed", {"output": commit.output}),
        ]
    if commit.status == "failed":
        # A run a control ended (a usage limit, a guardrail) says which, as its row does.
        failure: dict[str, Any] = {"error": commit.error}
        if commit.stop_reason is not None:
            failure["stop_reason"] = commit.stop_reason
        return [
            ChunkRecord(f"{key}:error", "error", failure),
            ChunkRecord(f"{key}:failed", "run_failed", dict(failure)),
        ]
    return []


async def commit_final(
    session: repo.SQLConnection,
    commit: StepCommit,
    pending: StepCommit | None = None,
    *,
    notify: bool = False,
) -> EndedRun:
    """The run's last writes on an autocommit connection: a step not yet written (if the
    run ends before another LLM step wrote it), this step's rows, and the final status.
    Usually that is this step and the status alone, written in one durable statement:
    the workflow's next checkpoint (its end) cannot stand in for its flush, since DBOS
    retries that checkpoint on the restarted server after a PostgreSQL crash that lost
    the write, and the workflow would end SUCCESS with its run still `running` (see
    `write_step_rows`). Otherwise each write is keyed or guarded, so none needs the
    others' transaction, and each commits durably (its chunks are visible at once: see
    `write_step_rows`); a crash between them leaves the rest to the caller's retry.
    Returns whether this call ended the run (an
    abort that got there first keeps its status) and the run's usage.

    Rows the database refuses for good (not a lost connection, which the caller waits
    out) cannot be written by a retry either: the run then fails, and the statement
    that ends it pairs each of its dangling tool calls with an error result."""
    try:
        return await _commit_final(session, commit, pending, notify=notify)
    except DBAPIError as exc:
        if is_transient_db_error(exc) or not (commit.has_rows or pending is not None):
            raise
        logger.error("helix could not write the last rows of run %s: %s", commit.run_id, exc)
        reason = str(exc.orig) if exc.orig is not None else str(exc)
        ended = StepCommit(commit.session_id, commit.run_id, commit.agent_name, commit.step)
        ended.end("failed", error=f"The run's last rows could not be written: {reason}")
        commit.messages, commit.usage, commit.events, commit.state = [], [], [], None
        commit.unannounced = []
        commit.end("failed", error=ended.error)
        return await _commit_final(session, ended, None, notify=notify)


async def _commit_final(
    session: repo.SQLConnection, commit: StepCommit, pending: StepCommit | None, *, notify: bool
) -> EndedRun:
    chunks = terminal_chunks(commit)
    if pending is None and commit.has_rows:  # the usual end: one statement
        ended = await end_step_and_run(
            session,
            **commit.key(),
            **commit.rows(),
            step_chunks=commit.events,
            **commit.ending(),
            end_chunks=chunks,
            notify=notify,
            owner=execution_owner(),
            drop_checkpoints_of=checkpoints_workflow(),
            wake=False,
        )
        wake_readers(commit.session_id, commit.run_id if notify else None)
        return ended
    if pending is not None:
        await write_step_rows(session, pending)
    if commit.has_rows:
        await write_step_rows(session, commit)
    else:
        chunks = commit.events + chunks
    return await end_run(
        session,
        **commit.key(),
        **commit.ending(),
        chunks=chunks,
        notify=notify,
        owner=execution_owner(),
    )


async def announce_run_end(run_id: str) -> None:
    """Wake the callers waiting for this run's result. Sent after everything the run
    does at its end (the final write, its hooks, its span), so a caller that wakes
    finds it all done; a lost wake-up only costs a waiting caller its next poll."""
    await current_runtime().wake_ups.send(RUN_END_CHANNEL, run_id)
