"""JSON reads for the inbox: runs (waiting for a human), transcripts and usage."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Response

from helix_dbos.api.models import RunSummary, TranscriptMessage, UsageResponse, UsageRow
from helix_dbos.orchestration.parts import StoredBlob
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.server import queries
from helix_dbos.server.http.auth import Principal, current_principal
from helix_dbos.server.http.downloads import SHA256, download
from helix_dbos.server.http.route_context import ERROR_RESPONSES, ServerContext
from helix_dbos.server.http.visibility import require_visible, visible_rows

Who = Annotated[Principal, Depends(current_principal)]

RunStatusFilter = Literal[
    "waiting", "queued", "running", "paused", "completed", "failed", "interrupted", "aborted"
]


def build_router(ctx: ServerContext) -> APIRouter:
    router = APIRouter(responses=ERROR_RESPONSES, tags=["reads"])
    helix = ctx.helix

    @router.get("/runs", response_model=list[RunSummary], summary="Runs, most recent first")
    async def runs(
        principal: Who,
        status: Annotated[
            RunStatusFilter | None,
            Query(description="`waiting`: runs waiting for a human, with their pending calls"),
        ] = None,
        session_id: str | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        version: Annotated[
            str | None,
            Query(description="Only runs started by this application version"),
        ] = None,
    ) -> list[RunSummary]:
        ctx.check_ids(session_id=session_id, version=version)
        await require_visible(ctx, principal, session_id)
        rows = await on_target_loop(
            lambda: queries.runs_with_calls_async(
                helix.runtime.engine,
                status=status,
                session_id=session_id,
                limit=limit,
                version=version,
            )
        )
        return [RunSummary.model_validate(r) for r in await visible_rows(ctx, principal, rows)]

    @router.get(
        "/sessions/{session_id}/messages",
        response_model=list[TranscriptMessage],
        summary="A session's transcript",
    )
    async def messages(session_id: str, principal: Who) -> list[TranscriptMessage]:
        ctx.check_ids(session_id=session_id)
        await require_visible(ctx, principal, session_id)
        await helix.get_session(session_id)
        rows = await on_target_loop(
            lambda: queries.fetch_async(helix.runtime.engine, queries.transcript(session_id))
        )
        return [
            TranscriptMessage.model_validate({**r, "tool_calls": r["tool_calls"] or []})
            for r in rows
        ]

    @router.get(
        "/sessions/{session_id}/parts/{sha256}",
        response_class=Response,
        summary="Download an image or document of the session's transcript",
        responses={200: {"content": {"application/octet-stream": {}}}},
    )
    async def part(session_id: str, sha256: str, principal: Who) -> Response:
        """The bytes of a stored part, as an attachment that a browser never renders inline
        (`Content-Disposition: attachment`, `nosniff`, a sandboxing CSP): a part is
        whatever a user or a tool sent, so never trusted HTML."""
        ctx.check_ids(session_id=session_id)
        if not SHA256.fullmatch(sha256):
            raise HTTPException(404, "No such part")
        await require_visible(ctx, principal, session_id)
        rows = await on_target_loop(
            lambda: queries.fetch_async(
                helix.runtime.engine, queries.session_blob(session_id, sha256)
            )
        )
        if not rows:
            raise HTTPException(404, f"Session '{session_id}' has no part {sha256}")
        row = rows[0]
        name = StoredBlob(
            sha256=sha256, media_type=row["media_type"], size=0, identifier=row["identifier"]
        ).name
        return download(bytes(row["data"]), row["media_type"], name)

    @router.get(
        "/sessions/{session_id}/usage",
        response_model=UsageResponse,
        summary="A session's token and call counts",
    )
    async def usage(
        session_id: str,
        principal: Who,
        children: Annotated[
            bool,
            Query(
                description="Count every session below this one too (its sub-agents and "
                "companions, and theirs)"
            ),
        ] = False,
    ) -> UsageResponse:
        ctx.check_ids(session_id=session_id)
        await require_visible(ctx, principal, session_id)
        await helix.get_session(session_id)
        query = queries.usage(by="model", session_id=session_id, include_children=children)
        rows = await on_target_loop(lambda: queries.fetch_async(helix.runtime.engine, query))
        return UsageResponse(
            session_id=session_id,
            include_children=children,
            totals=await helix.get_usage(session_id=session_id, include_children=children),
            by_model=[UsageRow.model_validate(r) for r in rows],
        )

    return router
