"""Time travel and branching (issue 30): read a session as it was after any step, fork a
new session from there, and prune old checkpoints.

A fork is an ordinary session once made: `execute(agent, text, session_id=fork)` and
`resume(fork)` open its runs through the executor's one run-opening path; nothing here
opens a run.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from dbos import DBOS
from pydantic import BaseModel, Field

from helix_dbos.definitions.agent import Agent
from helix_dbos.errors import CheckpointNotFoundError, InvalidInputError, SessionNotFoundError
from helix_dbos.orchestration.types import Message
from helix_dbos.runtime.context import Runtime, logger
from helix_dbos.runtime.event_loop import on_target_loop
from helix_dbos.store import checkpoints as sql
from helix_dbos.store import repository as repo
from helix_dbos.store.storable import check_storable


class Checkpoint(BaseModel):
    """A session as it stood after one committed step (`kind="step"`), after a step's
    head written ahead of the step (`"head"`: before a wait for a human, or while a slow
    tool runs; its last message is the model's, with the pending calls), or at the start
    of a fork (`"fork"`). `message_seq` is the last message it covers;
    `usage` is the session's usage so far."""

    checkpoint_id: str
    session_id: str
    run_id: str | None
    step: int
    kind: str
    message_seq: int
    state: dict[str, Any]
    usage: dict[str, int]
    created_at: datetime


class CheckpointView(BaseModel):
    """A checkpoint with the transcript as it was then."""

    checkpoint: Checkpoint
    messages: list[Message]

    @property
    def state(self) -> dict[str, Any]:
        return self.checkpoint.state


class PruneReport(BaseModel):
    """What one `prune` removed."""

    cutoff: datetime
    checkpoints: int = 0
    stream_chunks: int = 0
    workflows: int = 0
    batches: int = 0
    workflow_ids: list[str] = Field(default_factory=list, exclude=True)


def _checkpoint(row: sql.CheckpointRow) -> Checkpoint:
    return Checkpoint(**row.__dict__)


class TimeTravel:
    """The reads, the fork and the pruning, on the executor's runtime."""

    def __init__(self, runtime: Runtime, agents: dict[str, Agent]) -> None:
        self._runtime = runtime
        self._agents = agents

    async def _session(self, session_id: str) -> repo.SessionRow:
        check_storable(session_id=session_id)
        row = await on_target_loop(lambda: self._runtime.read(repo.get_session, session_id))
        if row is None:
            raise SessionNotFoundError(session_id)
        return row

    async def get_checkpoints(self, session_id: str) -> list[Checkpoint]:
        await self._session(session_id)
        rows = await on_target_loop(
            lambda: self._runtime.read(sql.list_checkpoints, session_id)
        )
        return [_checkpoint(r) for r in rows]

    async def _find(self, session_id: str, checkpoint_id: str) -> Checkpoint:
        check_storable(checkpoint_id=checkpoint_id)
        await self._session(session_id)
        row = await on_target_loop(
            lambda: self._runtime.read(sql.get_checkpoint, session_id, checkpoint_id)
        )
        if row is None:
            raise CheckpointNotFoundError(session_id, checkpoint_id)
        return _checkpoint(row)

    async def get_checkpoint(self, session_id: str, checkpoint_id: str) -> CheckpointView:
        checkpoint = await self._find(session_id, checkpoint_id)
        messages = await on_target_loop(
            lambda: self._runtime.read(sql.messages_until, session_id, checkpoint.message_seq)
        )
        return CheckpointView(checkpoint=checkpoint, messages=messages)

    async def fork(
        self,
        session_id: str,
        at: Checkpoint | str,
        *,
        state: Any = None,
        new_session_id: str | None = None,
    ) -> str:
        """A new session with the checkpoint's history and state (or `state`), named
        `new_session_id` or a new id; the source is only read."""
        checkpoint_id = at.checkpoint_id if isinstance(at, Checkpoint) else at
        if not isinstance(checkpoint_id, str):
            raise InvalidInputError("at must be a Checkpoint or a checkpoint id")
        check_storable(
            session_id=session_id, checkpoint_id=checkpoint_id, new_session_id=new_session_id
        )
        source = await self._session(session_id)
        new_state: dict[str, Any] | None = None
        if state is not None:
            agent = self._agents.get(source.agent_name)
            new_state = agent.initial_state(state) if agent else _plain_state(state)
            check_storable(state=new_state)
        new_id = new_session_id or f"ses_{uuid.uuid4().hex}"
        forked = await on_target_loop(
            lambda: self._runtime.on_connection(
                "a fork",
                lambda conn: sql.fork_session(
                    conn,
                    source_session_id=session_id,
                    checkpoint_id=checkpoint_id,
                    new_session_id=new_id,
                    state=new_state,
                ),
                wait=False,
            )
        )
        if not forked.found:
            raise CheckpointNotFoundError(session_id, checkpoint_id)
        if not forked.created:
            raise InvalidInputError(f"Session '{new_id}' exists already; fork into a new id")
        logger.info(
            "Forked session %s from %s at %s (%d unanswered call(s) paired)",
            new_id,
            session_id,
            checkpoint_id,
            forked.paired,
        )
        return new_id

    async def prune(
        self,
        *,
        older_than: timedelta,
        keep_last: int = 0,
        batch_size: int = 500,
        now: datetime | None = None,
    ) -> PruneReport:
        """Remove checkpoints, stream chunks and DBOS workflow records of ended runs older
        than `older_than` (each session keeps its transcript and its last `keep_last`
        checkpoints), in batches of `batch_size`, each its own short statement. A session
        with a live run is never touched."""
        if older_than < timedelta(0) or keep_last < 0 or batch_size < 1:
            raise InvalidInputError(
                "older_than and keep_last must not be negative, batch_size must be positive"
            )
        cutoff = (now or datetime.now(timezone.utc)) - older_than
        report = PruneReport(cutoff=cutoff)
        while True:
            n = await self._batch(
                sql.prune_checkpoints, cutoff=cutoff, keep=keep_last, batch=batch_size
            )
            report.checkpoints += n
            report.batches += 1
            if n < batch_size:
                break
        while True:
            n = await self._batch(sql.prune_chunks, cutoff=cutoff, batch=batch_size)
            report.stream_chunks += n
            report.batches += 1
            if n < batch_size:
                break
        while True:
            ids = await self._batch(sql.ended_workflows, cutoff=cutoff, batch=batch_size)
            if ids:
                await on_target_loop(lambda: DBOS.delete_workflows_async(ids))
                report.workflows += len(ids)
            report.batches += 1
            if len(ids) < batch_size:
                break
        logger.info(
            "Pruned %d checkpoint(s), %d stream chunk(s), %d workflow record(s) older than %s",
            report.checkpoints,
            report.stream_chunks,
            report.workflows,
            cutoff.isoformat(),
        )
        return report

    async def _batch(self, func: Any, **kwargs: Any) -> Any:
        return await on_target_loop(
            lambda: self._runtime.on_connection(
                "a prune batch", lambda conn: func(conn, **kwargs), wait=False
            )
        )


def _plain_state(state: Any) -> dict[str, Any]:
    if isinstance(state, BaseModel):
        return state.model_dump(mode="json")
    if isinstance(state, dict):
        return dict(state)
    raise InvalidInputError("state must be a JSON object (a dict) or a pydantic model")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> timedelta:
    """`30d`, `12h`, `90m`, `45s`, `2w` as a duration (for the CLI and HTTP)."""
    value = text.strip().lower()
    if len(value) < 2 or value[-1] not in _UNITS or not value[:-1].isdigit():
        raise InvalidInputError(
            f"'{text}' is not an age: use a number and a unit, like 30d, 12h, 90m, 45s or 2w"
        )
    return timedelta(seconds=int(value[:-1]) * _UNITS[value[-1]])
