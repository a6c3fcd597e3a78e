"""GET /timeline?session_id=...: a session's runs and steps as a timeline, with "fork
from here" on each checkpoint (issue 30). A self-contained page, like the inbox: it
reads the JSON API (/sessions/{id}/messages, /sessions/{id}/checkpoints) and forks with
POST /sessions/{id}/fork."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from helix_dbos.server.http.route_context import ERROR_RESPONSES
from helix_dbos.server.pages import page


def build_router() -> APIRouter:
    router = APIRouter(tags=["inbox"])

    @router.get(
        "/timeline",
        response_class=HTMLResponse,
        summary="A session's timeline with its checkpoints (HTML)",
        responses={
            200: {"content": {"text/html": {"schema": {"type": "string"}}}},
            401: ERROR_RESPONSES[401],
        },
    )
    async def timeline() -> HTMLResponse:
        return HTMLResponse(page("timeline.html"), headers={"Cache-Control": "no-store"})

    return router
