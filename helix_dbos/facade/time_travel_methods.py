"""`helix.checkpoints`: time travel, with its `_sync` twins: checkpoints, forks and retention,
run by `TimeTravel` (runtime/control/time_travel.py) on helix's event loop, over this
process's statement pool and DBOS's workflow deletion."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dbos import DBOS

from helix_dbos.definitions.agent import Agent
from helix_dbos.memory import store as memory_store
from helix_dbos.runtime.control.time_travel import (
    Checkpoint,
    CheckpointView,
    PruneReport,
    TimeTravel,
)
from helix_dbos.runtime.process.event_loop import on_target_loop, sync_twin
from helix_dbos.runtime.process.process_runtime import Runtime


class Checkpoints:
    """`helix.checkpoints`: a session as it was after any step, forks from there, and
    pruning what ended runs left behind."""

    def __init__(self, runtime: Runtime, agents: dict[str, Agent]) -> None:
        self.runtime = runtime
        self.agents = agents

    def _time_travel(self) -> TimeTravel:
        return TimeTravel(
            self.runtime.statements,
            DBOS.delete_workflows_async,
            self.agents,
            prune_memories=memory_store.prune_expired_batch,
        )

    async def list(self, session_id: str) -> list[Checkpoint]:
        """The session's checkpoints, oldest first: one per committed step, one per
        step head written before a wait, one where a fork began."""
        return await on_target_loop(lambda: self._time_travel().get_checkpoints(session_id))

    async def get(self, session_id: str, checkpoint_id: str) -> CheckpointView:
        """The transcript and state as they were at the checkpoint."""
        return await on_target_loop(
            lambda: self._time_travel().get_checkpoint(session_id, checkpoint_id)
        )

    async def fork(
        self,
        session_id: str,
        at: Checkpoint | str,
        *,
        state: Any = None,
        new_session_id: str | None = None,
    ) -> str:
        """A new session whose history and state are the checkpoint's (or `state`);
        the source is untouched. Continue it with `execute(..., session_id=fork)` or
        `resume(fork)`."""
        return await on_target_loop(
            lambda: self._time_travel().fork(
                session_id, at, state=state, new_session_id=new_session_id
            )
        )

    async def prune(
        self, *, older_than: timedelta, keep_last: int = 0, batch_size: int = 500
    ) -> PruneReport:
        """Remove checkpoints, stream chunks and DBOS workflow records of ended runs
        older than the cutoff; transcripts stay and live sessions are never touched."""
        return await on_target_loop(
            lambda: self._time_travel().prune(
                older_than=older_than, keep_last=keep_last, batch_size=batch_size
            )
        )

    list_sync = sync_twin(list)
    get_sync = sync_twin(get)
    fork_sync = sync_twin(fork)
    prune_sync = sync_twin(prune)
