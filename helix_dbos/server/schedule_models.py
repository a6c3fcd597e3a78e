"""Request and response bodies of the schedule routes (`server/schedules.py`); the
schedules themselves are `ScheduleInfo` and `FiringInfo` (`definitions/schedule.py`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from helix_dbos.definitions.schedule import FiringInfo as FiringInfo
from helix_dbos.definitions.schedule import ScheduleInfo as ScheduleInfo
from helix_dbos.definitions.schedule import ScheduleStrategy


class ScheduleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str = Field(description="The agent each firing runs")
    cron: str = Field(
        description="Cron expression: five fields, or six with seconds first ('*/5 * * * *')"
    )
    input: str | None = Field(None, description="The user message of each firing's run")
    session_id: str | None = Field(
        None,
        description="Append every firing to this session (created if new); "
        "omitted: each firing in a session of its own",
    )
    name: str | None = Field(
        None, description="The schedule's name (default: the agent's); an existing one is replaced"
    )
    state: dict[str, Any] | None = Field(None, description="The state of each firing's run")
    multitask_strategy: ScheduleStrategy = Field(
        "enqueue",
        description="A firing while the session's run is live: enqueue (wait behind it), "
        "reject (skip the firing) or steer (join the live run)",
    )
    timezone: str | None = Field(None, description="IANA time zone of the cron (default UTC)")
    backfill: bool = Field(
        False,
        description="At a process's start or a resume, fire the firings missed since the last one",
    )


class BackfillRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    start: datetime = Field(description="Fire the firings due after this time...")
    end: datetime | None = Field(None, description="...and before this one (default: now)")


class Backfilled(BaseModel):
    firing_ids: list[str] = Field(
        description="Every firing of the window (DBOS workflow ids); those that had fired "
        "were not fired again"
    )


class Triggered(BaseModel):
    firing_id: str = Field(description="The firing's DBOS workflow id")
