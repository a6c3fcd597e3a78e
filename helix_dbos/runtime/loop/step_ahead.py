"""One agent step's reply, planned once, and taken inside the LLM step when it runs no
tool, so that a run's final write starts while DBOS checkpoints its last LLM step."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from helix_dbos.definitions.agent import Agent, TerminatingConfig
from helix_dbos.orchestration.completion import CompletionMode
from helix_dbos.orchestration.next_step import (
    Counters,
    Limits,
    StepDecision,
    ToolsDone,
    decide_next_step,
)
from helix_dbos.orchestration.planning import calls_to_run
from helix_dbos.orchestration.types import StepResult
from helix_dbos.runtime.loop.final_write import ends_quietly, write_final
from helix_dbos.runtime.loop.reply_plan import PlannedReply, plan_reply
from helix_dbos.runtime.loop.step_rows import conclude, reply_rows, stop_check
from helix_dbos.runtime.steps.commit import StepCommit
from helix_dbos.runtime.steps.step_types import ModelReply
from helix_dbos.store.run_bounds import EndedRun


@dataclass(frozen=True)
class TakenStep:
    """A step taken: its rows, with its end if any, and the policy's decision (whose
    counters the loop adopts with the step)."""

    commit: StepCommit
    decision: StepDecision


def finish_step(
    agent: Agent,
    commit: StepCommit,
    reply: ModelReply,
    planned: PlannedReply,
    counters: Counters,
    limits: Limits,
    tools: ToolsDone | None,
) -> TakenStep:
    """The step policy's decision on a step whose rows are built, applied to them."""
    stop = stop_check(agent, reply, commit)
    decision = decide_next_step(planned.plan, counters, limits, tools, stop)
    conclude(commit, decision)
    return TakenStep(commit, decision)


class StepAhead:
    """The LLM step's share of one agent step, made before DBOS checkpoints its reply.

    The LLM step plans the reply once (`plan`; the model message's on_message fires
    there) and, as its last act, hands the reply to `take`. A step with no tool to run
    is then taken here, with the same code the workflow runs (`reply_rows`,
    `finish_step`), from the loop's counters before the step; when it ends the run with
    nothing to run after its write, the run's final write starts now, alongside the
    checkpoint, instead of after it (`final_write`).

    Invariant: the workflow uses what this object holds only for the very reply the LLM
    step returned to it (`planned`, `taken`), so each reply is planned once and each
    step taken once, from the reply DBOS checkpointed; taking a step changes nothing
    outside this object (the counters after it are a value in its decision, adopted by
    the workflow with the step) except the final write it may start, which is keyed and
    guarded like every final write. If the process dies after that write and before the
    checkpoint, the recovered LLM step finds the run ended and asks the model nothing
    (`RunEnded`): the caller, the row and the workflow all hold the first reply's outcome.
    """

    def __init__(
        self,
        agent: Agent,
        session_id: str,
        run_id: str,
        step: int,
        terminating: TerminatingConfig | None,
        mode: CompletionMode,
        limits: Limits,
        counters: Counters,
    ) -> None:
        self.agent = agent
        self.session_id = session_id
        self.run_id = run_id
        self.step = step
        self.terminating = terminating
        self.mode = mode
        self.limits = limits
        self.counters = counters
        self._plan: tuple[StepResult, PlannedReply] | None = None
        self._reply: ModelReply | None = None
        self._taken: TakenStep | None = None
        # Whether the LLM step's body ran in this execution (False: DBOS replayed its
        # checkpoint): what workflow code logs about the step is logged only then.
        self.ran = False
        self.final_write: asyncio.Future[EndedRun] | None = None  # of `_taken`'s commit
        # False while parallel input guardrails decide whether the reply counts (issue 50).
        self.writes_early = True

    def plan(self, result: StepResult) -> PlannedReply:
        """The reply's plan, made once per reply (a retried LLM step has a new reply)."""
        if self._plan is None or self._plan[0] is not result:
            self._plan = (result, plan_reply(self.agent, self.terminating, self.mode, result))
        return self._plan[1]

    def take(self, reply: ModelReply) -> None:
        """Take the step if it runs no tool (tools run in workflow code, after the
        checkpoint), and start its final write if that is all its end needs."""
        self._reply, self._taken = reply, None
        try:
            planned = self.plan(reply.result)
            if calls_to_run(planned.plan):
                return
            commit = reply_rows(self.session_id, self.run_id, self.agent, self.step, reply, planned)
            taken = finish_step(
                self.agent, commit, reply, planned, self.counters, self.limits, None
            )
        except Exception:  # a bug: not the model's fault, so not the LLM step's
            return  # the workflow takes the step itself, and meets the error there
        self._taken = taken
        status = commit.status
        if status == "completed" and self.agent.output_guardrails:
            return  # its output is checked first, in a step of its own (issue 50)
        if not self.writes_early:
            return
        if status is not None and ends_quietly(self.agent, status, commit.unannounced):
            self.final_write = asyncio.ensure_future(write_final(commit, None, True))

    def begin(self) -> None:
        """The LLM step's body started (every attempt calls it)."""
        self.ran = True

    def replied_here(self, reply: ModelReply) -> bool:
        """Whether the LLM step made this reply in this execution (not a replay)."""
        return reply is self._reply

    def planned(self, reply: ModelReply) -> PlannedReply | None:
        """The plan of this reply, if the LLM step made it (not on a replay)."""
        return self._plan[1] if self._plan is not None and self._plan[0] is reply.result else None

    def taken(self, reply: ModelReply) -> TakenStep | None:
        """The step, if the LLM step took it from this very reply."""
        return self._taken if reply is self._reply else None

    def wrote_early(self, commit: StepCommit) -> bool:
        """Whether this commit's final write started early."""
        return (
            self.final_write is not None
            and self._taken is not None
            and (self._taken.commit is commit)
        )
