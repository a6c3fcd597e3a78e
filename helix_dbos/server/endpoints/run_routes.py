"""SQLConnection routes (seed 002's Agent Server): start, resume, stream, status, control, answers."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Query
from fastapi.responses import StreamingResponse

from helix_dbos.api.answers import Answer, ClientResult, HumanInput, verdict
from helix_dbos.api.models import (
    CancelQueuedRequest,
    ControlRequest,
    ControlResponse,
    QueuedMessage,
    ResumeRequest,
    RunStarted,
    StartRequest,
    StatusResponse,
    SubmitToolResultRequest,
    SubmitToolResultResponse,
)
from helix_dbos.api.runs import RunInfo
from helix_dbos.facade.helix import HelixDBOS
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.server import queries
from helix_dbos.server.endpoints import session_routes
from helix_dbos.server.endpoints.session_routes import (
    ControlHandler,
    SessionHandlers,
    StreamHandler,
    SubmitHandler,
)
from helix_dbos.server.http.auth import Principal, current_principal
from helix_dbos.server.http.keyed_start import start_once
from helix_dbos.server.http.route_context import ERROR_RESPONSES, SSE_RESPONSES, ServerContext
from helix_dbos.server.http.sse import parse_last_event_id
from helix_dbos.server.http.sse_fanout import SessionFanout, event_stream
from helix_dbos.server.http.streams import SlotStreamingResponse
from helix_dbos.server.http.visibility import require_own_new_session, require_visible

Who = Annotated[Principal, Depends(current_principal)]

SSE_DESCRIPTION = (
    "Server-Sent Events: one event per stream chunk (`id: <seq>`, `event: <type>`, "
    "`data: <chunk JSON>`), keep-alive comments while idle, and a final `end` event. "
    "Reconnect with the `Last-Event-ID` header (or `after_seq`) to resume."
)


def build_router(ctx: ServerContext) -> APIRouter:
    router = APIRouter(responses=ERROR_RESPONSES)
    helix = ctx.helix

    @router.post("/start", response_model=RunStarted, tags=["runs"], summary="Start a run")
    async def start(body: StartRequest, principal: Who) -> RunStarted:
        ctx.check_ids(
            agent=body.agent, session_id=body.session_id, idempotency_key=body.idempotency_key
        )
        require_own_new_session(principal, body.session_id)
        if body.idempotency_key is not None:
            return await start_once(helix, body, open_run)
        return await open_run(body)

    async def open_run(body: StartRequest) -> RunStarted:
        handle = await helix.execute(
            body.agent,
            [*([body.input] if body.input is not None else []), *body.parts]
            if body.parts
            else body.input,
            session_id=body.session_id,
            state=body.state,
            priority=body.priority,
            multitask_strategy=body.multitask_strategy,
            tenant=body.tenant,
            usage_limits=body.usage_limits.limits() if body.usage_limits else None,
        )
        return RunStarted(
            session_id=handle.session_id,
            run_id=handle.run_id,
            workflow_id=handle.workflow_id,
            message_id=getattr(handle, "message_id", None),
        )

    @router.post(
        "/resume",
        response_model=RunStarted,
        tags=["runs"],
        summary="Continue a session in a new run",
    )
    async def resume(body: ResumeRequest, principal: Who) -> RunStarted:
        ctx.check_ids(session_id=body.session_id)
        await require_visible(ctx, principal, body.session_id)
        handle = await helix.resume(body.session_id, body.message)
        return RunStarted(
            session_id=handle.session_id, run_id=handle.run_id, workflow_id=handle.workflow_id
        )

    stream = _add_stream_routes(router, ctx)
    handlers = _add_control_routes(router, ctx)
    # Seed 002's chat routes and /workspaces: the same handlers under the chat paths.
    session_routes.add(router, SessionHandlers(stream, *handlers))
    _add_queue_routes(router, ctx)
    return router


def _add_queue_routes(router: APIRouter, ctx: ServerContext) -> None:
    """A session's stored messages (double texting): list them, cancel one."""
    helix = ctx.helix

    @router.get(
        "/queue",
        response_model=list[QueuedMessage],
        tags=["runs"],
        summary="A session's stored messages, oldest first",
    )
    async def queue(session_id: str, principal: Who) -> list[QueuedMessage]:
        ctx.check_ids(session_id=session_id)
        await require_visible(ctx, principal, session_id)
        listed = await helix.queued_messages(session_id)
        return [QueuedMessage.model_validate(m.model_dump()) for m in listed]

    @router.post(
        "/queue/cancel",
        response_model=QueuedMessage,
        tags=["control"],
        summary="Cancel a stored message before its run starts",
    )
    async def cancel(body: CancelQueuedRequest, principal: Who) -> QueuedMessage:
        ctx.check_ids(session_id=body.session_id, message_id=body.message_id)
        await require_visible(ctx, principal, body.session_id)
        cancelled = await helix.cancel_queued(body.session_id, body.message_id)
        return QueuedMessage.model_validate(cancelled.model_dump())


def _add_stream_routes(router: APIRouter, ctx: ServerContext) -> StreamHandler:
    """Following a session: its chunks live over SSE, and its state."""
    helix = ctx.helix
    fanout = SessionFanout(lambda sid, after, rid: helix.stream(sid, after_seq=after, run_id=rid))

    @router.get(
        "/sse",
        tags=["runs"],
        summary="Stream a session's chunks",
        description=SSE_DESCRIPTION,
        response_class=StreamingResponse,
        responses=SSE_RESPONSES,
    )
    async def sse(
        session_id: str,
        principal: Who,
        run_id: str | None = None,
        after_seq: Annotated[int, Query(ge=0)] = 0,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    ) -> StreamingResponse:
        ctx.check_ids(session_id=session_id, run_id=run_id)
        try:
            resumed = parse_last_event_id(last_event_id)
        except ValueError:
            raise HTTPException(
                status_code=422, detail="Last-Event-ID must be a non-negative integer (a seq)"
            ) from None
        await require_visible(ctx, principal, session_id)
        await helix.get_session(session_id)  # 404 before the stream starts, not inside it
        if run_id is not None and (await helix.get_run(run_id)).session_id != session_id:
            raise HTTPException(
                status_code=404, detail=f"Run '{run_id}' is not in session '{session_id}'"
            )
        release = ctx.streams.acquire(session_id)  # 503 past the caps
        start = resumed if resumed is not None else after_seq
        return SlotStreamingResponse(
            event_stream(
                fanout.subscription(session_id, run_id, start),
                keepalive_seconds=ctx.keepalive_seconds,
                max_seconds=ctx.max_stream_seconds,
            ),
            release=release,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    stream: StreamHandler = sse

    @router.get(
        "/status", response_model=StatusResponse, tags=["runs"], summary="A session's state"
    )
    async def status(session_id: str, principal: Who) -> StatusResponse:
        ctx.check_ids(session_id=session_id)
        await require_visible(ctx, principal, session_id)
        session = await helix.get_session(session_id)
        runs = await helix.list_runs(session_id)
        # The run before its calls: a run's wait and its pending calls commit together, so
        # a run read as waiting has its calls listed (read the other way round, a wait
        # that began between the two reads showed no call to answer).
        current_run = await helix.get_current_run(session_id)
        pending = await helix.pending_tool_calls(session_id)
        return StatusResponse(
            session=session,
            current_run=current_run,
            last_run=runs[-1] if runs else None,
            pending_tool_calls=pending,
        )

    return stream


async def record_answerer(helix: HelixDBOS, session_id: str, call_id: str, who: str) -> None:
    """Who answered, for the inbox's "answered by" (display only: after the answer)."""
    query = queries.record_answerer(session_id, call_id, who)

    async def update() -> None:
        async with helix.runtime.engine.begin() as conn:
            await conn.exec_driver_sql(query.sql, query.params)

    await on_target_loop(update)


def _add_control_routes(
    router: APIRouter, ctx: ServerContext
) -> tuple[ControlHandler, ControlHandler, SubmitHandler]:
    """Interrupt, abort and answers: what a client sends to a run that is under way."""
    helix = ctx.helix

    @router.post(
        "/interrupt",
        response_model=ControlResponse,
        tags=["control"],
        summary="Stop the live runs of a session and of the sessions below it at their next "
        "step boundary",
    )
    async def interrupt(body: ControlRequest, principal: Who) -> ControlResponse:
        ctx.check_ids(session_id=body.session_id)
        await require_visible(ctx, principal, body.session_id)
        own = await helix.get_current_run(body.session_id)
        reached = await helix.interrupt(body.session_id, reason=body.reason)
        return _control(body.session_id, own, reached, "interrupt_requested")

    @router.post(
        "/abort",
        response_model=ControlResponse,
        tags=["control"],
        summary="Cancel the live runs of a session and of the sessions below it now",
    )
    async def abort(body: ControlRequest, principal: Who) -> ControlResponse:
        ctx.check_ids(session_id=body.session_id)
        await require_visible(ctx, principal, body.session_id)
        own = await helix.get_current_run(body.session_id)
        reached = await helix.abort(body.session_id, reason=body.reason)
        return _control(body.session_id, own, reached, "aborted")

    def _control(
        session_id: str,
        own: RunInfo | None,
        reached: list[str],
        action: Literal["interrupt_requested", "aborted"],
    ) -> ControlResponse:
        run_id = own.run_id if own is not None and own.run_id in reached else None
        return ControlResponse(session_id=session_id, run_id=run_id, run_ids=reached, action=action)

    @router.post(
        "/submit-tool-result",
        response_model=SubmitToolResultResponse,
        tags=["control"],
        summary="Answer a pending tool call (approval, client tool result, human input)",
    )
    async def submit_tool_result(
        body: SubmitToolResultRequest, principal: Who
    ) -> SubmitToolResultResponse:
        # Every field is checked before the answer is applied: a 4xx means nothing ran.
        ctx.check_ids(
            session_id=body.session_id,
            tool_call_id=body.tool_call_id,
            answered_by=body.answered_by,
        )
        await require_visible(ctx, principal, body.session_id)
        # A named principal is who answered; the shared token leaves it to the client.
        who = principal.name or body.answered_by or "HTTP API"
        if body.kind == "client-tool-result":
            ctx.check_result_size("result", body.result if body.error is None else body.error)
        elif body.kind == "approval-response":
            ctx.check_result_size("reason", body.reason)
        else:
            ctx.check_result_size("human_input", body.human_input)
        sid, tcid = body.session_id, body.tool_call_id
        answer: Answer
        if body.kind == "client-tool-result":
            answer = ClientResult(body.result, body.error)
        elif body.kind == "approval-response":
            answer = verdict(bool(body.approved), body.reason)
        else:
            answer = HumanInput(body.human_input, body.approved)
        await helix.answer(sid, tcid, answer)
        await record_answerer(helix, sid, tcid, who)
        return SubmitToolResultResponse(session_id=sid, tool_call_id=tcid, kind=body.kind)

    return interrupt, abort, submit_tool_result
