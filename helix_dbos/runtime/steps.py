"""The bodies of the durable steps: one LLM call, one tool call.

Each returns a small JSON-ready dict, which DBOS checkpoints; history is read
from the messages table, never carried in a checkpoint.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from dbos import DBOS
from pydantic_core import to_jsonable_python

from helix_dbos.definitions.agent import Agent, TerminatingConfig
from helix_dbos.definitions.context import ToolContext
from helix_dbos.definitions.hooks import (
    HookContext,
    MessageEvent,
    StateChangeEvent,
    ToolEvent,
    fire,
)
from helix_dbos.errors import ToolArgumentsError
from helix_dbos.llm.base import LLMProviderError
from helix_dbos.orchestration.completion import CompletionMode, build_system_prompt
from helix_dbos.orchestration.messages import build_messages_for_llm, create_tool_result_message
from helix_dbos.orchestration.types import (
    FINISH_TOOL_NAME,
    ErrorStepResult,
    LLMRequest,
    ToolCall,
    ToolSpec,
)
from helix_dbos.runtime.commit import WriteAhead
from helix_dbos.runtime.context import current_runtime, is_transient_db_error, logger
from helix_dbos.store import repository as repo


def offered_tools(agent: Agent, mode: CompletionMode) -> list[ToolSpec]:
    specs = [t.spec() for t in agent.tools]
    if mode.inject_finish:
        specs.append(
            ToolSpec(
                name=FINISH_TOOL_NAME,
                description="Complete the task and return the final structured output.",
                parameters=agent.finish_parameters(),
                strict=agent.llm.strict_output,
            )
        )
    return specs


class DeltaWriter:
    """Writes text deltas as stream chunks, coalesced to at most one write per interval."""

    def __init__(
        self,
        rt: Any,
        session_id: str,
        run_id: str,
        agent_name: str,
        step: int,
        interval: float = 0.05,
    ) -> None:
        self._rt, self._session_id, self._run_id = rt, session_id, run_id
        self._agent_name, self._step, self._interval = agent_name, step, interval
        self._attempt = uuid.uuid4().hex[:8]  # a retried call streams again, under new keys
        self._buffer: list[str] = []
        self._last = 0.0
        self._count = 0

    async def __call__(self, delta: str) -> None:
        self._buffer.append(delta)
        if time.monotonic() - self._last >= self._interval:
            await self.flush()

    async def flush(self) -> None:
        if not self._buffer:
            return
        text_ = "".join(self._buffer)
        self._buffer.clear()
        self._last = time.monotonic()
        key = f"{self._run_id}:{self._step}:delta:{self._attempt}:{self._count}"
        self._count += 1
        await write_chunks(
            self._rt,
            self._session_id,
            self._run_id,
            self._agent_name,
            self._step,
            [(key, "text_delta", {"delta": text_})],
        )


async def write_chunks(
    rt: Any,
    session_id: str,
    run_id: str,
    agent_name: str,
    step: int,
    chunks: list[tuple[str, str, Any]],
) -> None:
    """Live chunks written outside the step's commit; keyed, so a repeat is a no-op."""
    if chunks:
        async with rt.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await repo.insert_chunks(
                conn, session_id, run_id, agent_name, step, chunks, durable=False
            )


async def llm_step(
    session_id: str,
    agent_name: str,
    run_id: str = "",
    step: int = 0,
    options: dict[str, Any] | None = None,
    previous: WriteAhead | None = None,
) -> dict[str, Any]:
    """Write the previous step's rows, read the transcript, ask the model; return the
    parsed step result and the state.

    The previous step's rows are written first (one statement, started by the workflow
    while DBOS checks this step: a `WriteAhead`), so the model always sees them, and a
    step costs no durable operation of its own beyond its LLM and tool steps.
    """
    rt = current_runtime()
    agent = rt.agent(agent_name)
    cached = None
    if previous is None:
        async with rt.engine.connect() as conn:
            interrupted, state = await repo.interrupt_and_state(conn, DBOS.workflow_id, session_id)
            if interrupted:
                return {"interrupted": True}
            history, _ = await rt.history.read(conn, session_id)
    else:
        wrote = await previous.result()
        messages = previous.commit.messages
        if wrote.interrupted:
            return {"interrupted": True}
        state = wrote.state
        if wrote.first_seq is not None and messages:
            cached = rt.history.take(session_id, (wrote.first_seq, messages))
        if cached is not None:
            history = cached[0]
        else:
            async with rt.engine.connect() as conn:
                history, _ = await rt.history.read(conn, session_id)
    mode = agent.completion_for(run_terminating(agent, options))
    system = build_system_prompt(agent.resolve_system_prompt(state), mode)
    request = LLMRequest(
        agent_name=agent.name,
        model=agent.llm.model,
        messages=build_messages_for_llm(history, system, state),
        tools=offered_tools(agent, mode),
        temperature=agent.llm.temperature,
        max_tokens=agent.llm.max_tokens,
        strict_output=agent.llm.strict_output,
        provider_options=dict(agent.llm.provider_options),
    )
    deltas = DeltaWriter(rt, session_id, run_id, agent_name, step)
    try:
        result = await rt.adapter_for(agent).generate_step(request, on_text_delta=deltas)
        await deltas.flush()
    except LLMProviderError as exc:
        if exc.retryable:
            raise  # DBOS retries the step with backoff
        result = ErrorStepResult(error=str(exc))
    except Exception as exc:  # a broken adapter fails the run, not the process
        result = ErrorStepResult(error=f"LLM call failed: {type(exc).__name__}: {exc}")
    await write_chunks(
        rt, session_id, run_id, agent_name, step, _reply_chunks(agent, run_id, step, result)
    )
    return {"result": result.model_dump(mode="json"), "state": state}


def _reply_chunks(agent: Agent, run_id: str, step: int, result: Any) -> list[tuple[str, str, Any]]:
    """Chunks to write as soon as the model replied: thinking, and the start of every
    tool call that waits (for a human, a client, or in workflow code)."""
    chunks: list[tuple[str, str, Any]] = [
        (f"{run_id}:{step}:thinking:{i}", "thinking", {"text": block.text})
        for i, block in enumerate(getattr(result, "thinking", []) or [])
        if not block.redacted
    ]
    for call in getattr(result, "tool_calls", []) or []:
        if call.name != FINISH_TOOL_NAME and not runs_at_once(agent, call):
            chunks.append(tool_start_chunk(run_id, step, call))
    return chunks


def runs_at_once(agent: Agent, call: ToolCall) -> bool:
    """A call that runs in its own tool step without waiting for anyone.

    Its `tool_start` chunk is written with the step's rows, just before its
    `tool_end`, or live by the tool step once the tool takes longer than
    `LIVE_TOOL_START_SECONDS`: a fast tool costs no write of its own, a slow one is
    still seen starting.
    """
    tool = agent.tool(call.name)
    return tool is None or not (tool.waits_for_answer or tool.runs_in_workflow)


LIVE_TOOL_START_SECONDS = 0.1


def tool_start_chunk(run_id: str, step: int, call: ToolCall) -> tuple[str, str, Any]:
    return (
        f"{run_id}:{step}:{call.id}:start",
        "tool_start",
        {"tool_call_id": call.id, "tool_name": call.name, "arguments": call.arguments},
    )


def run_terminating(agent: Agent, options: dict[str, Any] | None) -> TerminatingConfig | None:
    """The run's terminating config (a run option wins over the agent's)."""
    if options and options.get("terminating"):
        return TerminatingConfig.from_dict(options["terminating"])
    return agent.terminating


def is_retryable_llm_error(exc: BaseException) -> bool:
    """Provider rate limits and 5xx, and a lost database connection or exhausted pool."""
    if isinstance(exc, LLMProviderError):
        return exc.retryable
    return is_transient_db_error(exc)


async def tool_step(
    session_id: str,
    run_id: str,
    agent_name: str,
    step: int,
    call: dict[str, Any],
    state: dict[str, Any],
) -> dict[str, Any]:
    """Run one tool call with its hooks: before_tool, execute, on_state_change, on_message, after_tool."""
    rt = current_runtime()
    agent = rt.agent(agent_name)
    tool_call = ToolCall.model_validate(call)
    hook_ctx = HookContext(session_id=session_id, run_id=run_id, agent_name=agent_name, step=step)
    ctx = ToolContext(
        session_id=session_id,
        run_id=run_id,
        agent_name=agent_name,
        tool_call_id=tool_call.id,
        tool_name=tool_call.name,
        step=step,
        state=state,
        state_schema=agent.state_schema,
    )
    hooks = agent.hooks
    started = time.perf_counter()
    await _safe_fire(hooks.before_tool, ToolEvent(hook_ctx, tool_call))
    execution = asyncio.ensure_future(_execute(agent, tool_call, ctx))
    try:
        done, _ = await asyncio.wait({execution}, timeout=LIVE_TOOL_START_SECONDS)
        if not done:  # a slow tool: show it started
            await _write_tool_start(rt, session_id, run_id, agent_name, step, tool_call)
        success, result, error = await execution
    except BaseException:
        execution.cancel()
        raise
    finish_output, transform_error = None, None
    tool = agent.tool(tool_call.name)
    if success and tool is not None and tool.finish_with:
        finish_output, transform_error = _transform(tool, result)
    duration_ms = (time.perf_counter() - started) * 1000
    new_state = ctx.state_dict
    changed = new_state != state
    if changed:
        await _safe_fire(
            hooks.on_state_change, StateChangeEvent(hook_ctx, state, new_state, tool_call.name)
        )
    message = create_tool_result_message(
        tool_call.id, tool_call.name, result=result, success=success, error=error
    )
    await _safe_fire(hooks.on_message, MessageEvent(hook_ctx, message))
    await _safe_fire(
        hooks.after_tool,
        ToolEvent(
            hook_ctx,
            tool_call,
            success=success,
            result=result,
            error=error,
            duration_ms=duration_ms,
        ),
    )
    return {
        "success": success,
        "content": message.content,
        "result": result,
        "error": error,
        "state": new_state if changed else None,
        "events": to_jsonable_python(ctx.events, fallback=str),
        "duration_ms": duration_ms,
        "finish_output": finish_output,
        "transform_error": transform_error,
    }


async def _write_tool_start(
    rt: Any, session_id: str, run_id: str, agent_name: str, step: int, call: ToolCall
) -> None:
    """Best effort: a failed write must not fail the tool, and the step's rows repeat it."""
    try:
        await write_chunks(
            rt, session_id, run_id, agent_name, step, [tool_start_chunk(run_id, step, call)]
        )
    except Exception as exc:
        logger.warning("helix could not write the tool_start chunk of %s: %s", call.id, exc)


async def _execute(agent: Agent, call: ToolCall, ctx: ToolContext) -> tuple[bool, Any, str | None]:
    tool = agent.tool(call.name)
    if tool is None:
        available = ", ".join(t.name for t in agent.tools) or "none"
        return False, None, f"Unknown tool '{call.name}'. Available tools: {available}"
    try:
        arguments = tool.validate_arguments(call.arguments)
        value = await tool.call(arguments, ctx)
        return True, to_jsonable_python(value, fallback=str), None
    except ToolArgumentsError as exc:
        return False, None, str(exc)
    except Exception as exc:
        return False, None, f"Tool '{call.name}' failed: {exc}"


def _transform(tool: Any, result: Any) -> tuple[Any, str | None]:
    if tool.finish_with_transform is None:
        return result, None
    try:
        return to_jsonable_python(tool.finish_with_transform(result), fallback=str), None
    except Exception as exc:
        return None, f"finish_with_transform of '{tool.name}' failed: {exc}"


async def _safe_fire(hook: Any, event: Any) -> None:
    """Hooks observe; a failing hook is logged and never breaks the run."""
    try:
        await fire(hook, event)
    except Exception:
        logger.exception("helix hook %s raised", getattr(hook, "__name__", hook))
