"""The LLM step: write the previous step's rows, read the transcript, ask the model.

Its checkpoint is only the parsed reply and the state (`ModelReply`): history is
read from `helix.messages` through a per-process cache, never carried in a
checkpoint, so a step costs the same at message 10 and message 1,000.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from typing import Any, Protocol

from dbos import DBOS, StepOptions
from dbos import error as dbos_errors

from helix_dbos.definitions.agent import Agent, LLMConfig, TerminatingConfig
from helix_dbos.definitions.handoffs import InputFilter
from helix_dbos.definitions.hooks import HookContext
from helix_dbos.llm.base import LLMProviderError
from helix_dbos.llm.fallback import answer_with_fallbacks, provider_of
from helix_dbos.llm.pricing import llm_cost_usd
from helix_dbos.log_events import LLM_RETRY, RUN_STARTED, TOOL_CALL_REKEYED, log_event
from helix_dbos.orchestration.call_ids import Rekeyed, unique_call_ids
from helix_dbos.orchestration.completion import (
    CompletionMode,
    build_system_prompt,
    prompted_output_section,
)
from helix_dbos.orchestration.history.compaction import ModelInput
from helix_dbos.orchestration.messages import with_system_prompt
from helix_dbos.orchestration.transcript import Transcript
from helix_dbos.orchestration.types import (
    FINISH_TOOL_NAME,
    ErrorStepResult,
    LLMRequest,
    LLMUsage,
    Message,
    OutputFormat,
    StepResult,
    TextStepResult,
    ToolCallsStepResult,
    ToolSpec,
)
from helix_dbos.runtime.loop.history_view import model_input
from helix_dbos.runtime.loop.llm_hooks import (
    LLMStepHooks,
    announce,
    attempt_number,
    is_last_attempt,
)
from helix_dbos.runtime.loop.reply_plan import PlannedReply, plan_reply
from helix_dbos.runtime.loop.usage_check import limit_reached
from helix_dbos.runtime.process import model_limits
from helix_dbos.runtime.process.process_runtime import (
    Runtime,
    current_runtime,
    is_transient_db_error,
)
from helix_dbos.runtime.sessions.steering import Steer, take_steered
from helix_dbos.runtime.steps import spans
from helix_dbos.runtime.steps.commit import WriteAhead
from helix_dbos.runtime.steps.content_parts import resolve_request
from helix_dbos.runtime.steps.live_chunks import (
    DeltaWriter,
    runs_at_once,
    tool_start_chunk,
    write_chunks,
)
from helix_dbos.runtime.steps.step_types import (
    ChunkRecord,
    InterruptRequested,
    LLMStepOutput,
    ModelReply,
    RunEnded,
    RunNotOpened,
    RunOptions,
    SummaryDue,
)
from helix_dbos.store.repository import UsageRecord
from helix_dbos.store.storable import storable_model


class ReplyTaker(Protocol):
    """What the LLM step hands its reply to: the workflow's `StepAhead`."""

    def plan(self, result: StepResult) -> PlannedReply: ...

    def take(self, reply: ModelReply) -> None: ...

    def begin(self) -> None: ...


def is_retryable_llm_error(exc: BaseException) -> bool:
    """Provider rate limits and 5xx. The step's own statements wait a database outage
    out in place (`Runtime.on_connection`), spending none of these attempts; a database
    error that escapes anyway (from a hook, say) is retried rather than failing the run."""
    if isinstance(exc, LLMProviderError):
        return exc.retryable
    return is_transient_db_error(exc)


def llm_step_options(llm: LLMConfig) -> StepOptions:
    return {
        "name": "helix.llm",
        "retries_allowed": True,
        "max_attempts": llm.max_attempts,
        "interval_seconds": llm.retry_interval_seconds,
        "backoff_rate": llm.retry_backoff,
        "should_retry": is_retryable_llm_error,
    }


def describe_llm_failure(exc: Exception) -> str:
    """Why the LLM step failed for good, with the provider's own last message (DBOS's
    retries-exceeded error only names the step)."""
    if isinstance(exc, dbos_errors.DBOSMaxStepRetriesExceeded) and exc.errors:
        return f"{exc}; last error: {exc.errors[-1]}"
    return str(exc)


def llm_usage_record(
    run_id: str, step: int, result: StepResult, provider: str | None = None
) -> UsageRecord:
    """The step's `llm` usage row: what the provider reported (its model, `None` when it
    named none), `success` false for a call that failed, and its price in USD (at the
    prices of the fallback model's provider when one answered)."""
    usage = result.usage or LLMUsage()
    if usage.fallback is not None:
        provider = provider_of(usage.fallback)
    return UsageRecord(
        f"{run_id}:{step}:llm",
        "llm",
        step,
        llm=usage,
        success=not isinstance(result, ErrorStepResult),
        cost_usd=llm_cost_usd(usage, provider),
    )


def failed_llm_usage(run_id: str, step: int, exc: Exception) -> UsageRecord | None:
    """The row of an LLM call whose retries ran out on provider errors (none when the
    last attempt failed on the database: no call may have been made). Retried attempts
    have no rows of their own: this one row stands for the step's call."""
    errors = exc.errors if isinstance(exc, dbos_errors.DBOSMaxStepRetriesExceeded) else [exc]
    if not errors or not isinstance(errors[-1], LLMProviderError):
        return None
    return UsageRecord(f"{run_id}:{step}:llm", "llm", step, llm=LLMUsage(), success=False)


def run_terminating(agent: Agent, options: RunOptions) -> TerminatingConfig | None:
    """The run's terminating config (a run option wins over the agent's)."""
    return options.terminating or agent.terminating


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


def native_output_format(agent: Agent, mode: CompletionMode) -> OutputFormat | None:
    """The schema the reply must match in the native mode (with the prompted mode's
    instructions, for adapters whose model has no structured output)."""
    if not (mode.json_reply and mode.output_mode == "native") or agent.output_schema is None:
        return None
    schema = agent.finish_parameters()
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", agent.output_schema.__name__)[:64] or "output"
    prompt = prompted_output_section(json.dumps(schema, separators=(",", ":")))
    return OutputFormat(name=name, json_schema=schema, prompt=prompt)


async def llm_step(
    session_id: str,
    agent_name: str,
    run_id: str,
    step: int,
    options: RunOptions,
    previous: WriteAhead | None,
    taker: ReplyTaker | None = None,
    summarized: bool = False,
    history_filter: InputFilter | None = None,
) -> LLMStepOutput:
    """Write the previous step's rows (`previous`, started by the workflow while DBOS
    checks this step), read the transcript, ask the model.

    The rows are written first, so the model always sees them, and a step costs no
    durable operation of its own beyond its LLM and tool steps. `taker` plans the reply
    (once) and gets it last, before DBOS checkpoints it (the workflow's `StepAhead`).
    The model sees the transcript as the agent's history policy compacts it; a due
    summary returns `SummaryDue` before the model is asked (`summarized`: this step took
    its summary already, so it drops what still does not fit instead).
    """
    if taker is not None:  # the body runs: not a replay of the step's checkpoint
        taker.begin()
    rt = current_runtime()
    await rt.lease_check()  # a worker that may have lost its lease writes and asks nothing
    agent = rt.agent(agent_name)
    seen = await _transcript(rt, session_id, run_id, previous)
    if isinstance(seen, Steer):  # double texting: taken before this model call
        seen = await take_steered(rt, session_id, run_id, agent_name, step, seen.state)
    if isinstance(seen, RunNotOpened | RunEnded):
        return seen
    unannounced = previous.commit.unannounced if previous is not None else []
    if seen is None:
        await announce(agent, HookContext(session_id, run_id, agent_name, step), unannounced)
        return InterruptRequested()
    # Before any model call, a summary's too (issue 50: usage limits).
    limited = await limit_reached(rt, agent, options, session_id, run_id, step)
    if limited is not None:  # part of this step's checkpoint: a replay decides the same
        await announce(agent, HookContext(session_id, run_id, agent_name, step), unannounced)
        return limited
    terminating = run_terminating(agent, options)
    mode = agent.completion_for(terminating)
    view = await model_input(
        rt,
        agent,
        session_id,
        seen[0],
        lambda: _fixed_text(agent, mode, seen[1]),
        may_summarize=not summarized,
    )
    if view.summary_needed is not None:  # docs/context.md: the workflow summarises first
        await announce(agent, HookContext(session_id, run_id, agent_name, step), unannounced)
        return SummaryDue(view.summary_needed.covers_through)
    if step == 1 and attempt_number() == 1:  # inside the step: again only if it runs again
        log_event(
            RUN_STARTED, run_id=run_id, session_id=session_id, agent_name=agent_name, step=step
        )
    history, state = seen
    hooks = LLMStepHooks(agent, session_id, run_id, step, state)
    await hooks.open(unannounced)
    opened = hooks.state
    if history_filter is not None:  # a handoff's input filter: what the target sees
        view = dataclasses.replace(view, messages=history_filter(list(view.messages)))
    request = _request(agent, mode, view, history, opened)
    await hooks.before_call(request)
    if hooks.state != opened:  # the hook changed the state the request is built from
        request = _request(agent, mode, view, history, hooks.state)
    started, started_ns = time.perf_counter(), spans.now_ns()
    try:
        # Stored parts are resolved only if the transcript has any (a handoff's input
        # filter is the user's code: it is not taken at its word).
        parts = history.holds_parts or history_filter is not None
        generated = await _generate(rt, agent, request, session_id, run_id, step, parts)
    except Exception as exc:  # retryable: DBOS runs the step again
        _trace_call(agent, request, session_id, run_id, step, started_ns, error=str(exc))
        await hooks.after_call(request, _ms_since(started), error=str(exc))
        hooks.done(retrying=True)
        raise
    # A model's text, tool names, ids and arguments may hold what PostgreSQL cannot store.
    result = storable_model(generated)
    # Before anything sees the reply: every call under an id unique in the session, so
    # an answer, a result or a sub-agent is matched to one call only (call_ids.py).
    result, rekeyed = unique_call_ids(result, history.call_ids, f"{run_id}:{step}")
    _log_rekeyed(rekeyed, agent_name, run_id, session_id, step)
    _trace_call(agent, request, session_id, run_id, step, started_ns, result=result)
    await hooks.after_call(request, _ms_since(started), result=result)
    if agent.hooks.on_message is not None:
        planned = (
            taker.plan(result)
            if taker is not None
            else plan_reply(agent, terminating, mode, result)
        )
        await hooks.message(planned.assistant_message)
    hooks.done()
    await write_chunks(
        rt, session_id, run_id, agent_name, step, _reply_chunks(agent, run_id, step, result)
    )
    reply = ModelReply(result=result, state=hooks.state, state_changed=hooks.changed)
    if taker is not None:  # last: nothing after it can fail and run this step again
        taker.take(reply)
    return reply


def _fixed_text(agent: Agent, mode: CompletionMode, state: dict[str, Any]) -> str:
    """What every request carries besides the history: the system prompt and the tools."""
    system = build_system_prompt(agent.resolve_system_prompt(state), mode)
    tools = json.dumps([t.model_dump(mode="json") for t in offered_tools(agent, mode)])
    return system + tools


def _request(
    agent: Agent,
    mode: CompletionMode,
    view: ModelInput,
    history: Transcript,
    state: dict[str, Any],
) -> LLMRequest:
    system = build_system_prompt(agent.resolve_system_prompt(state), mode)
    tools = offered_tools(agent, mode)
    return LLMRequest(
        agent_name=agent.name,
        model=agent.llm.model,
        messages=with_system_prompt(_shown(view, history), view.system(system), state),
        tools=tools,
        temperature=agent.llm.temperature,
        max_tokens=agent.llm.max_tokens,
        strict_output=agent.llm.strict_output,
        provider_options=dict(agent.llm.provider_options),
        output_format=native_output_format(agent, mode),
        # Only a tool call can finish: adapters force one where the provider allows it.
        tool_choice="required" if mode.requires_tool and tools else "auto",
        cache=agent.llm.cache,
    )


def _shown(view: ModelInput, history: Transcript) -> list[Message]:
    """The messages the model is shown, without system ones: the cached transcript's own
    list when the history policy shows all of it (no walk of it in Python), else the
    compacted view's."""
    if view.messages is history.messages:
        return history.for_llm
    return [m for m in view.messages if m.role != "system"]


def _trace_call(
    agent: Agent,
    request: LLMRequest,
    session_id: str,
    run_id: str,
    step: int,
    started_ns: int,
    *,
    result: StepResult | None = None,
    error: str | None = None,
) -> None:
    """A `chat` span for this attempt, if a tracer is installed (naming the fallback
    model and its provider when one answered)."""
    if spans.tracing():
        called = result.usage.fallback if result is not None and result.usage else None
        if called is not None:
            request = request.model_copy(update={"model": called})
        spans.emit(
            spans.ChatRecord(
                session_id=session_id,
                run_id=run_id,
                agent_name=agent.name,
                step=step,
                attempt=attempt_number(),
                provider=provider_of(request.model) if called else agent.llm.provider,
                request=request,
                start_ns=started_ns,
                end_ns=spans.now_ns(),
                result=result,
                error=error,
            )
        )


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


async def _transcript(
    rt: Runtime, session_id: str, run_id: str, previous: WriteAhead | None
) -> tuple[Transcript, dict[str, Any]] | RunNotOpened | RunEnded | Steer | None:
    """The history and state the model is asked with; `None` if an interrupt waits,
    `RunNotOpened` if the run has no row, `RunEnded` if it has a final status, `Steer`
    if a steer message waits to join the transcript first (`runtime/sessions/session_queue.py`).

    After a write-ahead, the rows this process just wrote top up its cached
    transcript without a query.
    """
    if previous is None:
        seeded = rt.history.take_new_run(session_id, run_id)
        if seeded is not None:  # a new session opened by this process: nothing to read
            return seeded
        workflow_id = DBOS.workflow_id
        read, history = await rt.on_connection(  # one statement: no transaction
            "the transcript read",
            lambda conn: rt.history.read_first(conn, workflow_id, session_id, run_id),
        )
        if not read.run_exists:
            return RunNotOpened()
        if read.run_ended:
            return RunEnded()
        if read.interrupted:
            return None
        return Steer(read.state) if read.steer_pending else (history, read.state)
    wrote = await previous.result()
    if wrote.run_ended:
        return RunEnded()
    if wrote.interrupted:
        return None
    if wrote.steer_pending:
        return Steer(wrote.state)
    messages = previous.commit.written_messages(wrote)
    if wrote.first_seq is not None and messages:
        cached = rt.history.take(session_id, (wrote.first_seq, messages))
        if cached is not None:
            return cached[0], wrote.state
    history, _ = await rt.on_connection(
        "the transcript read", lambda conn: rt.history.read(conn, session_id)
    )
    return history, wrote.state


async def _generate(
    rt: Runtime,
    agent: Agent,
    request: LLMRequest,
    session_id: str,
    run_id: str,
    step: int,
    parts: bool,
) -> StepResult:
    """One model call, streaming text deltas live; a non-retryable failure becomes an
    `ErrorStepResult` (the run fails with the provider's message). On the step's last
    attempt, a retryable failure moves on to the agent's fallback models. `parts`: the
    request may hold stored parts, whose bytes the adapter gets instead."""
    deltas = DeltaWriter(rt, session_id, run_id, agent.name, step)
    if parts:
        request = await resolve_request(rt, request)
    try:
        result = await _call(rt, agent, request, deltas)
    except LLMProviderError as exc:
        _log_retry(agent, request, run_id, session_id, step, exc)
        if not (agent.llm.fallback and is_last_attempt()):
            raise  # DBOS retries the step with backoff

        async def call(model: str, asked: LLMRequest) -> StepResult:
            if model_limits.is_limited(model):  # limited after the agent was registered
                raise LLMProviderError(
                    "not called: it has fleet-wide limits, and a fallback takes no slot",
                    retryable=True,
                )
            return await _call(rt, agent.on_model(model), asked, deltas)

        await model_limits.release_for_fallback(agent, step)  # the primary is done with
        result = await answer_with_fallbacks(agent.llm.fallback, request, exc, call)
    await deltas.flush()  # the database's business, not the model's: outside the try
    return result


async def _call(rt: Runtime, agent: Agent, request: LLMRequest, deltas: DeltaWriter) -> StepResult:
    """Ask `agent`'s model; raises only a retryable `LLMProviderError`."""
    try:
        return await rt.adapter_for(agent).generate_step(request, on_text_delta=deltas)
    except LLMProviderError as exc:
        if exc.retryable:
            raise
        return ErrorStepResult(error=str(exc))
    except Exception as exc:  # a broken adapter fails the run, not the process
        return ErrorStepResult(error=f"LLM call failed: {type(exc).__name__}: {exc}")


def _log_retry(
    agent: Agent, request: LLMRequest, run_id: str, session_id: str, step: int, exc: Exception
) -> None:
    """`llm.retry`: this attempt failed retryably; DBOS tries again unless it was the last."""
    status = DBOS.step_status
    attempt = status.current_attempt + 1 if status and status.current_attempt is not None else None
    max_attempts = status.max_attempts if status else None
    log_event(
        LLM_RETRY,
        logging.WARNING,
        f"attempt {attempt} of {max_attempts} of step {step} failed: {exc}",
        run_id=run_id,
        session_id=session_id,
        agent_name=agent.name,
        step=step,
        model=request.model,
        attempt=attempt,
        max_attempts=max_attempts,
        status_code=getattr(exc, "status_code", None),
        error=str(exc),
    )


def _log_rekeyed(
    rekeyed: list[Rekeyed], agent_name: str, run_id: str, session_id: str, step: int
) -> None:
    """`tool_call.rekeyed`, once per call that got a helix id (inside the step): a
    warning when another call had the id, else (a format some servers always use) info."""
    for r in rekeyed:
        shown = r.provider_id if len(r.provider_id) <= 80 else r.provider_id[:80] + "..."
        log_event(
            TOOL_CALL_REKEYED,
            logging.WARNING if r.clash else logging.INFO,
            f"the model's tool-call id {shown!r} {r.reason}: the call is now {r.call_id}",
            run_id=run_id,
            session_id=session_id,
            agent_name=agent_name,
            step=step,
            tool_call_id=r.call_id,
            provider_id=shown,
            reason=r.reason,
        )


def _reply_chunks(agent: Agent, run_id: str, step: int, result: StepResult) -> list[ChunkRecord]:
    """Chunks to write as soon as the model replied: thinking, and the start of every
    tool call that waits (for a human, a client, or in workflow code)."""
    thinking = result.thinking if isinstance(result, TextStepResult | ToolCallsStepResult) else []
    chunks = [
        ChunkRecord(f"{run_id}:{step}:thinking:{i}", "thinking", {"text": block.text})
        for i, block in enumerate(thinking)
        if not block.redacted
    ]
    if isinstance(result, ToolCallsStepResult):
        chunks += [
            tool_start_chunk(run_id, step, call)
            for call in result.tool_calls
            if call.name != FINISH_TOOL_NAME and not runs_at_once(agent, call)
        ]
    return chunks
