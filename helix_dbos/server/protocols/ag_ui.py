"""AG-UI (spec 1.0) over helix runs: `POST /ag-ui/{agent}` takes a `RunAgentInput` and
streams AG-UI events as Server-Sent Events (docs/protocols/ag-ui.md).

- thread id = helix session id. A new AG-UI run starts a helix run once per
  (threadId, runId): the start is keyed (`server/http/keyed_start.py`), so the same input sent
  again (a reconnect, a retry after the server died) streams that same run again from its
  first event, or after the `Last-Event-ID` the client sends (the helix seq on each
  chunk's last event).
- An approval, a client tool or a human input ends the AG-UI run with RUN_FINISHED,
  `outcome.type = "interrupt"`, one interrupt per pending call (`id` = helix tool call
  id); the next input's `resume` answers them (`ag_ui_answers.py`) and its stream carries
  the helix run on from there.
- `tools` (front-end tools) run as helix client tools declared for this run only.

Input errors are JSON 4xx before the stream starts (helix's `{"detail": ...}`); once it
has started, a failure is a RUN_ERROR event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from ag_ui.core import (
    DocumentPart,
    FileSource,
    ImagePart,
    RunAgentInput,
    RunErrorEvent,
    RunStartedEvent,
    TextPart,
    UrlSource,
    UserMessage,
)
from fastapi import APIRouter, Depends, Header, HTTPException
from fastapi.responses import StreamingResponse

from helix_dbos.api.models import RunStarted, StartRequest
from helix_dbos.definitions.request_tools import ClientToolSpec
from helix_dbos.errors import ContentPartError, SessionNotFoundError
from helix_dbos.orchestration.parts import DocumentUrl, ImageUrl, UserPart
from helix_dbos.runtime.process.outage import is_transient_db_error
from helix_dbos.server.http.auth import Principal, current_principal
from helix_dbos.server.http.keyed_start import start_once
from helix_dbos.server.http.route_context import ERROR_RESPONSES, SSE_RESPONSES, ServerContext
from helix_dbos.server.http.sse import SSEWire, mapped_event_stream, parse_last_event_id
from helix_dbos.server.http.streams import SlotStreamingResponse
from helix_dbos.server.http.visibility import require_own_new_session, require_visible
from helix_dbos.server.protocols.ag_ui_answers import (
    ResumePoint,
    apply_resume,
    entries_of,
    find_requests,
    trailing_tool_results,
)
from helix_dbos.server.protocols.ag_ui_events import HUMAN_REQUESTS, Frame, Translator
from helix_dbos.server.protocols.file_parts import file_part
from helix_dbos.streaming.chunks import StreamChunk

Who = Annotated[Principal, Depends(current_principal)]

DESCRIPTION = (
    "AG-UI 1.0: a `RunAgentInput` in, AG-UI events out as Server-Sent Events "
    "(`data: <event JSON>`, `id: <helix seq>` on resumable events). `threadId` is the helix "
    "session. Send the same input again (optionally with `Last-Event-ID`) to reconnect to "
    "its run; answer an interrupt outcome with the next input's `resume`. Input errors "
    "are JSON 4xx; a failure once streaming is a `RUN_ERROR` event. See "
    "docs/protocols/ag-ui.md."
)


def build_router(ctx: ServerContext) -> APIRouter:
    router = APIRouter(tags=["protocols"], responses=ERROR_RESPONSES)

    @router.post(
        "/ag-ui/{agent}",
        summary="Run an agent over AG-UI",
        description=DESCRIPTION,
        response_class=StreamingResponse,
        responses=SSE_RESPONSES,
    )
    async def run(
        agent: str,
        body: RunAgentInput,
        principal: Who,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    ) -> StreamingResponse:
        ctx.check_ids(agent=agent, thread_id=body.thread_id, run_id=body.run_id)
        try:
            resumed = parse_last_event_id(last_event_id)
        except ValueError:
            raise HTTPException(
                status_code=422, detail="Last-Event-ID must be a non-negative integer (a seq)"
            ) from None
        ctx.helix.runtime.agent(agent)  # 404 for an agent the server does not have
        point = await _resume_point(ctx, principal, agent, body)
        if point is None:
            require_own_new_session(principal, body.thread_id)
            started = await _start(ctx, agent, body)
            point = ResumePoint(started.run_id, 0, frozenset())
        after = max(point.after_seq, resumed or 0)
        release = ctx.streams.acquire(body.thread_id)  # 503 past the caps
        return SlotStreamingResponse(
            mapped_event_stream(
                _events(ctx, body, point, after),
                keepalive_seconds=ctx.keepalive_seconds,
                max_seconds=ctx.max_stream_seconds,
                wire=WIRE,
            ),
            release=release,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return router


async def _resume_point(
    ctx: ServerContext, principal: Principal, agent: str, body: RunAgentInput
) -> ResumePoint | None:
    """For an input that answers interrupts: answer them, and where its stream starts."""
    helix = ctx.helix
    try:
        await require_visible(ctx, principal, body.thread_id)
        session = await helix.get_session(body.thread_id)
    except SessionNotFoundError:
        if body.resume:
            raise
        return None
    results = {m.tool_call_id for m in trailing_tool_results(body)} if not body.resume else set()
    asked = await find_requests(helix, body.thread_id, results) if results else []
    entries = entries_of(
        body, {c.payload["tool_call_id"] for c in asked if c.type == "client_tool_request"}
    )
    if not entries:
        return None
    if session.agent_name != agent:
        raise HTTPException(
            status_code=409,
            detail=f"thread '{body.thread_id}' belongs to agent '{session.agent_name}'",
        )
    return await apply_resume(ctx, body.thread_id, entries)


async def _start(ctx: ServerContext, agent: str, body: RunAgentInput) -> RunStarted:
    tools = tuple(ClientToolSpec.of(t.name, t.description, t.parameters) for t in body.tools or [])
    ctx.check_ids(**{f"tools[{i}].name": t.name for i, t in enumerate(tools)})
    state = body.state if isinstance(body.state, dict) and body.state else None
    request = StartRequest(
        agent=agent,
        input=_user_text(body),
        parts=_user_files(body),
        session_id=body.thread_id,
        state=state,
        idempotency_key=f"ag-ui:{body.thread_id}:{body.run_id}",
        multitask_strategy="reject",
    )

    async def open_run(start: StartRequest) -> RunStarted:
        text = [start.input] if start.input is not None else []
        handle = await ctx.helix.execute(
            start.agent,
            [*text, *start.parts] if start.parts else start.input,
            session_id=start.session_id,
            state=start.state,
            multitask_strategy="reject",
            client_tools=tools,
        )
        return RunStarted(
            session_id=handle.session_id, run_id=handle.run_id, workflow_id=handle.workflow_id
        )

    return await start_once(ctx.helix, request, open_run)


def _user_text(body: RunAgentInput) -> str | None:
    """The new user message: the input's last message, when a user wrote it (helix keeps
    the thread's history; the earlier messages are already in it)."""
    if not body.messages or not isinstance(body.messages[-1], UserMessage):
        return None
    content = body.messages[-1].content
    if isinstance(content, str):
        return content
    return "".join(p.text for p in content if isinstance(p, TextPart))


def _user_files(body: RunAgentInput) -> list[UserPart]:
    """The new user message's image and document parts (a `data` or `url` source) as
    content parts (docs/content-parts.md); audio, video and provider file ids are refused."""
    if not body.messages or not isinstance(body.messages[-1], UserMessage):
        return []
    content = body.messages[-1].content
    if isinstance(content, str):
        return []
    files: list[UserPart] = []
    for i, part in enumerate(content):
        if isinstance(part, TextPart):
            continue
        where = f"content[{i}]"
        source = part.source
        if not isinstance(part, ImagePart | DocumentPart) or isinstance(source, FileSource):
            raise ContentPartError(
                f"{where}: only image and document parts with a data or url source are taken"
            )
        if isinstance(source, UrlSource):
            kind = ImageUrl if isinstance(part, ImagePart) else DocumentUrl
            files.append(kind(url=source.value, media_type=source.mime_type, identifier=part.id))
        else:
            files.append(
                file_part(
                    media_type=source.mime_type,
                    url=None,
                    data=source.value,
                    filename=part.id,
                    where=where,
                )
            )
    return files


async def _events(
    ctx: ServerContext, body: RunAgentInput, point: ResumePoint, after: int
) -> AsyncIterator[str]:
    helix = ctx.helix
    sid = body.thread_id
    translate = Translator(body.thread_id, body.run_id, announced=set(point.call_ids))
    yield Frame(RunStartedEvent(thread_id=body.thread_id, run_id=body.run_id)).sse()
    try:
        async for chunk in helix.stream(sid, run_id=point.run_id, after_seq=after):
            if chunk.type in HUMAN_REQUESTS:
                for frame in translate.interrupt(await _batch(ctx, sid, chunk, point.run_id)):
                    yield frame.sse()
                return
            if chunk.run_id == point.run_id and chunk.type in _TERMINAL:
                state: Any = None
                if chunk.type == "run_completed":
                    state = (await helix.get_session(sid)).state
                for frame in translate.finish(chunk, state):
                    yield frame.sse()
                return
            for frame in translate.chunk(chunk):
                yield frame.sse()
    except Exception as exc:
        if is_transient_db_error(exc):
            raise  # no RUN_ERROR: the client sends the input again and resumes
        for frame in translate.error(f"{type(exc).__name__}: {exc}", "stream_failed"):
            yield frame.sse()


# `_events` writes AG-UI's frames itself (a failure included): no helix `end` event,
# which an AG-UI client would misread.
WIRE = SSEWire(
    item=lambda frame: str(frame),
    error=lambda message: Frame(RunErrorEvent(message=message, code="stream_failed")).sse(),
    end="",
)
_TERMINAL = frozenset({"run_completed", "run_failed", "run_aborted", "run_interrupted"})


async def _batch(
    ctx: ServerContext, session_id: str, first: StreamChunk, run_id: str
) -> list[StreamChunk]:
    """The request chunks written with `first` (one gate asks for all its calls at once)."""
    batch = [first]
    async for chunk in ctx.helix.stream(
        session_id, run_id=run_id, after_seq=first.seq, follow=False
    ):
        if chunk.type not in HUMAN_REQUESTS:
            break
        batch.append(chunk)
    return batch
