"""The agent loop: one DBOS workflow, `helix.agent_run`, runs every agent.

One agent step, top to bottom in `AgentLoop.run`:
1. the previous step's rows start writing (a `WriteAhead`, overlapping DBOS's
   own bookkeeping for the next step);
2. the LLM step waits for that write, reads the transcript and asks the model;
   its checkpoint is only the parsed reply (`ModelReply`);
3. the reply is planned (pure orchestration, seed 001);
4. the tools run, each call in its own DBOS step (`ToolBatch`);
5. the step's rows are either left for the next step's write-ahead, or, when
   the run ends, written with its final status by the `helix.commit_final` step.
Every row is derived from checkpointed outputs, so a replay rebuilds the same
rows, and every write is keyed, so none lands twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from dbos import DBOS, StepOptions

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.hooks import Hook, HookContext, RunEvent, fire_safely
from helix_dbos.log_events import LLM_FAILED, OUTPUT_VALIDATION_FAILED, RUN_ENDED, log_event
from helix_dbos.orchestration.completion import (
    MAX_NUDGES_ERROR,
    MAX_STEPS_ERROR,
    completion_nudge,
    max_tokens_correction,
)
from helix_dbos.orchestration.messages import (
    create_tool_result_message,
    synthesize_finish_tool_result,
)
from helix_dbos.orchestration.planning import (
    StepProcessingPlan,
    calls_to_run,
)
from helix_dbos.orchestration.terminating import (
    MAX_INVOCATIONS_ERROR,
    response_text,
)
from helix_dbos.orchestration.types import (
    FINISH_TOOL_NAME,
    Message,
    ToolCall,
)
from helix_dbos.runtime import spans
from helix_dbos.runtime.commit import (
    StepCommit,
    WriteAhead,
    announce_run_end,
    commit_final,
    write_head,
)
from helix_dbos.runtime.companions import companion_notices, stop_with_parent
from helix_dbos.runtime.context import Runtime, current_runtime, is_transient_db_error, logger
from helix_dbos.runtime.hitl import INTERRUPT_TOPIC
from helix_dbos.runtime.live_chunks import LIVE_TOOL_START_SECONDS, runs_at_once
from helix_dbos.runtime.llm_hooks import announce
from helix_dbos.runtime.llm_step import (
    describe_llm_failure,
    failed_llm_usage,
    llm_step,
    llm_step_options,
    llm_usage_record,
    run_terminating,
)
from helix_dbos.runtime.reply_plan import PlannedReply, plan_reply
from helix_dbos.runtime.results import TERMINAL_STATUSES, AgentResult, run_result
from helix_dbos.runtime.run_trace import emit_run_span
from helix_dbos.runtime.step_types import (
    ChunkRecord,
    FinalStatus,
    InterruptRequested,
    ModelReply,
    RunEnded,
    RunNotOpened,
    RunOptions,
)
from helix_dbos.runtime.tool_batch import ToolBatch
from helix_dbos.store import run_bounds
from helix_dbos.store.repository import UsageRecord
from helix_dbos.store.run_bounds import EndedRun

WORKFLOW_NAME = "helix.agent_run"
FINAL_WRITE_ATTEMPTS = 6
FINAL_STEP_OPTIONS: StepOptions = {
    "name": "helix.commit_final",
    "retries_allowed": True,
    "max_attempts": FINAL_WRITE_ATTEMPTS,
    "interval_seconds": 0.5,
    "backoff_rate": 2.0,
    "should_retry": is_transient_db_error,
}


class AgentLoop:
    """One run of one agent, as workflow code: deterministic, with every effect in a step."""

    def __init__(
        self, rt: Runtime, run_id: str, session_id: str, agent: Agent, options: RunOptions
    ) -> None:
        self.rt = rt
        self.run_id = run_id
        self.session_id = session_id
        self.agent = agent
        self.options = options
        self.terminating = run_terminating(agent, options)
        self.mode = agent.completion_for(self.terminating)
        self.max_steps = self.terminating.max_invocations if self.terminating else agent.max_steps
        self.steps_taken = 0
        self.nudges = 0
        self.output_retries = 0
        self.max_tokens_fixes = 0
        self.stop_reason: str | None = None  # "stop_when" when the custom condition ended it
        self._unwritten: StepCommit | None = None  # the last step's rows, not yet written
        self._ahead: WriteAhead | None = None  # the latest write-ahead, which later ones follow
        self._early: dict[int, StepCommit] = {}  # steps the LLM step took (`_take_early`)
        self._planned: dict[int, PlannedReply] = {}  # and the plans of steps with tools
        self._final_write: tuple[StepCommit, asyncio.Future[EndedRun]] | None = None
        self.hears_companions = any(p.mode == "non_blocking" for p in agent.persistent_agents)

    async def run(self) -> AgentResult:
        step = 0
        while True:
            self.steps_taken, step = step, step + 1
            if step > self.max_steps:
                return await self.end_without_step(step - 1, "failed", self._step_cap_error())
            # 1. The previous step's rows start writing while DBOS checks the LLM step.
            previous = self._write_ahead()
            if self.hears_companions:  # after those rows: a non-blocking child's news
                await self._companion_notices(previous)
            # 2. The LLM step: it waits for that write, reads the transcript, asks the model.
            try:
                reply = await DBOS.run_step_async(
                    llm_step_options(self.agent.llm),
                    llm_step,
                    self.session_id,
                    self.agent.name,
                    self.run_id,
                    step,
                    self.options,
                    previous,
                    self._take_early(step),
                )
            except Exception as exc:
                error = f"LLM call failed after retries: {describe_llm_failure(exc)}"
                log_event(  # workflow code: a recovery that replays this logs it again
                    LLM_FAILED,
                    logging.ERROR,
                    error,
                    run_id=self.run_id,
                    session_id=self.session_id,
                    agent_name=self.agent.name,
                    step=step,
                    model=self.agent.llm.model,
                    error=error,
                )
                usage = failed_llm_usage(self.run_id, step, exc)
                return await self.end_without_step(step, "failed", error, usage=usage)
            if isinstance(reply, InterruptRequested):
                return await self._interrupted(step - 1)
            if isinstance(reply, RunNotOpened):
                return self.not_opened()
            if isinstance(reply, RunEnded):  # its row holds its outcome: nothing more to do
                return await self._ended_result(step - 1)
            # 3.-4. Plan the reply and run its tools: the step's rows, in memory.
            commit = await self._take_step(step, reply)
            self._check_stop_when(reply, commit)
            # 5. Rows: left for the next step's write-ahead, or written with the end.
            if commit.status is None:
                self._unwritten = commit
                continue
            return await self._end(commit)

    # --- one step -------------------------------------------------------------------------

    async def _take_step(self, step: int, reply: ModelReply) -> StepCommit:
        """Plan the model's reply (seed 001) and run its tools; returns what the step writes.
        A step the LLM step already took (`_take_early`) is not taken again."""
        early = self._early.pop(step, None)
        if early is not None:
            return early
        planned = self._planned.pop(step, None)  # planned in the LLM step: a step with tools
        if planned is None:  # a replay: the LLM step's output came from its checkpoint
            planned = plan_reply(self.agent, self.terminating, self.mode, reply.result)
        commit = self._plan(step, reply, planned)
        calls = calls_to_run(planned.plan)  # seed 001's subAgentCalls too: none unanswered
        if calls:
            await self._run_tools(calls, reply.state, commit, planned.terminating_call)
        self._apply_nudges(planned.plan, commit)
        return commit

    def _take_early(self, step: int) -> Callable[[ModelReply], None]:
        """What the LLM step does with its reply before DBOS checkpoints it: a step with
        no tool to run is taken at once (the same code as `_take_step`, which then
        returns it), and if it ends the run, its final write starts now, so it runs
        while DBOS records the LLM step instead of after.

        A step with tools is only planned here (`_take_step` reuses the plan). The write
        is keyed and guarded like every final write. If the process dies after it and
        before the checkpoint, the recovered LLM step finds the run ended and asks the
        model nothing (`RunEnded`): the run's result is its row, so the caller, the row
        and the workflow all hold the first reply's outcome.
        """

        def take(reply: ModelReply) -> None:
            counters = (self.output_retries, self.nudges, self.max_tokens_fixes)
            try:
                planned = plan_reply(self.agent, self.terminating, self.mode, reply.result)
                if calls_to_run(planned.plan):
                    self._planned[step] = planned
                    return  # tools run in workflow code, after the checkpoint
                commit = self._plan(step, reply, planned)
                self._apply_nudges(planned.plan, commit)
                ends = commit.status is not None and self._ends_alone(commit)
            except Exception:  # a bug: not the model's fault, so not the LLM step's
                self.output_retries, self.nudges, self.max_tokens_fixes = counters
                return  # the workflow takes the step itself, and meets the error there
            self._early[step] = commit
            if ends:
                write = asyncio.ensure_future(_write_final(commit, None, True))
                self._final_write = (commit, write)

        return take

    def _ends_alone(self, commit: StepCommit) -> bool:
        """The run's end needs nothing but its final write (no hook, no span, no step
        left unwritten): the notify decision of `_end`, for a run that can end early."""
        assert commit.status is not None
        hears = bool(commit.unannounced) and self.agent.hooks.on_message is not None
        quiet = self._end_hook(commit.status) is None and not spans.tracing()
        return quiet and not hears and self._unwritten is None

    def _plan(self, step: int, reply: ModelReply, planned: PlannedReply) -> StepCommit:
        """The step's rows from its plan, before any tool runs."""
        result, plan = planned.result, planned.plan
        commit = StepCommit(self.session_id, self.run_id, self.agent.name, step)
        if reply.state_changed:  # the LLM step's hooks changed it
            commit.state = reply.state
        commit.usage.append(llm_usage_record(self.run_id, step, result, self.agent.llm.provider))
        assistant = planned.assistant_message  # its on_message fired in the LLM step
        if assistant is not None:
            commit.messages.append(assistant)
            commit.head_messages = len(commit.messages)
        if plan.is_terminal and plan.status_update is not None:
            update = plan.status_update
            commit.end(update.status, output=update.output, error=update.error)
        self._apply_finish(plan, commit)
        if plan.output_error is not None:  # native/prompted: the reply is not the output
            commit.say(Message(role="user", content=plan.output_error))
            self._invalid_output("the reply", plan.output_error, commit)
        return commit

    async def _run_tools(
        self,
        calls: list[ToolCall],
        state: dict[str, Any],
        commit: StepCommit,
        terminating_call: ToolCall | None,
    ) -> None:
        batch = ToolBatch(self.rt, self.agent, commit, agent_run_workflow)
        head = asyncio.get_running_loop().create_task(_write_head_if_slow(self.rt, commit))
        try:
            done = await batch.run(
                calls,
                state,
                in_order=terminating_call is not None,
                run_failed=commit.status == "failed",
            )
        finally:
            head.cancel()
            await asyncio.gather(head, return_exceptions=True)
        if done.ending is not None:
            commit.end(done.ending.status, output=done.ending.output, error=done.ending.error)
            if done.ending.status == "interrupted":  # a wait for a human was interrupted
                payload = {"reason": done.ending.reason}
                commit.events.append(
                    ChunkRecord(f"{self.run_id}:interrupted", "run_interrupted", payload)
                )
        for call in calls:
            outcome = done.outcomes[call.id]
            commit.add_tool_outcome(call, outcome, start_chunk=runs_at_once(self.agent, call))
            if outcome.invalid_output:  # a finish_with output that fails output_schema
                self._invalid_output(call.name, outcome.error or "", commit)
        if done.state != state:
            commit.state = done.state
            patch = _state_patch(state, done.state)
            commit.events.append(
                ChunkRecord(f"{self.run_id}:{commit.step}:state", "state_patch", patch)
            )
        if terminating_call is not None and commit.status is None:
            ended = done.outcomes.get(terminating_call.id)
            if ended is not None and ended.success:
                commit.end("completed", output=ended.result)

    def _apply_finish(self, plan: StepProcessingPlan, commit: StepCommit) -> None:
        """`__finish__` is never executed: a valid call is acknowledged, an invalid one
        goes back to the model with the validation error (bounded retries, seed 000)."""
        if not plan.finish_call_ids:
            return
        if plan.finish_error is None:
            commit.say(synthesize_finish_tool_result(plan.finish_call_ids[0]))
            return
        for call_id in plan.finish_call_ids:
            commit.say(
                create_tool_result_message(
                    call_id, FINISH_TOOL_NAME, success=False, error=plan.finish_error
                )
            )
        self._invalid_output(FINISH_TOOL_NAME, plan.finish_error, commit)

    def _invalid_output(self, source: str, error: str, commit: StepCommit) -> None:
        """Output that does not match output_schema (from `source`: a completion tool, or
        the reply itself): a loud warning, and the run fails after `max_output_retries`
        more tries unless the step completed another way."""
        self.output_retries += 1
        log_event(
            OUTPUT_VALIDATION_FAILED,
            logging.WARNING,
            f"agent '{self.agent.name}' (run {self.run_id}): invalid output from {source} "
            f"(attempt {self.output_retries} of {self.agent.max_output_retries + 1}): {error}",
            run_id=self.run_id,
            session_id=self.session_id,
            agent_name=self.agent.name,
            step=commit.step,
            source=source,
            attempt=self.output_retries,
            max_attempts=self.agent.max_output_retries + 1,
            error=error,
        )
        if self.output_retries > self.agent.max_output_retries and commit.status is None:
            commit.end(
                "failed", error=f"Output validation failed {self.output_retries} times: {error}"
            )

    def _apply_nudges(self, plan: StepProcessingPlan, commit: StepCommit) -> None:
        """A text reply when a completion tool is required gets a nudge (seeds 000, 004);
        a reply cut off at max_tokens gets one correction."""
        limit, custom = self.agent.max_consecutive_nudges, self.agent.nudge_message
        if self.terminating is not None:
            limit, custom = self.terminating.consecutive_nudges, self.terminating.nudge_message
        if plan.needs_completion_nudge:
            self.nudges += 1
            if self.nudges > limit:
                commit.end("failed", error=MAX_NUDGES_ERROR)
            else:
                nudge = completion_nudge(self.mode, custom)
                commit.say(Message(role="user", content=nudge))
        elif plan.pending_tool_calls or plan.finish_call_ids:
            self.nudges = 0
        if plan.needs_max_tokens_correction:
            self.max_tokens_fixes += 1
            if self.max_tokens_fixes > 1:
                commit.end(
                    "failed",
                    error="The model stopped at the maximum output length (max_tokens) again after a correction",
                )
            else:
                correction = max_tokens_correction(self.agent.max_tokens_correction, self.mode)
                commit.say(Message(role="user", content=correction))

    def _check_stop_when(self, reply: ModelReply, commit: StepCommit) -> None:
        """Seed 001's stopWhen: after a step that did not end the run, the agent's
        `stop_when(step_result, state)` (the state after the step's tools) may end it,
        completed; the stop reason goes into the result and a `run_stopped` chunk. It runs
        in workflow code, so it must be deterministic; if it raises, the run fails."""
        stop_when = self.agent.stop_when
        if stop_when is None or commit.status is not None:
            return
        state = commit.state if commit.state is not None else reply.state
        try:
            stop = bool(stop_when(reply.result, self.agent.state_view(state)))
        except Exception as exc:
            commit.end("failed", error=f"stop_when raised {type(exc).__name__}: {exc}")
            return
        if not stop:
            return
        self.stop_reason = commit.stop_reason = "stop_when"
        # No output is made up: the reply's text, unless an output schema wants more.
        text = getattr(reply.result, "content", None)
        output = text if self.agent.output_schema is None and isinstance(text, str) else None
        commit.end("completed", output=output)
        payload = {"reason": self.stop_reason, "step": commit.step}
        commit.events.append(ChunkRecord(f"{self.run_id}:stopped", "run_stopped", payload))

    def _step_cap_error(self) -> str:
        if self.terminating:
            return MAX_INVOCATIONS_ERROR
        return MAX_STEPS_ERROR.format(max_steps=self.max_steps)

    async def _companion_notices(self, previous: WriteAhead | None) -> None:
        """Non-blocking persistent children that ended since the last model call are
        announced in the transcript, after the previous step's rows (seed 002: the
        parent "gets completion notification later")."""
        if previous is not None:
            await previous.result()
        added = await self.rt.transaction(
            "helix.companion_notices", companion_notices, self.session_id, self.run_id
        )
        if added:
            self.rt.history.forget(self.session_id)  # the LLM step reads them

    # --- writing rows ---------------------------------------------------------------------

    def _write_ahead(self) -> WriteAhead | None:
        """Start writing the last step's rows; the LLM step that follows waits for them."""
        if self._unwritten is None:
            return None
        self._ahead = WriteAhead(self._unwritten, DBOS.workflow_id, self._ahead)
        self._unwritten = None
        return self._ahead

    async def _end(self, commit: StepCommit) -> AgentResult:
        """The run's last write (any step still unwritten, this one, the final status),
        then the completion or failure hook."""
        if self._ahead is not None and await self._ahead.settled():
            # The last write-ahead failed for good (the LLM step that waited for it failed
            # too): its rows, a step's tool results among them, go with the final write.
            if self._unwritten is None:
                self._unwritten = self._ahead.commit
            else:
                await self._ahead.result()
        said = (self._unwritten.unannounced if self._unwritten else []) + commit.unannounced
        assert commit.status is not None
        hears = bool(said) and self.agent.hooks.on_message is not None
        # With nothing left to do after the last write, its commit wakes the callers.
        notify = self._end_hook(commit.status) is None and not hears and not spans.tracing()
        early, self._final_write = self._final_write, None
        if early is not None and early[0] is not commit:  # the LLM step's checkpoint failed
            await asyncio.wait({early[1]})  # it may have ended the run: this write then finds so
            early = None
        if early is not None:
            wrote = await _settled_final_write(early[1], commit)
        elif hears:
            # User hooks run in a step, as everywhere else (decided from checkpointed
            # data only, so a replay takes the same steps).
            wrote = await DBOS.run_step_async(
                FINAL_STEP_OPTIONS, final_step, commit, self._unwritten, notify
            )
        else:
            wrote = await _write_final(commit, self._unwritten, notify)
        self._unwritten = None
        await self._fire_end_hook(commit.step, commit.status, commit.output, commit.error)
        if not notify:
            await announce_run_end(self.run_id)  # after the hook and the span
        if not wrote.ended:  # ended before (an abort, a replay): the row holds its outcome
            return await self._row_result(commit, wrote.usage)
        return self._result(commit, wrote.usage)

    async def _row_result(self, commit: StepCommit, usage: dict[str, int]) -> AgentResult:
        """The run's result from its row, for a final write that found the run ended."""
        outcome = await self.rt.read(run_bounds.run_outcome, self.run_id)
        if outcome is None or outcome.run.status not in TERMINAL_STATUSES:
            return self._result(commit, usage)
        return run_result(outcome)

    async def _ended_result(self, step: int) -> AgentResult:
        """The result of a run whose LLM step found it ended: its row's."""
        logger.warning("Agent run %s had ended before its step %d", self.run_id, step + 1)
        commit = StepCommit(self.session_id, self.run_id, self.agent.name, step)
        commit.end("failed", error="The run had ended")  # used only if the row is not final
        return await self._row_result(commit, {})

    async def end_without_step(
        self, step: int, status: FinalStatus, error: str, *, usage: UsageRecord | None = None
    ) -> AgentResult:
        """End the run where no step of its own was taken (step cap, LLM failure, a bug);
        `usage` is a failed LLM call's row."""
        commit = StepCommit(self.session_id, self.run_id, self.agent.name, step)
        if usage is not None:
            commit.usage.append(usage)
        commit.end(status, error=error)
        return await self._end(commit)

    def not_opened(self) -> AgentResult:
        """The result of a workflow whose run was never opened: its starter died or failed
        between starting it and committing the run's rows (see `RunNotOpened`). Nothing
        is written and no hook fires: for the database, the run never existed."""
        error = "The run was never opened: its start failed before its rows were written"
        logger.warning("Agent run %s: %s", self.run_id, error)
        return AgentResult(
            status="failed", error=error, session_id=self.session_id, run_id=self.run_id
        )

    async def _interrupted(self, step: int) -> AgentResult:
        message = await DBOS.recv_async(INTERRUPT_TOPIC, timeout_seconds=0)
        reason = message.get("reason") if isinstance(message, dict) else None
        commit = StepCommit(self.session_id, self.run_id, self.agent.name, step)
        commit.end("interrupted", error=f"Interrupted: {reason}" if reason else "Interrupted")
        commit.events.append(
            ChunkRecord(f"{self.run_id}:interrupted", "run_interrupted", {"reason": reason})
        )
        return await self._end(commit)

    def _end_hook(self, status: FinalStatus) -> Hook | None:
        """The hook a run ending with `status` fires: on completion or on failure."""
        hooks = self.agent.hooks
        return hooks.on_agent_complete if status == "completed" else hooks.on_agent_failed

    async def _fire_end_hook(
        self, step: int, status: FinalStatus, output: Any, error: str | None
    ) -> None:
        hook = self._end_hook(status)
        if hook is not None:
            context = HookContext(self.session_id, self.run_id, self.agent.name, step)
            event = RunEvent(context, status, output, error)
            await DBOS.run_step_async({"name": f"helix.hook:{status}"}, fire_safely, hook, event)

    def _result(self, commit: StepCommit, usage: dict[str, int]) -> AgentResult:
        assert commit.status is not None
        response = None
        if self.terminating is not None and commit.status == "completed":
            response = response_text(commit.output)
        result = AgentResult(
            status=commit.status,
            output=commit.output,
            error=commit.error,
            session_id=self.session_id,
            run_id=self.run_id,
            step_count=commit.step,
            usage=usage,
            response=response,
            stop_reason=self.stop_reason,
        )
        result.terminating = self.terminating is not None
        return result


async def _write_head_if_slow(rt: Runtime, commit: StepCommit) -> None:
    """Once a step's tools have run for `LIVE_TOOL_START_SECONDS`, write its head (the
    model's message, its LLM usage), so a slow or aborted step still shows what the model
    asked for. Live and keyed, like a slow tool's `tool_start`: best effort."""
    await asyncio.sleep(LIVE_TOOL_START_SECONDS)
    try:
        async with rt.statements() as conn:
            await write_head(conn, commit, durable=False)
    except Exception as exc:
        logger.warning("helix could not write the head of step %d: %s", commit.step, exc)


async def _settled_final_write(write: asyncio.Future[EndedRun], commit: StepCommit) -> EndedRun:
    """The early final write's outcome; if it failed for good, the write again (keyed)."""
    try:
        return await write
    except Exception as exc:
        logger.warning("helix's early final write of run %s failed: %s", commit.run_id, exc)
        return await _write_final(commit, None, True)


async def _write_final(commit: StepCommit, unwritten: StepCommit | None, notify: bool) -> EndedRun:
    """The run's last write from workflow code, without a DBOS step of its own.

    Like the write-ahead of every other step, it needs no checkpoint: its rows are keyed
    by `runs.committed_step` and its status update only lands on a live run, so a replay
    after a crash (or a retry after a lost connection: `final_step` waits a database
    outage out) writes nothing twice. It commits durably (see `commit_final`). That saves
    a step's two system-database round trips on every run.
    """
    return await final_step(commit, unwritten, notify)


async def final_step(
    commit: StepCommit, unwritten: StepCommit | None, notify: bool = False
) -> EndedRun:
    """The run's last write (`helix.commit_final`), whose writes are keyed or guarded by
    the run's status, so one replayed after a crash changes nothing."""
    rt = current_runtime()
    wrote = await rt.on_connection(
        "the final write", lambda conn: commit_final(conn, commit, unwritten, notify=notify)
    )
    ended = wrote.ended
    if ended:  # on_message for what workflow code said last (once: a replay ends nothing)
        said = (unwritten.unannounced if unwritten is not None else []) + commit.unannounced
        context = HookContext(commit.session_id, commit.run_id, commit.agent_name, commit.step)
        await announce(rt.agent(commit.agent_name), context, said)
        await emit_run_span(rt, commit.run_id)  # the `invoke_agent` span, if traced
    if ended and commit.status is not None:
        log_event(
            RUN_ENDED[commit.status],
            logging.INFO if commit.status == "completed" else logging.WARNING,
            commit.error,
            run_id=commit.run_id,
            session_id=commit.session_id,
            agent_name=commit.agent_name,
            step=commit.step,
            status=commit.status,
            error=commit.error,
        )
    return wrote


_MISSING = object()


def _state_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    return {
        "set": {k: v for k, v in new.items() if old.get(k, _MISSING) != v},
        "removed": [k for k in old if k not in new],
    }


@DBOS.workflow(name=WORKFLOW_NAME)
async def agent_run_workflow(
    run_id: str, session_id: str, agent_name: str, options: RunOptions
) -> AgentResult:
    rt = current_runtime()
    loop = AgentLoop(rt, run_id, session_id, rt.agent(agent_name), options)
    await rt.wait_opened(run_id, session_id)  # started alongside the open of its run
    try:
        result = await loop.run()
    except Exception as exc:  # a bug must not leave the run `running` forever
        logger.exception("Agent run %s failed with an unexpected error", run_id)
        error = f"Internal error: {type(exc).__name__}: {exc}"
        result = await loop.end_without_step(loop.steps_taken, "failed", error)
    await stop_with_parent(rt, loop.agent, session_id, run_id)  # companions that end with it
    return result
