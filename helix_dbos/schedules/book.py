"""helix's schedules in DBOS's schedule table, and their firings in `helix.schedule_firings`.

`ScheduleBook` drives DBOS's own schedule API, through the `DBOS` class in a launched
process or a `DBOSClient` anywhere else (the CLI): DBOS keeps the schedule, its status
and its last firing, fires it on every process and backfills it. A helix schedule is the
one whose workflow is `helix.scheduled_firing`; its runs' queue is its agent's, so a
firing executes on a worker that serves the agent.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from helix_dbos.definitions.queue import agent_queue
from helix_dbos.definitions.schedule import (
    FIRING_WORKFLOW,
    FiringInfo,
    ScheduleInfo,
    ScheduleSpec,
    is_helix_schedule,
    schedule_info,
)
from helix_dbos.errors import ScheduleNotFoundError
from helix_dbos.store.repository import Executor, _sql

_FIRING_COLUMNS = (
    "firing_id, schedule_name, scheduled_at, agent_name, session_id, run_id, message_id, "
    "outcome, created_at"
)
# The same query for SQLAlchemy (`:name`) and psycopg (`%(name)s`, the CLI).
_FIRINGS = (
    f"SELECT {_FIRING_COLUMNS} FROM helix.schedule_firings WHERE schedule_name = {{name}} "
    "ORDER BY scheduled_at DESC, firing_id DESC LIMIT {limit}"
)
FIRINGS_SQL_PSYCOPG = _FIRINGS.format(name="%(name)s", limit="%(limit)s")


class ScheduleBook:
    """Create, read, pause, resume, delete, backfill and trigger helix schedules.

    `backend` is the `DBOS` class (a launched process) or a `DBOSClient`; their
    schedule methods have the same names. `workflow` is the firing workflow function
    when `backend` is `DBOS` (which takes a function), None for a client (a name)."""

    def __init__(
        self, backend: Any, workflow: Callable[..., Any] | None = None, app_name: str | None = None
    ) -> None:
        self.backend = backend
        self.workflow = workflow
        self.app_name = app_name

    def put(
        self,
        spec: ScheduleSpec,
        cron: str,
        *,
        timezone: str | None = None,
        automatic_backfill: bool = False,
    ) -> ScheduleInfo:
        """Create the schedule, or replace its definition (its status and last firing
        stay: a program that schedules at every start changes nothing)."""
        entry: dict[str, Any] = {
            "schedule_name": spec.name,
            "schedule": cron,
            "context": spec.model_dump(mode="json"),
            "automatic_backfill": automatic_backfill,
            "cron_timezone": timezone,
            "queue_name": agent_queue(spec.agent),
        }
        if self.workflow is not None:
            entry["workflow_fn"] = self.workflow
        else:
            entry["workflow_name"] = FIRING_WORKFLOW
            if self.app_name is not None:
                entry["application_name"] = self.app_name
        self.backend.apply_schedules([entry])
        return self.get(spec.name)

    def _row(self, name: str) -> dict[str, Any]:
        row = self.backend.get_schedule(name)
        if row is None or not is_helix_schedule(dict(row)):
            raise ScheduleNotFoundError(name)
        return dict(row)

    def get(self, name: str) -> ScheduleInfo:
        return schedule_info(self._row(name))

    def spec(self, name: str) -> ScheduleSpec:
        return ScheduleSpec.model_validate(self._row(name)["context"])

    def list_all(self, agent: str | None = None) -> list[ScheduleInfo]:
        rows = self.backend.list_schedules(workflow_name=FIRING_WORKFLOW)
        found = [schedule_info(dict(r)) for r in rows if is_helix_schedule(dict(r))]
        found.sort(key=lambda s: s.name)
        return [s for s in found if agent is None or s.agent == agent]

    def pause(self, name: str) -> ScheduleInfo:
        self._row(name)
        self.backend.pause_schedule(name)
        return self.get(name)

    def resume(self, name: str) -> ScheduleInfo:
        self._row(name)
        self.backend.resume_schedule(name)
        return self.get(name)

    def delete(self, name: str) -> ScheduleInfo:
        info = self.get(name)
        self.backend.delete_schedule(name)
        return info

    def backfill(self, name: str, start: datetime, end: datetime) -> list[str]:
        """Enqueue the firings due in (start, end) that never happened; their workflow
        ids are the live ones, so a firing that ran (or a second backfill) is skipped.
        Returns every firing id of the window, run before or now."""
        self._row(name)
        handles = self.backend.backfill_schedule(name, start, end)
        return [h.get_workflow_id() for h in handles]

    def trigger(self, name: str) -> str:
        """Fire now, outside the schedule; returns the firing's workflow id."""
        self._row(name)
        handle = self.backend.trigger_schedule(name)
        workflow_id: str = handle.get_workflow_id()
        return workflow_id


async def record_firing(conn: Executor, firing: FiringInfo) -> None:
    """The firing's row, once (a replay of the firing writes nothing new)."""
    await conn.execute(
        _sql(
            "INSERT INTO helix.schedule_firings (firing_id, schedule_name, scheduled_at, "
            "agent_name, session_id, run_id, message_id, outcome) VALUES (:fid, :name, :at, "
            ":agent, :sid, :rid, :mid, :outcome) ON CONFLICT (firing_id) DO NOTHING"
        ),
        {
            "fid": firing.firing_id,
            "name": firing.schedule_name,
            "at": firing.scheduled_at,
            "agent": firing.agent_name,
            "sid": firing.session_id,
            "rid": firing.run_id,
            "mid": firing.message_id,
            "outcome": firing.outcome,
        },
    )


async def list_firings(conn: Executor, name: str, limit: int) -> list[FiringInfo]:
    """A schedule's firings, newest first."""
    rows = await conn.execute(
        _sql(_FIRINGS.format(name=":name", limit=":limit")), {"name": name, "limit": limit}
    )
    return [firing_from_row(row) for row in rows]


def firing_from_row(row: Any) -> FiringInfo:
    names = _FIRING_COLUMNS.split(", ")
    return FiringInfo.model_validate(dict(zip(names, row, strict=True)))
