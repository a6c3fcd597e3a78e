"""Scheduled agents over HTTP (issue 34): list, create, read, pause, resume, delete,
backfill and trigger schedules, and read a schedule's firings. Schedules act for every
session, so a principal limited to some sessions gets a 403."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query

from helix_dbos.api.schedules import (
    Backfilled,
    BackfillRequest,
    FiringInfo,
    ScheduleInfo,
    ScheduleRequest,
    Triggered,
)
from helix_dbos.server.http.auth import Principal, current_principal
from helix_dbos.server.http.route_context import ERROR_RESPONSES, ServerContext


def _admin(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
    if not principal.sees_everything:
        raise HTTPException(
            status_code=403,
            detail=f"{principal.name or 'this principal'} may not manage schedules: "
            "they start runs in any session",
        )
    return principal


Admin = Annotated[Principal, Depends(_admin)]


def build_router(ctx: ServerContext) -> APIRouter:
    router = APIRouter(responses=ERROR_RESPONSES, tags=["schedules"])
    helix = ctx.helix

    @router.get("/schedules", response_model=list[ScheduleInfo], summary="Every schedule")
    async def list_schedules(_: Admin, agent: str | None = None) -> list[ScheduleInfo]:
        ctx.check_ids(agent=agent)
        return await helix.schedules.list(agent)

    @router.post("/schedules", response_model=ScheduleInfo, summary="Create or replace a schedule")
    async def create(body: ScheduleRequest, _: Admin) -> ScheduleInfo:
        ctx.check_ids(agent=body.agent, session_id=body.session_id, name=body.name)
        return await helix.schedules.create(
            body.agent,
            body.cron,
            input=body.input,
            session=body.session_id,
            name=body.name,
            state=body.state,
            multitask_strategy=body.multitask_strategy,
            timezone=body.timezone,
            backfill=body.backfill,
        )

    @router.get("/schedules/{name}", response_model=ScheduleInfo, summary="One schedule")
    async def get(name: str, _: Admin) -> ScheduleInfo:
        ctx.check_ids(name=name)
        return await helix.schedules.get(name)

    @router.post("/schedules/{name}/pause", response_model=ScheduleInfo, summary="Stop firing")
    async def pause(name: str, _: Admin) -> ScheduleInfo:
        ctx.check_ids(name=name)
        return await helix.schedules.pause(name)

    @router.post("/schedules/{name}/resume", response_model=ScheduleInfo, summary="Fire again")
    async def resume(name: str, _: Admin) -> ScheduleInfo:
        ctx.check_ids(name=name)
        return await helix.schedules.resume(name)

    @router.delete("/schedules/{name}", response_model=ScheduleInfo, summary="Delete a schedule")
    async def delete(name: str, _: Admin) -> ScheduleInfo:
        ctx.check_ids(name=name)
        return await helix.schedules.delete(name)

    @router.post(
        "/schedules/{name}/backfill",
        response_model=Backfilled,
        summary="Fire the missed firings of a window, once each",
    )
    async def backfill(name: str, body: BackfillRequest, _: Admin) -> Backfilled:
        ctx.check_ids(name=name)
        return Backfilled(firing_ids=await helix.schedules.backfill(name, body.start, body.end))

    @router.post("/schedules/{name}/trigger", response_model=Triggered, summary="Fire now")
    async def trigger(name: str, _: Admin) -> Triggered:
        ctx.check_ids(name=name)
        return Triggered(firing_id=await helix.schedules.trigger(name))

    @router.get(
        "/schedules/{name}/firings",
        response_model=list[FiringInfo],
        summary="A schedule's firings, newest first, with the run each made",
    )
    async def firings(
        name: str, _: Admin, limit: Annotated[int, Query(ge=1, le=1000)] = 100
    ) -> list[FiringInfo]:
        ctx.check_ids(name=name)
        return await helix.schedules.firings(name, limit=limit)

    return router
