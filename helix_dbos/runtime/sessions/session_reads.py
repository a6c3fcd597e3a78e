"""What a caller reads about sessions and runs: rows turned into the public models.

Every read hops to helix's target loop (its pools live there) and back, so any loop
may call it once helix is launched.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Row, text

from helix_dbos.errors import RunNotFoundError, SessionNotFoundError
from helix_dbos.orchestration.types import Message
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.process.process_runtime import Runtime
from helix_dbos.runtime.steps.results import PendingToolCall, RunInfo, SessionInfo, UsageSummary
from helix_dbos.store import repository as repo
from helix_dbos.store import tree
from helix_dbos.store.features import handoff_rows
from helix_dbos.store.storable import check_storable

T = TypeVar("T")
P = ParamSpec("P")


class SessionReads:
    """Sessions, runs, transcripts, usage and pending calls, read from SQL."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def read(
        self,
        func: Callable[Concatenate[repo.SQLConnection, P], Coroutine[Any, Any, T]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """One read query on the target loop, from any loop."""
        return await on_target_loop(lambda: self.runtime.read(func, *args, **kwargs))

    async def sql(self, statement: str, params: Mapping[str, Any] | None = None) -> list[Row[Any]]:
        async def run() -> list[Row[Any]]:
            async with self.runtime.engine.begin() as conn:
                result = await conn.execute(text(statement), dict(params or {}))
                return list(result.all()) if result.returns_rows else []

        return await on_target_loop(run)

    async def get_session(self, session_id: str) -> SessionInfo:
        check_storable(session_id=session_id)
        row = await self.read(repo.get_session, session_id)
        if row is None:
            raise SessionNotFoundError(session_id)
        return SessionInfo(
            session_id=row.session_id,
            agent_name=row.agent_name,
            status=row.status,
            state=row.state,
            output=row.output,
            error=row.error,
            parent_session_id=row.parent_session_id,
            turn_count=row.turn_count,
            current_agent=await self.read(handoff_rows.current_agent, session_id) or row.agent_name,
        )

    async def get_messages(self, session_id: str) -> list[Message]:
        await self.get_session(session_id)
        rows = await self.read(repo.load_messages, session_id)
        return [m for _, m in rows]

    async def get_run_messages(self, run_id: str) -> list[Message]:
        run = await self.get_run(run_id)
        rows = await self.read(repo.load_messages, run.session_id)
        ids = await self.read(repo.message_seqs_of_run, run_id)
        return [m for seq, m in rows if seq in ids]

    async def get_run(self, run_id: str) -> RunInfo:
        check_storable(run_id=run_id)
        row = await self.read(repo.get_run, run_id)
        if row is None:
            raise RunNotFoundError(run_id)
        return RunInfo(**row.__dict__)

    async def get_current_run(self, session_id: str) -> RunInfo | None:
        await self.get_session(session_id)
        row = await self.read(repo.get_live_run, session_id)
        return RunInfo(**row.__dict__) if row else None

    async def list_runs(self, session_id: str) -> list[RunInfo]:
        await self.get_session(session_id)
        return [RunInfo(**r.__dict__) for r in await self.read(repo.list_runs, session_id)]

    async def get_usage(
        self, *, session_id: str | None, run_id: str | None, include_children: bool
    ) -> UsageSummary:
        check_storable(session_id=session_id, run_id=run_id)
        totals = await self.read(
            repo.usage_summary,
            session_id=session_id,
            run_id=run_id,
            include_children=include_children,
        )
        return UsageSummary(**totals)

    async def pending_tool_calls(self, session_id: str) -> list[PendingToolCall]:
        await self.get_session(session_id)
        rows = await self.read(tree.pending_calls, session_id)
        return [
            PendingToolCall(
                tool_call_id=r.tool_call_id,
                tool_name=r.tool_name,
                kind=r.kind,
                input=r.input,
                run_id=r.run_id,
                deadline_at=r.deadline_at,
                answered=r.answered_at is not None,
                session_id=r.session_id,
                agent_name=r.agent_name,
                depth=r.depth,
            )
            for r in rows
        ]
