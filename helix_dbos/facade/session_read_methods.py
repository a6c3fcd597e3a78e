"""`HelixDBOS`'s reads, with their `_sync` twins: your own SQL, sessions, runs,
transcripts and usage, each delegating to `SessionReads`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Row

from helix_dbos.orchestration.types import Message
from helix_dbos.runtime.process.event_loop import sync_twin
from helix_dbos.runtime.sessions.session_reads import SessionReads
from helix_dbos.runtime.steps.results import RunInfo, SessionInfo, UsageSummary


class SessionReadMethods:
    """A mixin of `HelixDBOS`: what a session and its runs hold, as the public models."""

    _reads: SessionReads

    async def sql(self, statement: str, params: Mapping[str, Any] | None = None) -> list[Row[Any]]:
        """Run your own SQL on helix's database (its tables, views, your own), in a
        transaction of its own on helix's pool: the rows, by name (`row.run_id`) or by
        position, or [] for a statement that returns none. Parameters are named,
        `WHERE agent_name = :agent` with `{"agent": "janitor"}`."""
        return await self._reads.sql(statement, params)

    async def get_session(self, session_id: str) -> SessionInfo:
        return await self._reads.get_session(session_id)

    async def get_messages(self, session_id: str) -> list[Message]:
        return await self._reads.get_messages(session_id)

    async def get_run_messages(self, run_id: str) -> list[Message]:
        """The messages a run added to its session's transcript."""
        return await self._reads.get_run_messages(run_id)

    async def get_run(self, run_id: str) -> RunInfo:
        return await self._reads.get_run(run_id)

    async def get_current_run(self, session_id: str) -> RunInfo | None:
        """The live run of a session, or None when nothing is running."""
        return await self._reads.get_current_run(session_id)

    async def list_runs(self, session_id: str) -> list[RunInfo]:
        return await self._reads.list_runs(session_id)

    async def get_usage(
        self,
        *,
        session_id: str | None = None,
        run_id: str | None = None,
        include_children: bool = False,
    ) -> UsageSummary:
        """Calls and tokens of a session or run; `include_children` adds every sub-agent
        session below the session (their tokens are counted once: a `subagent` row only
        counts as a call, in `subagent_calls`)."""
        return await self._reads.get_usage(
            session_id=session_id, run_id=run_id, include_children=include_children
        )

    sql_sync = sync_twin(sql)
    get_session_sync = sync_twin(get_session)
    get_messages_sync = sync_twin(get_messages)
    get_run_messages_sync = sync_twin(get_run_messages)
    get_run_sync = sync_twin(get_run)
    get_current_run_sync = sync_twin(get_current_run)
    list_runs_sync = sync_twin(list_runs)
    get_usage_sync = sync_twin(get_usage)
