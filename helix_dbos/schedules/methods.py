"""`helix.schedules`: scheduled agents (issue 34), with their `_sync` twins: schedules
kept and fired by DBOS (`schedules/book.py`), each firing an ordinary run
(`schedules/firing.py`)."""

from __future__ import annotations

import asyncio
import builtins
from datetime import datetime, timezone
from typing import Any

from dbos import DBOS

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.schedule import (
    FiringInfo,
    ScheduleInfo,
    ScheduleSpec,
    ScheduleStrategy,
    check_schedule,
)
from helix_dbos.runtime.process.event_loop import on_target_loop, sync_twin
from helix_dbos.runtime.process.process_runtime import Runtime
from helix_dbos.runtime.starts.run_starts import RunStarts
from helix_dbos.schedules.book import ScheduleBook, list_firings
from helix_dbos.schedules.firing import ensure_session, scheduled_firing
from helix_dbos.store.storable import check_storable


class Schedules:
    """`helix.schedules`: run an agent on a cron schedule (after `launch()`)."""

    def __init__(self, runtime: Runtime, starts: RunStarts) -> None:
        self.runtime = runtime
        self._starts = starts

    def _book(self) -> ScheduleBook:
        return ScheduleBook(DBOS, scheduled_firing)

    async def create(
        self,
        agent: Agent | str,
        cron: str,
        *,
        input: str | None = None,
        session: str | None = None,
        name: str | None = None,
        state: Any = None,
        multitask_strategy: ScheduleStrategy = "enqueue",
        timezone: str | None = None,
        backfill: bool = False,
    ) -> ScheduleInfo:
        """Run `agent` with `input` at every firing of `cron` (five fields, or six with
        seconds first; in UTC unless `timezone` names a zone).

        Each firing is one run, once across every process: in a session of its own, or,
        with `session`, the next turn of that session (created now if new). A
        firing while that session's run is live waits behind it (`multitask_strategy=
        "enqueue"`), is skipped (`"reject"`) or joins the live run (`"steer"`).
        `backfill=True` fires, when a process starts (or the schedule is resumed), the
        firings missed since the last one. The schedule is named `name` (default: the agent's
        name); scheduling a name again replaces its definition and keeps its status."""
        definition = self._starts.agent(agent)
        schedule_name = name if name is not None else definition.name
        check_schedule(schedule_name, cron, multitask_strategy, timezone)
        check_storable(input=input, session_id=session, name=schedule_name)
        initial = definition.initial_state(state) if state is not None else None
        check_storable(state=initial)
        spec = ScheduleSpec(
            name=schedule_name,
            agent=definition.name,
            input=input,
            session_id=session,
            state=initial,
            multitask_strategy=multitask_strategy,
        )
        if session is not None:
            await on_target_loop(lambda: ensure_session(self.runtime, session, definition, initial))
        book = self._book()
        return await asyncio.to_thread(
            book.put, spec, cron, timezone=timezone, automatic_backfill=backfill
        )

    async def list(self, agent: Agent | str | None = None) -> list[ScheduleInfo]:
        """Every helix schedule of this application (or of one agent), by name."""
        agent_name = agent.name if isinstance(agent, Agent) else agent
        return await asyncio.to_thread(self._book().list_all, agent_name)

    async def get(self, name: str) -> ScheduleInfo:
        """One schedule; `ScheduleNotFoundError` if there is none of that name."""
        return await asyncio.to_thread(self._book().get, name)

    async def pause(self, name: str) -> ScheduleInfo:
        """Stop firing (from the scheduler's next poll on: `HELIX_SCHEDULER_POLL_SECONDS`);
        firings already under way finish."""
        return await asyncio.to_thread(self._book().pause, name)

    async def resume(self, name: str) -> ScheduleInfo:
        """Fire again from the next due time (missed firings are not made up: backfill)."""
        return await asyncio.to_thread(self._book().resume, name)

    async def delete(self, name: str) -> ScheduleInfo:
        """Remove the schedule (its runs and firings stay); returns what it was."""
        return await asyncio.to_thread(self._book().delete, name)

    async def backfill(
        self, name: str, start: datetime, end: datetime | None = None
    ) -> builtins.list[str]:
        """Fire every firing due after `start` and before `end` (default: now) that never
        fired; firings that did are skipped, so backfilling twice fires each once.
        Returns the window's firing ids (DBOS workflow ids)."""
        stop = end or datetime.now(timezone.utc)
        return await asyncio.to_thread(self._book().backfill, name, start, stop)

    async def trigger(self, name: str) -> str:
        """Fire now, besides the schedule's own firings; returns the firing id."""
        return await asyncio.to_thread(self._book().trigger, name)

    async def firings(self, name: str, *, limit: int = 100) -> builtins.list[FiringInfo]:
        """The schedule's recorded firings, newest first: each with the session and run
        it made (or `rejected`)."""
        return await on_target_loop(lambda: self.runtime.read(list_firings, name, limit))

    create_sync = sync_twin(create)
    list_sync = sync_twin(list)
    get_sync = sync_twin(get)
    pause_sync = sync_twin(pause)
    resume_sync = sync_twin(resume)
    delete_sync = sync_twin(delete)
    backfill_sync = sync_twin(backfill)
    trigger_sync = sync_twin(trigger)
    firings_sync = sync_twin(firings)
