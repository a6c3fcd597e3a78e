"""The agent loop: one DBOS workflow, `helix.agent_run`, runs every agent.

One agent step, top to bottom in `AgentLoop.run`:
1. the previous step's rows start writing (a `WriteAhead`, overlapping DBOS's
   own bookkeeping for the next step);
2. the LLM step waits for that write, reads the transcript and asks the model;
   its checkpoint is only the parsed reply (`ModelReply`);
3. the reply is planned once, in the LLM step, which takes a step with no tool
   to run at once (`StepAhead`);
4. the tools run, each call in its own DBOS step (`ToolBatch`);
5. the step policy decides what comes next (`orchestration/next_step.py`): the
   step's rows are either left for the next step's write-ahead, or, when the
   run ends, written with its final status by the final write (`final_write.py`).
Every row is derived from checkpointed outputs, so a replay rebuilds the same
rows, and every write is keyed, so none lands twice.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from dbos import DBOS

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.handoffs import InputFilter
from helix_dbos.definitions.hooks import HookContext, RunEvent, fire_safely
from helix_dbos.definitions.request_tools import with_client_tools
from helix_dbos.log_events import LLM_FAILED, log_event
from helix_dbos.orchestration.guardrails import GuardrailCheck, runs_in_parallel
from helix_dbos.orchestration.next_step import (
    Complete,
    Continue,
    Counters,
    Ending,
    Fail,
    Interrupted,
    StepDecision,
    ToolsDone,
    reply_decision,
)
from helix_dbos.orchestration.planning import calls_to_run
from helix_dbos.orchestration.terminating import response_text
from helix_dbos.orchestration.types import ToolCall
from helix_dbos.runtime.children.companions import companion_notices, stop_with_parent
from helix_dbos.runtime.dbos.dbos_internals import checkpoints_dropped, checks_in_autocommit
from helix_dbos.runtime.loop.final_write import (
    end_hook,
    ends_quietly,
    final_write_step,
    settled_final_write,
    write_final,
)
from helix_dbos.runtime.loop.guardrail_steps import (
    first_tripped,
    guardrail_ending,
    guardrail_message,
    parallel_tripped,
    start_parallel,
    tool_tripped,
    tripped_tools,
)
from helix_dbos.runtime.loop.handoff_switch import (
    HandoffCalls,
    record_handoff,
    split_calls,
    starting_agent,
)
from helix_dbos.runtime.loop.llm_step import (
    describe_llm_failure,
    failed_llm_usage,
    llm_step,
    llm_step_options,
    llm_usage_record,
    run_terminating,
)
from helix_dbos.runtime.loop.reply_plan import PlannedReply, plan_reply, step_limits
from helix_dbos.runtime.loop.shared_values import shared
from helix_dbos.runtime.loop.slow_head import SlowHead
from helix_dbos.runtime.loop.step_ahead import StepAhead, TakenStep, finish_step
from helix_dbos.runtime.loop.step_rows import conclude, log_invalid_outputs, reply_rows, tool_rows
from helix_dbos.runtime.loop.summary_step import summary_step, summary_step_options
from helix_dbos.runtime.loop.tool_batch import ToolBatch
from helix_dbos.runtime.loop.usage_check import limits_for_children, usage_limit_ending
from helix_dbos.runtime.process import model_limits
from helix_dbos.runtime.process.patches import AGENT_RUN, NONE_APPLIED, AppliedPatches
from helix_dbos.runtime.process.process_runtime import Runtime, current_runtime, logger
from helix_dbos.runtime.steps.commit import (
    StepCommit,
    WriteAhead,
    announce_run_end,
)
from helix_dbos.runtime.steps.results import TERMINAL_STATUSES, AgentResult, run_result
from helix_dbos.runtime.steps.step_types import (
    ChunkRecord,
    FinalStatus,
    InterruptRequested,
    ModelReply,
    RunEnded,
    RunNotOpened,
    RunOptions,
    SummaryDue,
    UsageLimitReached,
)
from helix_dbos.runtime.waits.hitl import INTERRUPT_TOPIC, interrupted_message
from helix_dbos.store import run_bounds
from helix_dbos.store.features.handoff_rows import HandoffRow
from helix_dbos.store.repository import UsageRecord

WORKFLOW_NAME = "helix.agent_run"


class AgentLoop:
    """One run of one agent, as workflow code: deterministic, with every effect in a step.

    What happens after each step is the step policy's decision (`decide_next_step`):
    the loop asks it once per step and matches on it."""

    def __init__(
        self,
        rt: Runtime,
        run_id: str,
        session_id: str,
        agent: Agent,
        options: RunOptions,
        patches: AppliedPatches = NONE_APPLIED,
    ) -> None:
        self.rt = rt
        self.patches = patches  # which step-sequence changes this run's history takes
        self.run_id = run_id
        self.session_id = session_id
        self.options = options
        self._use_agent(agent)
        self._handoff: HandoffCalls | None = None  # the step's handoff calls, if any
        self._history_filter: InputFilter | None = None  # a handoff's, for the target
        self.counters = Counters()  # after the steps taken, adopted with each step
        self.steps_taken = 0  # before the current step (an internal error ends the run there)
        self._unwritten: StepCommit | None = None  # the last step's rows, not yet written
        self._last_write: WriteAhead | None = None  # the latest write-ahead; later ones follow it
        self._step_ahead: StepAhead | None = None  # the latest LLM step's share of its step
        self._summarized_at = 0  # the step whose summary was taken (one per step at most)
        self._guards_due = False  # input guardrails to start alongside the first model call
        self._guards: list[asyncio.Future[GuardrailCheck]] | None = None  # those started

    def _use_agent(self, agent: Agent) -> None:
        """The agent the next steps take: the run's, or a handoff's target."""
        self.agent = agent
        self.terminating = run_terminating(agent, self.options)
        self.mode = shared(agent.completion_for(self.terminating))
        self.limits = shared(step_limits(agent, self.terminating, self.mode))
        self.hears_companions = any(p.mode == "non_blocking" for p in agent.persistent_agents)

    async def run(self) -> AgentResult:
        # An agent with handoffs goes on with the session's current agent (handoff_switch.py).
        self._use_agent(await starting_agent(self.rt, self.agent, self.session_id))
        if self.agent.input_guardrails:  # before the first model call (issue 50)
            tripped = await first_tripped(self.agent, "input", self.run_id)
            if tripped is not None:  # its rows are the run's first step's
                commit = StepCommit(self.session_id, self.run_id, self.agent.name, 1)
                return await self._tripped(commit, tripped)
            self._guards_due = any(runs_in_parallel(g) for g in self.agent.input_guardrails)
        return await self._steps()

    async def _steps(self) -> AgentResult:
        while True:
            self.steps_taken = self.counters.steps
            step = self.steps_taken + 1
            # 1. The previous step's rows start writing while DBOS checks the LLM step.
            previous = self._write_ahead()
            if self.hears_companions:  # after those rows: a non-blocking child's news
                await self._companion_notices(previous)
            # 2. The LLM step: it waits for that write, reads the transcript, asks the model,
            # and plans the reply (taking the step at once if it runs no tool).
            self._step_ahead = ahead = StepAhead(
                self.agent,
                self.session_id,
                self.run_id,
                step,
                self.terminating,
                self.mode,
                self.limits,
                self.counters,
            )
            self._start_guards(ahead)  # the first step's parallel input guardrails
            # A model with fleet-wide limits: a call slot first (runtime/process/model_limits.py).
            slot = await self._take_slot(step) if self.agent.llm.limited else None
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
                    ahead,
                    self._summarized_at == step,
                    self._history_filter,
                )
            except Exception as exc:
                if slot is not None:
                    await model_limits.free_slot(slot, step)
                guarded = await self._guarded(step, exc)  # a tripwire first (issue 50)
                return guarded or await self._llm_failed(step, exc, logged=not ahead.ran)
            if slot is not None:
                await model_limits.free_slot(slot, step)
            if (guarded := await self._guarded(step, reply)) is not None:
                return guarded  # the reply is acted on only after them (issue 50)
            if isinstance(reply, InterruptRequested):
                return await self._interrupted(step - 1)
            if isinstance(reply, RunNotOpened):
                return self.not_opened()
            if isinstance(reply, RunEnded):  # its row holds its outcome: nothing more to do
                return await self._ended_result(step - 1)
            if isinstance(reply, SummaryDue):  # only agents that summarise (docs/context.md)
                await self._summarize(step, reply)
                continue  # the same step's LLM step again, on top of the summary
            if isinstance(reply, UsageLimitReached):  # the model was not asked
                return await self.end_without_step(step - 1, usage_limit_ending(reply))
            # 3.-4. Plan the reply, run its tools, decide what comes next: the step's rows.
            taken = ahead.taken(reply) or await self._take_step(step, reply, ahead.planned(reply))
            self.counters = taken.decision.counters
            if ahead.replied_here(reply):  # a replay of the step logged them already
                log_invalid_outputs(taken.commit, self.agent, taken.decision)
            # 5. Rows: left for the next step's write-ahead, or written with the end.
            match taken.decision.next:
                case Continue():
                    self._unwritten = taken.commit
                    await self._hand_off(step)
                case Complete() | Fail() | Interrupted():
                    return await self._end_checked(taken.commit)

    async def _end_checked(self, commit: StepCommit) -> AgentResult:
        """The run's end, after its output guardrails if it completes (issue 50)."""
        if commit.status == "completed" and self.agent.output_guardrails:
            tripped = await first_tripped(self.agent, "output", self.run_id, commit.output)
            if tripped is not None:
                return await self._tripped(commit, tripped)
        return await self._end(commit)

    def _start_guards(self, ahead: StepAhead) -> None:
        """Parallel input guardrails (issue 50), once, before the first LLM step: their
        steps are reserved first, and that step writes nothing before they pass."""
        if self._guards_due:
            self._guards_due = False
            self._guards = start_parallel(self.agent, self.run_id)
            ahead.writes_early = False

    async def _guarded(self, step: int, reply: object) -> AgentResult | None:
        """After the first LLM step, once its parallel input guardrails all ended: the
        run's end if one tripped. The model's reply is then discarded (no tool runs, no
        message is written) but its call is counted. An end someone else decided (an
        interrupt, an abort) stays theirs."""
        started, self._guards = self._guards, None
        tripped = await parallel_tripped(started) if started else None
        if tripped is None or isinstance(reply, (InterruptRequested, RunNotOpened, RunEnded)):
            return None
        commit = StepCommit(self.session_id, self.run_id, self.agent.name, step)
        if isinstance(reply, ModelReply):
            provider = self.agent.llm.provider
            commit.usage.append(llm_usage_record(self.run_id, step, reply.result, provider))
        return await self._tripped(commit, tripped)

    async def _tripped(self, commit: StepCommit, check: GuardrailCheck) -> AgentResult:
        """A guardrail's tripwire ends the run: failed, said in the transcript."""
        conclude(commit, StepDecision(guardrail_ending(check), self.counters))
        commit.say(guardrail_message(check))
        return await self._end(commit)

    async def _summarize(self, step: int, due: SummaryDue) -> None:
        """The `helix.summary` step; a summary that fails for good is logged and the
        step's input drops what does not fit instead (the LLM step is told so)."""
        self._summarized_at = step
        try:
            await DBOS.run_step_async(
                summary_step_options(self.agent.llm),
                summary_step,
                self.session_id,
                self.agent.name,
                self.run_id,
                step,
                due.covers_through,
            )
        except Exception as exc:  # replayed alike: DBOS records the step's error
            logger.warning(
                "Agent run %s: the summary before step %d failed, older turns are dropped "
                "instead: %s",
                self.run_id,
                step,
                describe_llm_failure(exc),
            )

    async def _take_slot(self, step: int) -> str:
        return await model_limits.take_slot(
            self.agent, self.session_id, self.run_id, step, self.options.tenant
        )

    # --- one step -------------------------------------------------------------------------

    async def _take_step(
        self, step: int, reply: ModelReply, planned: PlannedReply | None
    ) -> TakenStep:
        """Plan the model's reply (seed 001; on a replay, where the LLM step did not run),
        run its tools, and decide what comes next."""
        if planned is None:
            planned = plan_reply(self.agent, self.terminating, self.mode, reply.result)
        commit = reply_rows(self.session_id, self.run_id, self.agent, step, reply, planned)
        calls = calls_to_run(planned.plan)  # seed 001's subAgentCalls too: none unanswered
        self._handoff = split_calls(self.agent, calls)
        tools: ToolsDone | None = None
        if calls:
            # A reply whose invalid output used up the retries fails the run before its
            # finish_with tools run.
            failed = reply_decision(planned.plan, self.counters, self.limits).next
            tools = await self._run_tools(
                calls, reply.state, commit, planned.terminating_call, isinstance(failed, Fail)
            )
        return finish_step(self.agent, commit, reply, planned, self.counters, self.limits, tools)

    async def _run_tools(
        self,
        calls: list[ToolCall],
        state: dict[str, Any],
        commit: StepCommit,
        terminating_call: ToolCall | None,
        run_failed: bool,
    ) -> ToolsDone:
        if self.agent.guards_tools:  # before any call runs or waits (issue 50)
            tripped = await tool_tripped(self.agent, calls)
            if tripped is not None:
                return tripped_tools(commit, self.agent, calls, state, tripped)
        batch = ToolBatch(
            self.rt,
            self.agent,
            commit,
            agent_run_workflow,
            self.options.tenant,
            limits_for_children(self.agent, self.options, self.run_id),
        )
        head = SlowHead(self.rt, commit)
        handoff = self._handoff  # its calls are answered in workflow code, not run
        try:
            done = await batch.run(
                calls if handoff is None else handoff.others,
                state,
                in_order=terminating_call is not None,
                run_failed=run_failed,
            )
        finally:
            await head.stop()
        if handoff is not None:
            done.outcomes.update(handoff.outcomes)
        return tool_rows(commit, self.agent, calls, done, state, terminating_call)

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

    async def _hand_off(self, step: int) -> None:
        """The step's handoff, if it took one: its row, then the target's steps."""
        handoff, self._handoff = self._handoff, None
        if handoff is None or handoff.taken is None or handoff.call_id is None:
            return
        target = handoff.taken
        row = HandoffRow(
            self.session_id, self.run_id, step, handoff.call_id, self.agent.name, target.target
        )
        await record_handoff(self.rt, row)
        self._history_filter = target.handoff.input_filter
        self._use_agent(self.rt.agent(target.target))

    # --- writing rows ---------------------------------------------------------------------

    def _write_ahead(self) -> WriteAhead | None:
        """Start writing the last step's rows; the LLM step that follows waits for them."""
        if self._unwritten is None:
            return None
        self._last_write = WriteAhead(self._unwritten, DBOS.workflow_id, self._last_write)
        self._unwritten = None
        return self._last_write

    async def _end(self, commit: StepCommit) -> AgentResult:
        """The run's last write (any step still unwritten, this one, the final status),
        then the completion or failure hook. The last LLM step may have started that
        write already (`StepAhead`)."""
        if self._last_write is not None and await self._last_write.settled():
            # The last write-ahead failed for good (the LLM step that waited for it failed
            # too): its rows, a step's tool results among them, go with the final write.
            if self._unwritten is None:
                self._unwritten = self._last_write.commit
            else:
                await self._last_write.result()
        said = (self._unwritten.unannounced if self._unwritten else []) + commit.unannounced
        assert commit.status is not None
        # With nothing left to do after the last write, its commit wakes the callers.
        notify = ends_quietly(self.agent, commit.status, said)
        ahead, self._step_ahead = self._step_ahead, None
        early = ahead.final_write if ahead is not None else None
        if ahead is not None and early is not None and not ahead.wrote_early(commit):
            # Not this step's commit: the LLM step's checkpoint failed, or a bug followed.
            await asyncio.wait({early})  # it may have ended the run: this write then finds so
            early = None
        if early is not None:
            wrote = await settled_final_write(early, commit)
        elif said and self.agent.hooks.on_message is not None:
            # User hooks run in a step, as everywhere else.
            wrote = await final_write_step(commit, self._unwritten, notify)
        else:
            wrote = await write_final(commit, self._unwritten, notify)
        if wrote.checkpoints_dropped:  # DBOS has none to delete when the workflow returns
            checkpoints_dropped(self.rt.datasource)
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
        # The outcome is used only if the row is not final.
        commit = self._ended_without_step(step, Fail("The run had ended"))
        return await self._row_result(commit, {})

    async def _llm_failed(self, step: int, exc: Exception, *, logged: bool) -> AgentResult:
        """The LLM step failed for good (its retries ran out, or its checkpoint failed).
        `logged`: DBOS replayed the step's recorded error, so the execution that ran the
        step logged `llm.failed` already (workflow code runs again on every recovery)."""
        error = f"LLM call failed after retries: {describe_llm_failure(exc)}"
        if not logged:
            log_event(
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
        return await self.end_without_step(step, Fail(error), usage=usage)

    async def end_without_step(
        self, step: int, ending: Ending, *, usage: UsageRecord | None = None
    ) -> AgentResult:
        """End the run where no step of its own was taken (LLM failure, an interrupt, a
        bug); `usage` is a failed LLM call's row."""
        commit = self._ended_without_step(step, ending)
        if usage is not None:
            commit.usage.append(usage)
        return await self._end(commit)

    def _ended_without_step(self, step: int, ending: Ending) -> StepCommit:
        commit = StepCommit(self.session_id, self.run_id, self.agent.name, step)
        conclude(commit, StepDecision(ending, self.counters))
        return commit

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
        commit = self._ended_without_step(step, Interrupted(interrupted_message(reason), reason))
        commit.events.append(
            ChunkRecord(f"{self.run_id}:interrupted", "run_interrupted", {"reason": reason})
        )
        return await self._end(commit)

    async def _fire_end_hook(
        self, step: int, status: FinalStatus, output: Any, error: str | None
    ) -> None:
        hook = end_hook(self.agent, status)
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
            stop_reason=commit.stop_reason,
        )
        result.terminating = self.terminating is not None
        return result


@DBOS.workflow(name=WORKFLOW_NAME)
async def agent_run_workflow(
    run_id: str, session_id: str, agent_name: str, options: RunOptions
) -> AgentResult:
    checks_in_autocommit()  # records nothing: no step changes
    patches = await AGENT_RUN.applied()  # first: at the run's first checkpoint position
    rt = current_runtime()
    agent = with_client_tools(rt.agent(agent_name), options.client_tools)
    if options.client_tools:  # its steps look the agent up by name: they find this one
        rt.run_agents[DBOS.workflow_id or ""] = agent
    loop = AgentLoop(rt, run_id, session_id, agent, options, patches)
    await rt.wait_opened(run_id, session_id)  # started alongside the open of its run
    try:
        result = await loop.run()
    except Exception as exc:  # a bug must not leave the run `running` forever
        logger.exception("Agent run %s failed with an unexpected error", run_id)
        error = f"Internal error: {type(exc).__name__}: {exc}"
        result = await loop.end_without_step(loop.steps_taken, Fail(error))
    finally:
        rt.run_agents.pop(DBOS.workflow_id or "", None)
    await stop_with_parent(rt, loop.agent, session_id, run_id)  # companions that end with it
    if rt.after_run is not None:  # the session's next stored message starts its run
        await rt.after_run(session_id)
    return result
