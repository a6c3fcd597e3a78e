"""GET /inbox: the approvals inbox, one self-contained HTML page (no build step, no CDN).

The page reads the same JSON API as any client (/runs?status=waiting,
/sessions/{id}/messages, /submit-tool-result) and follows runs over /sse, so it
needs no endpoint of its own beyond the HTML.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from helix_dbos.server.context import ERROR_RESPONSES


@cache
def inbox_html() -> str:
    return resources.files("helix_dbos.server").joinpath("inbox.html").read_text("utf-8")


def build_router() -> APIRouter:
    router = APIRouter(tags=["inbox"])

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
        return HTMLResponse(inbox_html(), headers={"Cache-Control": "no-store"})

    return router
