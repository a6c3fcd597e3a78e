"""Seed 004's chat endpoints: one request runs a turn to its end and returns its messages.

`context_id` is the helix session id. The run is durable like any other: if the
client goes away, it still completes. A run that stops to wait for a human
(an approval, a client tool) does not hold the request for days: the endpoint
answers 202 with the pending calls, to be answered through /submit-tool-result.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import JSONResponse

from helix_dbos.api.answers import HUMAN_REQUESTS
from helix_dbos.api.models import (
    AddAIMessageRequest,
    ChatErrorResponse,
    ChatInvokeRequest,
    ChatRequest,
    ChatResponse,
    TerminatingConfigModel,
)
from helix_dbos.definitions.agent import TerminatingConfig
from helix_dbos.errors import SessionNotFoundError
from helix_dbos.orchestration.double_texting import MultitaskStrategy
from helix_dbos.orchestration.parts import UserPart
from helix_dbos.orchestration.terminating import generated_messages, response_text
from helix_dbos.runtime.sessions.handle import RunHandle
from helix_dbos.runtime.sessions.session_queue import QueuedRunHandle
from helix_dbos.runtime.steps.results import AgentResult
from helix_dbos.server.http.auth import Principal, current_principal
from helix_dbos.server.http.route_context import ERROR_RESPONSES, ServerContext
from helix_dbos.server.http.visibility import require_own_new_session

Who = Annotated[Principal, Depends(current_principal)]

HUMAN_REQUEST_CHUNKS = HUMAN_REQUESTS
AnyChatRequest = ChatRequest | ChatInvokeRequest | AddAIMessageRequest
CHAT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    202: {
        "model": ChatResponse,
        "description": "The run waits for a human (see pending_tool_calls)",
    },
    422: {
        "model": ChatErrorResponse,
        "description": "Malformed request, or the run ended without completing "
        "(e.g. 'Max invocations exceeded')",
    },
}


def build_router(ctx: ServerContext) -> APIRouter:
    router = APIRouter(tags=["chat"], responses=CHAT_RESPONSES)

    async def turn(
        body: AnyChatRequest, principal: Principal, message: str | Sequence[str | UserPart] | None
    ) -> Any:
        """The chat routes' one path: the caller's own session (or a new one), one turn."""
        require_own_new_session(principal, body.context_id)
        return await run_turn(
            ctx,
            body.context_id,
            body.agent,
            message,
            body.terminating_config,
            body.multitask_strategy,
            body.tenant,
        )

    @router.post(
        "/chat", response_model=ChatResponse, summary="Send a human message, run to the end"
    )
    async def chat(body: ChatRequest, principal: Who) -> Any:
        message = [body.message, *body.parts] if body.parts else body.message
        return await turn(body, principal, message)

    @router.post(
        "/chat/invoke", response_model=ChatResponse, summary="Run the agent without a new message"
    )
    async def invoke(body: ChatInvokeRequest, principal: Who) -> Any:
        return await turn(body, principal, None)

    @router.post(
        "/chat/add-ai-message",
        response_model=ChatResponse,
        summary="Have the AI add a message, optionally guided by a prompt",
    )
    async def add_ai_message(body: AddAIMessageRequest, principal: Who) -> Any:
        return await turn(body, principal, body.prompt)

    return router


async def run_turn(
    ctx: ServerContext,
    context_id: str,
    agent: str | None,
    message: str | Sequence[str | UserPart] | None,
    config: TerminatingConfigModel | None,
    strategy: MultitaskStrategy | None = None,
    tenant: str | None = None,
) -> Any:
    ctx.check_ids(context_id=context_id, agent=agent)
    helix = ctx.helix
    agent_name = await _choose_agent(ctx, context_id, agent)
    terminating = _terminating(ctx, agent_name, config)
    queued = await helix.execute(
        agent_name,
        message,
        session_id=context_id,
        terminating=terminating,
        multitask_strategy=strategy,
        tenant=tenant,
    )
    # A stored message (double texting): the turn is the run it starts or joins.
    handle = await queued.started() if isinstance(queued, QueuedRunHandle) else queued
    if handle is None:  # cancelled before its run started
        assert isinstance(queued, QueuedRunHandle)
        failure = ChatErrorResponse(
            detail=f"Message {queued.message_id} was cancelled before its run started",
            session_id=queued.session_id,
            run_id=queued.run_id,
            status="aborted",
        )
        return JSONResponse(failure.model_dump(mode="json"), status_code=422)
    result = await _result_or_waiting(ctx, handle)
    if result is None:
        pending = await helix.pending_tool_calls(handle.session_id)
        body = ChatResponse(
            response=None,
            generated_messages=generated_messages(await helix.get_run_messages(handle.run_id)),
            session_id=handle.session_id,
            run_id=handle.run_id,
            status="waiting",
            pending_tool_calls=pending,
        )
        return JSONResponse(body.model_dump(mode="json"), status_code=202)
    messages = result.generated_messages
    if messages is None:
        messages = generated_messages(await helix.get_run_messages(handle.run_id))
    if result.status != "completed":
        failure = ChatErrorResponse(
            detail=result.error or f"The run ended {result.status}",
            session_id=result.session_id,
            run_id=result.run_id,
            status=result.status,
            generated_messages=messages,
        )
        return JSONResponse(failure.model_dump(mode="json"), status_code=422)
    response = result.response
    if response is None and result.output is not None:
        response = response_text(result.output)
    return ChatResponse(
        response=response,
        generated_messages=messages,
        session_id=result.session_id,
        run_id=result.run_id,
        status=result.status,
    )


async def _choose_agent(ctx: ServerContext, context_id: str, agent: str | None) -> str:
    """The request's agent, else the session's own, else the server's default."""
    if agent:
        return agent
    with contextlib.suppress(SessionNotFoundError):
        return (await ctx.helix.get_session(context_id)).agent_name
    if ctx.default_agent:
        return ctx.default_agent
    raise HTTPException(
        status_code=422,
        detail="agent is required: the server has no default_agent and the context is new",
    )


def _terminating(
    ctx: ServerContext, agent_name: str, config: TerminatingConfigModel | None
) -> TerminatingConfig | None:
    if config is None:
        return None
    definition = ctx.helix.agents.get(agent_name)
    if definition is not None:
        unknown = [t for t in config.tool_ids if definition.tool(t) is None]
        if unknown:
            known = ", ".join(sorted(t.name for t in definition.tools)) or "none"
            raise HTTPException(
                status_code=422,
                detail=f"terminating_config.tool_ids: agent '{agent_name}' has no tool "
                f"{', '.join(repr(t) for t in unknown)} (its tools: {known})",
            )
    return TerminatingConfig(**config.model_dump())


async def _result_or_waiting(ctx: ServerContext, handle: RunHandle) -> AgentResult | None:
    """The run's result, or None as soon as it asks a human for something."""
    result_task = asyncio.ensure_future(handle.result())
    watch_task = asyncio.ensure_future(_asks_a_human(ctx, handle))
    try:
        done, _ = await asyncio.wait({result_task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
        if result_task in done:
            return result_task.result()
        if watch_task.result():
            return None
        return await result_task
    finally:
        for task in (result_task, watch_task):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


async def _asks_a_human(ctx: ServerContext, handle: RunHandle) -> bool:
    async for chunk in ctx.helix.stream(handle.session_id, run_id=handle.run_id):
        if chunk.type in HUMAN_REQUEST_CHUNKS:
            return True
    return False
