"""A scheduled agent: what each firing of a schedule runs, and a schedule as users see it.

A helix schedule is a DBOS schedule (`dbos.workflow_schedules`) whose workflow is
`helix.scheduled_firing` and whose context is a `ScheduleSpec`: DBOS fires it (once per
firing across every process, under the workflow id `sched-<name>-<time>`), pauses,
resumes, deletes and backfills it; helix turns each firing into an ordinary run
(`schedules/firing.py`). No I/O here: the CLI imports it without DBOS.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

from croniter import croniter  # type: ignore[import-untyped]
from pydantic import BaseModel

from helix_dbos.api.schedules import FiringInfo as FiringInfo
from helix_dbos.api.schedules import ScheduleInfo as ScheduleInfo
from helix_dbos.api.schedules import ScheduleStrategy as ScheduleStrategy
from helix_dbos.errors import InvalidInputError

# The registered DBOS workflow every helix schedule fires.
FIRING_WORKFLOW = "helix.scheduled_firing"
SCHEDULE_STRATEGIES: tuple[str, ...] = ("enqueue", "reject", "steer")
MAX_NAME_LENGTH = 200


class ScheduleSpec(BaseModel):
    """What each firing runs (the DBOS schedule's context, plain JSON)."""

    name: str
    agent: str
    input: str | None = None
    # None: every firing in a session of its own; else every firing a turn of this one.
    session_id: str | None = None
    state: dict[str, Any] | None = None
    multitask_strategy: ScheduleStrategy = "enqueue"


def check_schedule(name: str, cron: str, strategy: str, timezone_name: str | None) -> None:
    """Refuse what DBOS or a firing would refuse later, with a clear message now."""
    if not name or len(name) > MAX_NAME_LENGTH or "/" in name or name.strip() != name:
        raise InvalidInputError(
            f"schedule name must be 1 to {MAX_NAME_LENGTH} characters, without '/' or "
            f"surrounding spaces, not {name!r}"
        )
    if not croniter.is_valid(cron, second_at_beginning=True):
        raise InvalidInputError(
            f"invalid cron expression {cron!r}: five fields (minute hour day month weekday), "
            "or six with seconds first"
        )
    if strategy not in SCHEDULE_STRATEGIES:
        raise InvalidInputError(
            f"a schedule's multitask_strategy is one of {', '.join(SCHEDULE_STRATEGIES)}, "
            f"not {strategy!r} (interrupting or rolling back a run on a timer is refused)"
        )
    if timezone_name is not None:
        try:
            ZoneInfo(timezone_name)
        except Exception as exc:
            raise InvalidInputError(f"unknown time zone {timezone_name!r}") from exc


def is_helix_schedule(row: dict[str, Any]) -> bool:
    return row.get("workflow_name") == FIRING_WORKFLOW and isinstance(row.get("context"), dict)


def schedule_info(row: dict[str, Any], now: datetime | None = None) -> ScheduleInfo:
    """A DBOS schedule row (its context deserialized) as a `ScheduleInfo`."""
    spec = ScheduleSpec.model_validate(row["context"])
    active = row.get("status", "ACTIVE") == "ACTIVE"
    tz_name = row.get("cron_timezone")
    last = row.get("last_fired_at")
    return ScheduleInfo(
        name=row["schedule_name"],
        agent=spec.agent,
        cron=row["schedule"],
        status="active" if active else "paused",
        input=spec.input,
        session_id=spec.session_id,
        state=spec.state,
        multitask_strategy=spec.multitask_strategy,
        timezone=tz_name,
        automatic_backfill=bool(row.get("automatic_backfill")),
        last_fired_at=datetime.fromisoformat(last) if last else None,
        next_fire_at=next_fire(row["schedule"], tz_name, now) if active else None,
    )


def next_fire(cron: str, tz_name: str | None, now: datetime | None = None) -> datetime:
    """The first firing time of `cron` after `now` (in its time zone, as DBOS reads it)."""
    tz = ZoneInfo(tz_name) if tz_name else timezone.utc
    start = (now or datetime.now(timezone.utc)).astimezone(tz)
    found: datetime = croniter(cron, start, second_at_beginning=True).get_next(datetime)
    return found
