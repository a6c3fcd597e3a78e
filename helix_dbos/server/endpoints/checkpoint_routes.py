"""Time travel over HTTP (issue 30): a session's checkpoints, one of them with the
transcript as it was, and a fork from one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from helix_dbos.api.checkpoints import Checkpoint, CheckpointView
from helix_dbos.api.models import Forked, ForkRequest
from helix_dbos.server.http.auth import Principal, current_principal
from helix_dbos.server.http.route_context import ERROR_RESPONSES, ServerContext
from helix_dbos.server.http.visibility import require_own_new_session, require_visible

Who = Annotated[Principal, Depends(current_principal)]


def build_router(ctx: ServerContext) -> APIRouter:
    router = APIRouter(responses=ERROR_RESPONSES, tags=["time travel"])
    helix = ctx.helix

    @router.get(
        "/sessions/{session_id}/checkpoints",
        response_model=list[Checkpoint],
        summary="A session's checkpoints, oldest first",
    )
    async def checkpoints(session_id: str, principal: Who) -> list[Checkpoint]:
        ctx.check_ids(session_id=session_id)
        await require_visible(ctx, principal, session_id)
        return await helix.checkpoints.list(session_id)

    @router.get(
        "/sessions/{session_id}/checkpoints/{checkpoint_id}",
        response_model=CheckpointView,
        summary="A checkpoint, with the transcript and state as they were",
    )
    async def checkpoint(session_id: str, checkpoint_id: str, principal: Who) -> CheckpointView:
        ctx.check_ids(session_id=session_id, checkpoint_id=checkpoint_id)
        await require_visible(ctx, principal, session_id)
        return await helix.checkpoints.get(session_id, checkpoint_id)

    @router.post(
        "/sessions/{session_id}/fork",
        response_model=Forked,
        summary="A new session from a checkpoint (the source is untouched)",
    )
    async def fork(session_id: str, body: ForkRequest, principal: Who) -> Forked:
        ctx.check_ids(session_id=session_id, at=body.at, new_session_id=body.new_session_id)
        await require_visible(ctx, principal, session_id)
        require_own_new_session(principal, body.new_session_id)
        new = await helix.checkpoints.fork(
            session_id, at=body.at, state=body.state, new_session_id=body.new_session_id
        )
        return Forked(
            session_id=new, forked_from_session_id=session_id, forked_from_checkpoint_id=body.at
        )

    return router
