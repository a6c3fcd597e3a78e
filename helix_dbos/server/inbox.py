"""GET /inbox: the approvals inbox, a self-contained page (no build step, no CDN).

The page reads the same JSON API as any client (/runs?status=waiting,
/sessions/{id}/messages, /submit-tool-result, /interrupt, /abort) and follows runs over
/sse; /answered lists what was answered, by whom and when, so answered items survive a
reload. A browser without credentials gets a sign-in form (the edge guard serves it with
the 401) that posts the token here: the server checks it and sets the HttpOnly cookie,
so no script, the inbox's included, ever holds the token.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response
from starlette.requests import Request as StarletteRequest

from helix_dbos.api.models import AnsweredCall
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.server import queries
from helix_dbos.server.http.auth import TOKEN_COOKIE, Principal, current_principal, principal_of
from helix_dbos.server.http.cookies import cleared_cookie, token_cookie
from helix_dbos.server.http.route_context import ERROR_RESPONSES, ServerContext
from helix_dbos.server.http.visibility import visible_rows
from helix_dbos.server.pages import page

SIGN_IN_FAILED = '<p id="error" class="error">'


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
    async def answered(
        principal: Annotated[Principal, Depends(current_principal)],
        limit: Annotated[int, Query(ge=1, le=500)] = 20,
    ) -> list[AnsweredCall]:
        query = queries.answered_tool_calls(limit)
        rows = await on_target_loop(lambda: queries.fetch_async(helix.runtime.engine, query))
        return [AnsweredCall.model_validate(r) for r in await visible_rows(ctx, principal, rows)]

    @router.post("/sign-in", include_in_schema=False)
    async def sign_in(request: Request) -> Response:
        """The sign-in form: check the token as any request would be, then set the cookie."""
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0].strip()
        if not token or await principal_of(ctx.authenticate, with_token(request, token)) is None:
            failed = page("sign_in.html").replace(
                '<p id="error" class="error" hidden>', SIGN_IN_FAILED
            )
            return HTMLResponse(failed, status_code=401, headers={"Cache-Control": "no-store"})
        response = Response(status_code=303, headers={"Location": "inbox"})
        response.raw_headers.append(token_cookie(token, request, ctx.cookie_max_age))
        return response

    @router.post("/sign-out", include_in_schema=False)
    async def sign_out(request: Request) -> Response:
        response = Response(status_code=303, headers={"Location": "inbox"})
        response.raw_headers.append(cleared_cookie(request))
        return response

    return router


def with_token(request: Request, token: str) -> StarletteRequest:
    """The request as it would arrive carrying `token` (header and cookie, no query), so
    any `authenticate` hook that accepts the token accepts the sign-in."""
    try:
        bearer = f"Bearer {token}".encode("latin-1")
        cookie = f"{TOKEN_COOKIE}={quote(token, safe='')}".encode("latin-1")
    except UnicodeEncodeError:
        bearer = cookie = b""
    headers = [
        (name, value)
        for name, value in request.scope["headers"]
        if name not in (b"authorization", b"cookie")
    ]
    headers += [(b"authorization", bearer), (b"cookie", cookie)]
    return StarletteRequest({**request.scope, "headers": headers, "query_string": b""})
