"""GET /inbox: the approvals inbox, one self-contained HTML page (no build step, no CDN).

The page reads the same JSON API as any client (/runs?status=waiting,
/sessions/{id}/messages, /submit-tool-result, /interrupt, /abort) and follows runs over
/sse; /answered lists what was answered, by whom and when, so answered items survive a
reload. A browser without credentials gets a sign-in form instead of a JSON 401.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Annotated

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from helix_dbos.runtime.event_loop import on_target_loop
from helix_dbos.server import queries
from helix_dbos.server.context import ERROR_RESPONSES, ServerContext
from helix_dbos.server.models import AnsweredCall


@cache
def page(name: str) -> str:
    return resources.files("helix_dbos.server").joinpath(name).read_text("utf-8")


def build_router(ctx: ServerContext) -> APIRouter:
    router = APIRouter(tags=["inbox"])
    helix = ctx.helix

    @router.get(
        "/inbox",
        response_class=HTMLResponse,
        summary="The approvals inbox (HTML)",
        responses={
            200: {"content": {"text/html": {"schema": {"type": "string"}}}},
            401: ERROR_RESPONSES[401],
        },
    )
    async def inbox() -> HTMLResponse:
        return HTMLResponse(page("inbox.html"), headers={"Cache-Control": "no-store"})

    @router.get(
        "/answered",
        response_model=list[AnsweredCall],
        responses=ERROR_RESPONSES,
        summary="Answered tool calls, newest first, with who answered and when",
    )
    async def answered(limit: Annotated[int, Query(ge=1, le=500)] = 20) -> list[AnsweredCall]:
        query = queries.answered_tool_calls(limit)
        rows = await on_target_loop(lambda: queries.fetch_async(helix.runtime.engine, query))
        return [AnsweredCall.model_validate(r) for r in rows]

    return router


def install_sign_in(app: FastAPI) -> None:
    """A browser opening /inbox without credentials gets the sign-in form (still a 401),
    not `{"detail": "Not authenticated"}`; every other 401 stays JSON."""

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        wants_html = "text/html" in request.headers.get("accept", "")
        if exc.status_code == 401 and wants_html and request.url.path.endswith("/inbox"):
            return HTMLResponse(page("sign_in.html"), status_code=401)
        return await http_exception_handler(request, exc)

    app.add_exception_handler(StarletteHTTPException, on_http_error)
