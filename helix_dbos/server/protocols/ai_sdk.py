"""The Vercel AI SDK's UI message stream (v1) over helix runs: `useChat` drives an agent.

`POST /ai-sdk/chat` takes `useChat`'s request (`id` is the helix session id). A last
message from the user starts a run with its text; a last assistant message carries the
client's answers (approvals, client tool outputs), which go to the waiting run. Either
way the response streams the run as UI message chunks until it ends or waits for the
client again. `GET /ai-sdk/chat/{id}/stream` (`useChat`'s `resume: true`) replays the
session's live run from its start and follows it (204 when nothing is live). Errors are
the protocol's `{"type": "error", "errorText": ...}` with a 4xx status.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from helix_dbos.api.answers import Answer, ClientResult, HumanInput, verdict
from helix_dbos.api.runs import PendingToolCall
from helix_dbos.errors import HelixError, SessionNotFoundError
from helix_dbos.orchestration.parts import UserPart
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.sessions.session_queue import QueuedRunHandle
from helix_dbos.server.endpoints.run_routes import record_answerer
from helix_dbos.server.http.auth import Principal, current_principal
from helix_dbos.server.http.error_responses import describe_validation, status_for
from helix_dbos.server.http.route_context import ServerContext
from helix_dbos.server.http.sse import SSEWire, mapped_event_stream
from helix_dbos.server.http.streams import SlotStreamingResponse
from helix_dbos.server.http.visibility import require_own_new_session, require_visible
from helix_dbos.server.protocols.ai_sdk_models import (
    AISDKChatRequest,
    AISDKError,
    UIMessage,
    UIPart,
    request_schema,
)
from helix_dbos.server.protocols.ai_sdk_parts import HUMAN_REQUESTS, UIChunk, UIPartMapper
from helix_dbos.server.protocols.file_parts import file_part
from helix_dbos.store import repository as repo

Who = Annotated[Principal, Depends(current_principal)]

UI_MESSAGE_STREAM_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "x-vercel-ai-ui-message-stream": "v1",
}


def _data(part: UIChunk) -> str:
    return f"data: {json.dumps(part, separators=(',', ':'), default=str)}\n\n"


UI_WIRE = SSEWire(
    item=_data,
    error=lambda message: _data({"type": "error", "errorText": message}),
    end="data: [DONE]\n\n",
)
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": AISDKError, "description": why}
    for status, why in {
        401: "The authenticate hook refused the request",
        404: "Unknown session, agent or tool call (or one this principal may not see)",
        409: "Conflicts with the session: a run is live already, or nothing waits for "
        "the answers sent",
        413: "Body or tool output larger than the limit",
        422: "Malformed request: no messages, no text, an id too long, no agent",
        503: "Too many open streams; see Retry-After",
    }.items()
}
STREAM_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The UI message stream (SSE): `data: <UI message chunk>` lines, "
        "then `data: [DONE]`",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


def error_response(status: int, text: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = AISDKError(errorText=text).model_dump()
    return JSONResponse(body, status_code=status, headers=headers)


def build_router(ctx: ServerContext) -> APIRouter:
    router = APIRouter(prefix="/ai-sdk", tags=["ai-sdk"], responses=ERRORS)

    @router.post(
        "/chat",
        summary="Vercel AI SDK: send useChat's messages, stream the run",
        response_class=Response,
        responses=STREAM_RESPONSE,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": request_schema()}},
            }
        },
    )
    async def chat(request: Request, principal: Who) -> Response:
        try:
            body = AISDKChatRequest.model_validate(await _json(request))
            return await _chat(ctx, body, principal)
        except Exception as exc:
            return _protocol_error(exc)

    @router.get(
        "/chat/{chat_id}/stream",
        summary="Vercel AI SDK: reconnect to the chat's live run (resume)",
        response_class=Response,
        responses={**STREAM_RESPONSE, 204: {"description": "Nothing is live in the chat"}},
    )
    async def resume(chat_id: str, principal: Who) -> Response:
        try:
            ctx.check_ids(session_id=chat_id)
            with contextlib.suppress(SessionNotFoundError):  # unknown or not its own
                await require_visible(ctx, principal, chat_id)
                run = await ctx.helix.get_current_run(chat_id)
                if run is not None:
                    return _stream(ctx, UIPartMapper(chat_id, run.run_id), after_seq=0)
            return Response(status_code=204)
        except Exception as exc:
            return _protocol_error(exc)

    return router


async def _json(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=f"The body is not JSON: {exc}") from None


def _protocol_error(exc: Exception) -> Response:
    """Every failure of a request as the protocol's error object, never a 5xx for input."""
    if isinstance(exc, HTTPException):
        return error_response(exc.status_code, str(exc.detail), dict(exc.headers or {}))
    if isinstance(exc, ValidationError):
        return error_response(422, describe_validation(list(exc.errors())))
    if isinstance(exc, HelixError):
        return error_response(status_for(exc), str(exc))
    raise exc


async def _chat(ctx: ServerContext, body: AISDKChatRequest, principal: Principal) -> Response:
    ctx.check_ids(session_id=body.id, agent=body.agent, message_id=body.messageId)
    if body.trigger not in (None, "submit-message"):
        raise HTTPException(
            status_code=422,
            detail=f"trigger '{body.trigger}' is not supported; send a new message instead",
        )
    last = body.messages[-1]
    if last.role == "user":
        require_own_new_session(principal, body.id)
        run_id = await _start_run(ctx, body, last)
        return _stream(ctx, UIPartMapper(body.id, run_id), after_seq=0)
    if last.role == "assistant":
        await require_visible(ctx, principal, body.id)
        return await _answer(ctx, body.id, last, principal)
    raise HTTPException(status_code=422, detail="the last message must be the user's or the AI's")


async def _start_run(ctx: ServerContext, body: AISDKChatRequest, last: UIMessage) -> str:
    text = "\n".join(p.text for p in last.parts if p.type == "text" and p.text)
    files = [_file(p, i) for i, p in enumerate(last.parts) if p.type == "file"]
    if not text.strip() and not files:
        raise HTTPException(status_code=422, detail="the last user message has no text part")
    ctx.check_result_size("message", text)
    agent = await _choose_agent(ctx, body.id, body.agent)
    message: str | list[str | UserPart] = [text, *files] if files else text
    handle = await ctx.helix.execute(agent, message, session_id=body.id)
    if isinstance(handle, QueuedRunHandle):  # double texting: the run it starts or joins
        started = await handle.started()
        if started is None:
            raise HTTPException(status_code=409, detail="the message was cancelled")
        return started.run_id
    return handle.run_id


def _file(part: UIPart, i: int) -> UserPart:
    """A UI `file` part (`mediaType`, `url`: data or http(s), `filename`) as a content part."""
    extra = part.model_extra or {}
    url, media_type, filename = extra.get("url"), extra.get("mediaType"), extra.get("filename")
    return file_part(
        media_type=media_type if isinstance(media_type, str) else None,
        url=url if isinstance(url, str) else None,
        data=None,
        filename=filename if isinstance(filename, str) else None,
        where=f"parts[{i}]",
    )


async def _choose_agent(ctx: ServerContext, session_id: str, agent: str | None) -> str:
    """The request's agent, else the session's own, else the server's default."""
    if agent:
        return agent
    with contextlib.suppress(SessionNotFoundError):
        return (await ctx.helix.get_session(session_id)).agent_name
    if ctx.default_agent:
        return ctx.default_agent
    raise HTTPException(
        status_code=422,
        detail="agent is required (a body field): the server has no default_agent "
        "and the chat is new",
    )


async def _answer(
    ctx: ServerContext, session_id: str, last: UIMessage, principal: Principal
) -> Response:
    """Hand the client's answers in the last assistant message to the waiting run, then
    stream the run on from the requests they answer."""
    helix = ctx.helix
    run = await helix.get_current_run(session_id)
    pending = {p.tool_call_id: p for p in await helix.pending_tool_calls(session_id)}
    answers = [
        (part, pending[part.toolCallId])
        for part in last.parts
        if part.is_tool and part.toolCallId in pending and _answers(part, pending[part.toolCallId])
    ]
    if run is None or not answers:
        raise HTTPException(
            status_code=409,
            detail="nothing in this chat waits for the answers in the last message "
            "(send a user message to start a run)",
        )
    for part, _ in answers:  # every answer is checked before any is applied
        ctx.check_ids(tool_call_id=part.toolCallId)
        ctx.check_result_size("output", part.output if part.errorText is None else part.errorText)
        if part.approval is not None:
            ctx.check_result_size("reason", part.approval.get("reason"))
            if not isinstance(part.approval.get("approved"), bool):
                raise HTTPException(
                    status_code=422,
                    detail=f"approval.approved of tool call '{part.toolCallId}' must be a boolean",
                )
    after_seq = await _request_seq(
        ctx, session_id, run.run_id, {c.tool_call_id for _, c in answers}
    )
    for part, call in answers:
        await _apply(ctx, session_id, part, call)
        await record_answerer(helix, session_id, call.tool_call_id, principal.name or "AI SDK")
    mapper = UIPartMapper(session_id, run.run_id)
    for part in last.parts:  # what the client's message shows already
        if part.is_tool and part.toolCallId is not None:
            mapper.announced.add(part.toolCallId)
            if part.approval is not None:
                mapper.approvals.add(part.toolCallId)
    mapper.client_outputs |= {c.tool_call_id for _, c in answers if c.kind != "approval"}
    return _stream(ctx, mapper, after_seq=after_seq, answered=True)


def _answers(part: UIPart, call: PendingToolCall) -> bool:
    if call.answered:
        return False
    if call.kind == "approval":
        return part.state == "approval-responded" and part.approval is not None
    return part.state in ("output-available", "output-error")


async def _apply(ctx: ServerContext, session_id: str, part: UIPart, call: PendingToolCall) -> None:
    await ctx.helix.answer(session_id, call.tool_call_id, _typed(part, call))


def _typed(part: UIPart, call: PendingToolCall) -> Answer:
    """The tool part as the answer its call's kind takes."""
    if call.kind == "approval":
        approval = part.approval or {}
        reason = approval.get("reason")
        return verdict(
            approval.get("approved") is True, str(reason) if reason is not None else None
        )
    if call.kind == "client":
        if part.state == "output-error":
            return ClientResult(error=part.errorText or "error")
        return ClientResult(part.output)
    output = part.output
    if isinstance(output, dict):
        text, approved = output.get("human_input"), output.get("approved")
    else:
        text, approved = (None if output is None else str(output)), None
    return HumanInput(text, approved)


async def _request_seq(ctx: ServerContext, session_id: str, run_id: str, call_ids: set[str]) -> int:
    """The seq of the last request chunk among `call_ids`: the stream goes on from there."""
    last = 0
    async for chunk in ctx.helix.stream(session_id, run_id=run_id, follow=False):
        if chunk.type in HUMAN_REQUESTS and chunk.payload.get("tool_call_id") in call_ids:
            last = chunk.seq
    return last


def _stream(
    ctx: ServerContext, mapper: UIPartMapper, *, after_seq: int, answered: bool = False
) -> Response:
    release = ctx.streams.acquire(mapper.session_id)  # 503 past the caps
    return SlotStreamingResponse(
        mapped_event_stream(
            ui_chunks(ctx, mapper, after_seq, answered=answered),
            keepalive_seconds=ctx.keepalive_seconds,
            max_seconds=ctx.max_stream_seconds,
            wire=UI_WIRE,
        ),
        release=release,
        media_type="text/event-stream",
        headers=UI_MESSAGE_STREAM_HEADERS,
    )


async def ui_chunks(
    ctx: ServerContext, mapper: UIPartMapper, after_seq: int, *, answered: bool = False
) -> AsyncIterator[UIChunk]:
    """The run's chunks after `after_seq` as UI message chunks, until the run ends or
    waits for answers only the client can give (`answered`: the client just sent some;
    if it still owes others, the response ends at once)."""
    helix, sid = ctx.helix, mapper.session_id
    for part in mapper.start():
        yield part
    if answered and await _waits_for_client(ctx, sid, mapper):
        for part in mapper.waiting():
            yield part
        return
    async for chunk in helix.stream(sid, run_id=mapper.run_id, after_seq=after_seq):
        resolved: dict[str, tuple[bool, str | None]] = {}
        if chunk.type == "run_resumed" and chunk.run_id is not None:
            resolved = await _approvals(ctx, chunk.run_id)
        for part in mapper.map(chunk, resolved):
            yield part
        if mapper.finished:
            return
        if chunk.type in HUMAN_REQUESTS and await _waits_for_client(ctx, sid, mapper):
            for part in mapper.waiting():
                yield part
            return


async def _waits_for_client(ctx: ServerContext, session_id: str, mapper: UIPartMapper) -> bool:
    """The run waits, and every call it waits on was shown to the client."""
    open_calls = [p for p in await ctx.helix.pending_tool_calls(session_id) if not p.answered]
    return bool(open_calls) and all(p.tool_call_id in mapper.announced for p in open_calls)


async def _approvals(ctx: ServerContext, run_id: str) -> dict[str, tuple[bool, str | None]]:
    """How the run's approvals were answered: call id -> (approved, reason)."""

    async def read() -> list[tuple[Any, ...]]:
        async with ctx.helix.runtime.engine.connect() as conn:
            return list(await repo.run_waits(conn, run_id))

    rows = await on_target_loop(read)
    return {
        row[0]: (row[3] == "approved", None)
        for row in rows
        if row[2] == "approval" and row[3] in ("approved", "denied")
    }
