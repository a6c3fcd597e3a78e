"""Time travel and branching (issue 30): read a session as it was after any step, fork a
new session from there, and prune old checkpoints.

A fork is an ordinary session once made: `execute(agent, text, session_id=fork)` and
`resume(fork)` open its runs through the executor's one run-opening path; nothing here
opens a run.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel

from helix_dbos.api.checkpoints import Checkpoint as Checkpoint
from helix_dbos.api.checkpoints import CheckpointView as CheckpointView
from helix_dbos.definitions.agent import Agent
from helix_dbos.errors import CheckpointNotFoundError, InvalidInputError, SessionNotFoundError
from helix_dbos.runtime.dbos import dbos_tables
from helix_dbos.runtime.process.process_runtime import logger
from helix_dbos.store import checkpoint_rows as sql
from helix_dbos.store import repository as repo
from helix_dbos.store.storable import check_storable


class PruneReport(BaseModel):
    """What one `prune` removed."""

    cutoff: datetime
    checkpoints: int = 0
    stream_chunks: int = 0  # events (a step's row holds several: migration 0028)
    workflows: int = 0
    memories: int = 0  # memory (issue 36): expired long-term memories
    batches: int = 0


def _checkpoint(row: sql.CheckpointRow) -> Checkpoint:
    return Checkpoint(**row.__dict__)


Connect = Callable[[], AbstractAsyncContextManager[repo.Executor]]
DeleteWorkflows = Callable[[list[str]], Awaitable[None]]
# (connection, batch size) -> rows deleted
PruneBatch = Callable[[Any, int], Awaitable[int]]


class TimeTravel:
    """The reads, the fork and the pruning, on connections from `connect` (each statement
    commits alone). The executor passes its statement pool and DBOS's workflow deletion;
    the CLI a plain connection and a `DBOSClient`'s. `prune_memories` deletes a batch of
    expired long-term memories: memory sits above the runtime, so its caller hands it in."""

    def __init__(
        self,
        connect: Connect,
        delete_workflows: DeleteWorkflows,
        agents: dict[str, Agent],
        prune_memories: PruneBatch,
    ) -> None:
        self._connect = connect
        self._delete_workflows = delete_workflows
        self._agents = agents
        self._prune_memories = prune_memories

    async def _session(self, conn: repo.Executor, session_id: str) -> repo.SessionRow:
        check_storable(session_id=session_id)
        row = await repo.get_session(conn, session_id)
        if row is None:
            raise SessionNotFoundError(session_id)
        return row

    async def get_checkpoints(self, session_id: str) -> list[Checkpoint]:
        async with self._connect() as conn:
            await self._session(conn, session_id)
            return [_checkpoint(r) for r in await sql.list_checkpoints(conn, session_id)]

    async def get_checkpoint(self, session_id: str, checkpoint_id: str) -> CheckpointView:
        check_storable(session_id=session_id, checkpoint_id=checkpoint_id)
        async with self._connect() as conn:
            await self._session(conn, session_id)
            row = await sql.get_checkpoint(conn, session_id, checkpoint_id)
            if row is None:
                raise CheckpointNotFoundError(session_id, checkpoint_id)
            messages = await sql.messages_until(conn, session_id, row.message_seq)
        return CheckpointView(checkpoint=_checkpoint(row), messages=messages)

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
        new_id = new_session_id or f"ses_{uuid.uuid4().hex}"
        async with self._connect() as conn:
            source = await self._session(conn, session_id)
            new_state: dict[str, Any] | None = None
            if state is not None:
                agent = self._agents.get(source.agent_name)
                new_state = agent.initial_state(state) if agent else _plain_state(state)
                check_storable(state=new_state)
            forked = await sql.fork_session(
                conn,
                source_session_id=session_id,
                checkpoint_id=checkpoint_id,
                new_session_id=new_id,
                state=new_state,
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
        checkpoints), and expired long-term memories, in batches of `batch_size`, each its
        own short statement. A session with a live run is never touched."""
        if older_than < timedelta(0) or keep_last < 0 or batch_size < 1:
            raise InvalidInputError(
                "older_than and keep_last must not be negative, batch_size must be positive"
            )
        cutoff = (now or datetime.now(timezone.utc)) - older_than
        report = PruneReport(cutoff=cutoff)
        async with self._connect() as conn:
            after = ""  # checkpoints: a session per statement, sessions in keyset batches
            while True:
                sessions = await sql.prunable_sessions(
                    conn, cutoff=cutoff, after=after, batch=batch_size
                )
                report.batches += 1
                for session_id in sessions:
                    report.checkpoints += await sql.prune_session(
                        conn, session_id, cutoff=cutoff, keep=keep_last
                    )
                if len(sessions) < batch_size:
                    break
                after = sessions[-1]
            while True:
                n, events = await sql.prune_chunks(conn, cutoff=cutoff, batch=batch_size)
                report.stream_chunks += events  # what readers saw: events, not rows
                report.batches += 1
                if n < batch_size:
                    break
            while True:  # memory (issue 36): expired memories go whatever their age
                n = await self._prune_memories(conn, batch_size)
                report.memories += n
                report.batches += 1
                if n < batch_size:
                    break
            while True:
                ids = await dbos_tables.ended_workflows(conn, cutoff=cutoff, batch=batch_size)
                if ids:
                    await self._delete_workflows(ids)
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
