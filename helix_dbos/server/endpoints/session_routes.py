"""Seed 002's chat routes (`/chat/{session_id}/...`) and its always-wired `/workspaces`.

The chat routes are the executor routes with the session in the path: the very same
handlers (`routes.py`) answer them, so `/chat/{session_id}/stream` is `/sse`,
`/chat/{session_id}/interrupt` is `/interrupt`, and so on, with the same checks, errors
and OpenAPI models. The DBOS runtime has no workspaces (seed 002: "DBOS silently passes
workspaces: undefined"), so `/workspaces` answers an empty list rather than a 404 that a
client written for the Agent Server would take for a broken server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from helix_dbos.api.models import (
    ChatControlRequest,
    ChatSubmitToolResultRequest,
    ControlRequest,
    ControlResponse,
    SubmitToolResultRequest,
    SubmitToolResultResponse,
    Workspace,
)
from helix_dbos.server.http.auth import Principal, current_principal
from helix_dbos.server.http.route_context import SSE_RESPONSES

Who = Annotated[Principal, Depends(current_principal)]
StreamHandler = Callable[..., Awaitable[StreamingResponse]]
ControlHandler = Callable[[ControlRequest, Principal], Awaitable[ControlResponse]]
SubmitHandler = Callable[[SubmitToolResultRequest, Principal], Awaitable[SubmitToolResultResponse]]


@dataclass(frozen=True)
class SessionHandlers:
    """The executor routes' handlers that the chat routes answer with."""

    stream: StreamHandler
    interrupt: ControlHandler
    abort: ControlHandler
    submit_tool_result: SubmitHandler


def add(router: APIRouter, handlers: SessionHandlers) -> None:
    # `session_id` of the /sse handler is a path parameter here: same function, same checks.
    router.add_api_route(
        "/chat/{session_id}/stream",
        handlers.stream,
        methods=["GET"],
        tags=["chat"],
        summary="Stream a session's chunks (as GET /sse)",
        description="The chat route of `GET /sse?session_id=...`: the same Server-Sent "
        "Events, resumable with `Last-Event-ID` (or `after_seq`).",
        response_class=StreamingResponse,
        responses=SSE_RESPONSES,
    )

    @router.post(
        "/chat/{session_id}/submit-tool-result",
        response_model=SubmitToolResultResponse,
        tags=["chat"],
        summary="Answer a pending tool call (as POST /submit-tool-result)",
    )
    async def chat_submit(
        session_id: str, body: ChatSubmitToolResultRequest, principal: Who
    ) -> SubmitToolResultResponse:
        fields = body.model_dump(exclude_unset=True)  # keeps which fields the client set
        request = SubmitToolResultRequest(session_id=session_id, **fields)
        return await handlers.submit_tool_result(request, principal)

    @router.post(
        "/chat/{session_id}/interrupt",
        response_model=ControlResponse,
        tags=["chat"],
        summary="Stop the session's live runs at their next step boundary (as POST /interrupt)",
    )
    async def chat_interrupt(
        session_id: str, principal: Who, body: ChatControlRequest | None = None
    ) -> ControlResponse:
        return await handlers.interrupt(_control(session_id, body), principal)

    @router.post(
        "/chat/{session_id}/abort",
        response_model=ControlResponse,
        tags=["chat"],
        summary="Cancel the session's live runs now (as POST /abort)",
    )
    async def chat_abort(
        session_id: str, principal: Who, body: ChatControlRequest | None = None
    ) -> ControlResponse:
        return await handlers.abort(_control(session_id, body), principal)

    @router.get(
        "/workspaces",
        response_model=list[Workspace],
        tags=["runs"],
        summary="Workspaces (always empty: the DBOS runtime has none)",
        description="Seed 002's Agent Server always serves this route. Workspaces run on "
        "the JS and Cloudflare runtimes only; on DBOS the list is empty.",
    )
    async def workspaces(_: Who) -> list[Workspace]:
        return []


def _control(session_id: str, body: ChatControlRequest | None) -> ControlRequest:
    return ControlRequest(session_id=session_id, reason=body.reason if body else None)
