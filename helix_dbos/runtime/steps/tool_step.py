"""One tool call, with its hooks in canonical order
(before_tool -> execute -> on_state_change -> on_message -> after_tool).

A server tool runs in its own DBOS step, so a completed call is never run again
after a crash: DBOS replays its checkpointed `ToolOutcome`. A workflow-level tool
(`runs_in_workflow`) runs in workflow code, where it may start child workflows,
and its hooks fire in a step of their own.
"""

from __future__ import annotations

import asyncio
import time
from contextvars import ContextVar
from typing import Any

from dbos import DBOS, StepOptions
from pydantic_core import to_jsonable_python

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.hooks import (
    HookContext,
    MessageEvent,
    StateChangeEvent,
    ToolEvent,
    fire_safely,
)
from helix_dbos.definitions.tool import Tool
from helix_dbos.definitions.tool_context import ToolContext
from helix_dbos.errors import ContentPartError, ToolArgumentsError, ToolOutputError
from helix_dbos.orchestration.completion import finish_with_validation_message
from helix_dbos.orchestration.messages import create_tool_result_message
from helix_dbos.orchestration.parts import split_tool_value
from helix_dbos.orchestration.planning import describe_validation_error
from helix_dbos.orchestration.types import ToolCall
from helix_dbos.runtime.process.outage import DatabaseUnavailable
from helix_dbos.runtime.process.process_runtime import Runtime, current_runtime, logger
from helix_dbos.runtime.steps import spans
from helix_dbos.runtime.steps.content_parts import Reference, check_user_parts, store_parts
from helix_dbos.runtime.steps.live_chunks import (
    LIVE_TOOL_START_SECONDS,
    tool_start_chunk,
    write_chunks,
)
from helix_dbos.runtime.steps.step_types import ToolOutcome
from helix_dbos.store import repository as repo
from helix_dbos.streaming.notifier import run_end_key

# Set by a workflow that holds back other work until its tools run (`hitl.with_resume`):
# each tool step's body sets it once the tool itself is under way.
TOOL_STARTED: ContextVar[asyncio.Event | None] = ContextVar("helix_tool_started", default=None)


def tool_step_options(call: ToolCall) -> StepOptions:
    return {"name": f"helix.tool:{call.name}"}


def tool_context(
    agent: Agent,
    session_id: str,
    run_id: str,
    step: int,
    call: ToolCall,
    state: dict[str, Any],
    cancel: asyncio.Event | None = None,
) -> ToolContext:
    return ToolContext(
        cancel_event=cancel,
        session_id=session_id,
        run_id=run_id,
        agent_name=agent.name,
        tool_call_id=call.id,
        tool_name=call.name,
        step=step,
        state=state,
        state_schema=agent.state_schema,
    )


async def tool_step(
    session_id: str,
    run_id: str,
    agent_name: str,
    step: int,
    call: ToolCall,
    state: dict[str, Any],
) -> ToolOutcome:
    """Run one tool call with its hooks (the body of a `helix.tool:<name>` step)."""
    rt = current_runtime()
    await rt.lease_check()  # a worker that may have lost its lease runs no tool
    agent = rt.agent(agent_name)
    cancel = asyncio.Event()  # set when the run is aborted: `ctx.cancelled` turns true
    ctx = tool_context(agent, session_id, run_id, step, call, state, cancel)
    # The hooks share the tool's state: their changes are part of this step's outcome.
    hook_ctx = HookContext(session_id, run_id, agent_name, step, state=ctx)
    started, started_ns = time.perf_counter(), spans.now_ns()
    await fire_safely(agent.hooks.before_tool, ToolEvent(hook_ctx, call))
    execution = asyncio.ensure_future(_execute(agent, call, ctx))
    if (tool_started := TOOL_STARTED.get()) is not None:
        tool_started.set()
    abort = AbortWatch(rt, run_id, execution, cancel)
    try:
        done, _ = await asyncio.wait({execution}, timeout=LIVE_TOOL_START_SECONDS)
        if not done:  # a slow tool: show it started, and stop it if the run is aborted
            await _write_tool_start(rt, session_id, run_id, agent_name, step, call)
            abort.start()
        result, error, parts = await execution
    except asyncio.CancelledError:
        if not abort.aborted:
            raise
        result, error, parts = None, "Run aborted", []
    except BaseException:
        execution.cancel()
        raise
    finally:
        abort.stop()
    finish_output, transform_error, invalid_output = None, None, False
    tool = agent.tool(call.name)
    if error is None and tool is not None and tool.finish_with:
        finish_output, transform_error = _transform(tool, result)
        if transform_error is None:
            finish_output, error = _check_finish_output(agent, tool, finish_output)
            invalid_output = error is not None
    duration_ms = (time.perf_counter() - started) * 1000
    new_state = ctx.state_dict
    if new_state != state:
        await fire_safely(
            agent.hooks.on_state_change, StateChangeEvent(hook_ctx, state, new_state, call.name)
        )
    await _fire_result_hooks(agent, hook_ctx, call, result, error, duration_ms)
    new_state = ctx.state_dict  # after the hooks, which may have changed it too
    _trace_tool(hook_ctx, call, started_ns, spans.now_ns(), result, error)
    return ToolOutcome.executed(
        result=result,
        error=error,
        state=new_state if new_state != state else None,
        events=to_jsonable_python(ctx.events, fallback=str),
        duration_ms=duration_ms,
        finish_output=finish_output,
        transform_error=transform_error,
        invalid_output=invalid_output,
        attachments=parts,
    )


class AbortWatch:
    """Stops a slow tool when its run is aborted (by any process): `ctx.cancelled` turns
    true for a sync tool, an async tool's task gets `CancelledError`. It sleeps on the
    run-end notification, so it costs a query only when the run ends."""

    def __init__(
        self,
        rt: Runtime,
        run_id: str,
        execution: asyncio.Future[Any],
        cancel: asyncio.Event,
    ) -> None:
        self._rt, self._run_id, self._execution, self._cancel = rt, run_id, execution, cancel
        self._task: asyncio.Task[None] | None = None
        self.aborted = False

    def start(self) -> None:
        if self._rt.notifier is not None:
            self._task = asyncio.get_running_loop().create_task(self._watch())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _watch(self) -> None:
        assert self._rt.notifier is not None
        notifier = await self._rt.notifier()
        key = run_end_key(self._run_id)
        while not self._execution.done():
            seen = notifier.version(key)
            try:
                run = await self._rt.read(repo.get_run, self._run_id)
            except (Exception, DatabaseUnavailable):  # the tool goes on; look again later
                run = None
            if run is not None and run.status == "aborted":
                self.aborted = True
                self._cancel.set()
                self._execution.cancel()
                return
            await notifier.wait(key, seen, ABORT_POLL_SECONDS)


# How often a slow tool re-checks its run when no notification came (a lost listener).
ABORT_POLL_SECONDS = 5.0


async def run_workflow_tool(
    agent: Agent, session_id: str, run_id: str, step: int, call: ToolCall, state: dict[str, Any]
) -> ToolOutcome:
    """Run a workflow-level tool in workflow code (it may start child workflows)."""
    ctx = tool_context(agent, session_id, run_id, step, call, state)
    started = time.perf_counter()
    result, error, parts = await _execute(agent, call, ctx)
    duration_ms = (time.perf_counter() - started) * 1000
    outcome = ToolOutcome.executed(
        result=result,
        error=error,
        attachments=parts,
        state=ctx.state_dict if ctx.state_dict != state else None,
        events=to_jsonable_python(ctx.events, fallback=str),
        duration_ms=duration_ms,
    )
    await DBOS.run_step_async(
        {"name": f"helix.tool_hooks:{call.name}"},
        outside_result_hooks,
        session_id,
        run_id,
        agent.name,
        step,
        call,
        outcome,
    )
    return outcome


async def outside_result_hooks(
    session_id: str, run_id: str, agent_name: str, step: int, call: ToolCall, outcome: ToolOutcome
) -> None:
    """on_message and after_tool, once, for a call whose result came from outside a
    tool step (a client, a human, or workflow code)."""
    agent = current_runtime().agent(agent_name)
    hook_ctx = HookContext(session_id, run_id, agent_name, step)
    end_ns = spans.now_ns()
    start_ns = end_ns - int((outcome.duration_ms or 0) * 1_000_000)
    _trace_tool(hook_ctx, call, start_ns, end_ns, outcome.content, outcome.error)
    await _fire_result_hooks(
        agent, hook_ctx, call, outcome.content, outcome.error, outcome.duration_ms
    )


def _trace_tool(
    hook_ctx: HookContext,
    call: ToolCall,
    start_ns: int,
    end_ns: int,
    result: Any,
    error: str | None,
) -> None:
    """An `execute_tool` span for the call, if a tracer is installed."""
    if spans.tracing():
        spans.emit(
            spans.ToolRecord(
                session_id=hook_ctx.session_id,
                run_id=hook_ctx.run_id,
                agent_name=hook_ctx.agent_name,
                step=hook_ctx.step,
                call=call,
                start_ns=start_ns,
                end_ns=end_ns,
                result=result,
                error=error,
            )
        )


async def _fire_result_hooks(
    agent: Agent,
    hook_ctx: HookContext,
    call: ToolCall,
    result: Any,
    error: str | None,
    duration_ms: float | None,
) -> None:
    message = create_tool_result_message(
        call.id, call.name, result=result, success=error is None, error=error
    )
    await fire_safely(agent.hooks.on_message, MessageEvent(hook_ctx, message))
    await fire_safely(
        agent.hooks.after_tool,
        ToolEvent(
            hook_ctx,
            call,
            success=error is None,
            result=result,
            error=error,
            duration_ms=duration_ms,
        ),
    )


async def _write_tool_start(
    rt: Runtime, session_id: str, run_id: str, agent_name: str, step: int, call: ToolCall
) -> None:
    """Best effort: a failed write must not fail the tool, and the step's rows repeat it."""
    try:
        await write_chunks(
            rt,
            session_id,
            run_id,
            agent_name,
            step,
            [tool_start_chunk(run_id, step, call)],
            wait=False,  # the step's rows carry it too: no wait for the database here
        )
    except Exception as exc:
        logger.warning("helix could not write the tool_start chunk of %s: %s", call.id, exc)


async def _execute(
    agent: Agent, call: ToolCall, ctx: ToolContext
) -> tuple[Any, str | None, list[Reference]]:
    """The tool's JSON-ready result, or why it failed (an error the model can act on), and
    the content parts it returned, stored (docs/content-parts.md)."""
    tool = agent.tool(call.name)
    if tool is None:
        available = ", ".join(t.name for t in agent.tools) or "none"
        return None, f"Unknown tool '{call.name}'. Available tools: {available}", []
    try:
        arguments = tool.validate_arguments(call.arguments)
        value = tool.validate_output(await tool.call(arguments, ctx))
        value, parts = split_tool_value(value)
        refs: list[Reference] = []
        if parts:
            check_user_parts(agent.llm.model, parts, what=f"the result of '{call.name}'")
            refs = await store_parts(current_runtime(), parts)
        return to_jsonable_python(value, fallback=str), None, refs
    except (ToolArgumentsError, ToolOutputError, ContentPartError) as exc:
        return None, str(exc), []
    except Exception as exc:
        return None, f"Tool '{call.name}' failed: {exc}", []


def _check_finish_output(agent: Agent, tool: Tool, output: Any) -> tuple[Any, str | None]:
    """A finish_with tool's output validated against the agent's output_schema (seed 000:
    never passed through unchecked); the error goes back to the model."""
    if agent.output_schema is None:
        return output, None
    try:
        return agent.validate_output(output), None
    except Exception as exc:
        details = describe_validation_error(exc)
        return None, finish_with_validation_message(tool.name, details)


def _transform(tool: Tool, result: Any) -> tuple[Any, str | None]:
    if tool.finish_with_transform is None:
        return result, None
    try:
        return to_jsonable_python(tool.finish_with_transform(result), fallback=str), None
    except Exception as exc:
        return None, f"finish_with_transform of '{tool.name}' failed: {exc}"
