"""Schedules as the API shows them, and the bodies of the schedule routes
(docs/schedules.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# What a firing does when its session already has a live run (double texting's names):
# `enqueue` waits behind it; `reject` skips the firing; `steer` joins the live run.
ScheduleStrategy = Literal["enqueue", "reject", "steer"]


class ScheduleInfo(BaseModel):
    """A schedule, as `list_schedules`, the HTTP API and `helix-dbos schedules` show it."""

    name: str
    agent: str
    cron: str
    status: Literal["active", "paused"]
    input: str | None = None
    session_id: str | None = None
    state: dict[str, Any] | None = None
    multitask_strategy: ScheduleStrategy = "enqueue"
    timezone: str | None = None
    automatic_backfill: bool = False
    last_fired_at: datetime | None = None
    next_fire_at: datetime | None = Field(
        default=None, description="The next firing time (None while paused)"
    )


class FiringInfo(BaseModel):
    """One firing of a schedule (a row of `helix.schedule_firings`)."""

    firing_id: str
    schedule_name: str
    scheduled_at: datetime
    agent_name: str
    session_id: str
    run_id: str | None = None
    message_id: str | None = None
    outcome: Literal["started", "queued", "rejected"]
    created_at: datetime | None = None


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
