"""`AsyncHelixClient`'s schedule methods (docs/schedules.md): a mixin over the client's
`_send`, one call per route (`client/calls.py`)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from helix_dbos.api.schedules import FiringInfo, ScheduleInfo
from helix_dbos.client import calls
from helix_dbos.client.calls import Call

T = TypeVar("T")


class AsyncScheduleCalls:
    """A mixin of `AsyncHelixClient`."""

    if TYPE_CHECKING:  # the client's own

        async def _send(self, call: Call[T]) -> T: ...

    async def list_schedules(self, agent: str | None = None) -> list[ScheduleInfo]:
        return await self._send(calls.schedules(agent))

    async def schedule(
        self,
        agent: str,
        cron: str,
        *,
        input: str | None = None,
        session_id: str | None = None,
        name: str | None = None,
        state: dict[str, Any] | None = None,
        multitask_strategy: str | None = None,
        timezone: str | None = None,
        backfill: bool | None = None,
    ) -> ScheduleInfo:
        """Create (or replace) a schedule: `agent` runs `input` at every firing of `cron`."""
        return await self._send(
            calls.create_schedule(
                agent=agent,
                cron=cron,
                input=input,
                session_id=session_id,
                name=name,
                state=state,
                multitask_strategy=multitask_strategy,
                timezone=timezone,
                backfill=backfill,
            )
        )

    async def get_schedule(self, name: str) -> ScheduleInfo:
        return await self._send(calls.schedule(name))

    async def pause_schedule(self, name: str) -> ScheduleInfo:
        return await self._send(calls.schedule_action(name, "pause"))

    async def resume_schedule(self, name: str) -> ScheduleInfo:
        return await self._send(calls.schedule_action(name, "resume"))

    async def delete_schedule(self, name: str) -> ScheduleInfo:
        return await self._send(calls.delete_schedule(name))

    async def backfill_schedule(
        self, name: str, start: datetime, end: datetime | None = None
    ) -> list[str]:
        """Fire the window's missed firings, once each; returns the window's firing ids."""
        backfilled = await self._send(calls.backfill_schedule(name, start=start, end=end))
        return backfilled.firing_ids

    async def trigger_schedule(self, name: str) -> str:
        triggered = await self._send(calls.trigger_schedule(name))
        return triggered.firing_id

    async def get_schedule_firings(self, name: str, *, limit: int = 100) -> list[FiringInfo]:
        return await self._send(calls.schedule_firings(name, limit))
