# Generated from aio_schedules.py by scripts/unasync.py; do not edit.
"""`HelixClient`'s schedule methods (docs/schedules.md): a mixin over the client's
`_send`, one call per route (`client/calls.py`)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from helix_dbos.api.schedules import FiringInfo, ScheduleInfo
from helix_dbos.client import calls
from helix_dbos.client.calls import Call

T = TypeVar("T")


class ScheduleCalls:
    """A mixin of `HelixClient`."""

    if TYPE_CHECKING:  # the client's own

        def _send(self, call: Call[T]) -> T: ...

    def list_schedules(self, agent: str | None = None) -> list[ScheduleInfo]:
        return self._send(calls.schedules(agent))

    def schedule(
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
        return self._send(
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

    def get_schedule(self, name: str) -> ScheduleInfo:
        return self._send(calls.schedule(name))

    def pause_schedule(self, name: str) -> ScheduleInfo:
        return self._send(calls.schedule_action(name, "pause"))

    def resume_schedule(self, name: str) -> ScheduleInfo:
        return self._send(calls.schedule_action(name, "resume"))

    def delete_schedule(self, name: str) -> ScheduleInfo:
        return self._send(calls.delete_schedule(name))

    def backfill_schedule(
        self, name: str, start: datetime, end: datetime | None = None
    ) -> list[str]:
        """Fire the window's missed firings, once each; returns the window's firing ids."""
        backfilled = self._send(calls.backfill_schedule(name, start=start, end=end))
        return backfilled.firing_ids

    def trigger_schedule(self, name: str) -> str:
        triggered = self._send(calls.trigger_schedule(name))
        return triggered.firing_id

    def get_schedule_firings(self, name: str, *, limit: int = 100) -> list[FiringInfo]:
        return self._send(calls.schedule_firings(name, limit))
