"""The tool calls of one agent step, scheduled by kind.

Plain calls run concurrently, each in its own DBOS step at a step id reserved
in call order (so a replay finds the same ids), and sub-agent calls beside them,
each a child workflow (seed 002: "In the JS runtime, sub-agents execute alongside
regular tools in phase 1", so they run even when a finish_with tool in the same
response succeeds, and completion waits for them); workflow-level tools run next,
one by one, in workflow code; gated calls run after their human answers; then
finish_with tools run one by one, seeing the state, and the first that succeeds
completes the run. A terminating call in the batch (seed 004) makes every call
run one by one, in call order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dbos import DBOS

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.remote_subagent import RemoteSubAgentTool
from helix_dbos.orchestration.types import ToolCall
from helix_dbos.orchestration.usage_limits import AncestorLimits
from helix_dbos.runtime.children.companions import CompanionCalls
from helix_dbos.runtime.children.remote_children import run_remote_children
from helix_dbos.runtime.children.subagents import (
    ChildRun,
    SubAgentDispatch,
    child_result,
    child_step_options,
)
from helix_dbos.runtime.process.process_runtime import Runtime
from helix_dbos.runtime.steps.commit import StepCommit
from helix_dbos.runtime.steps.step_types import FinalStatus, GateDecision, GateKind, ToolOutcome
from helix_dbos.runtime.steps.tool_step import (
    outside_result_hooks,
    run_workflow_tool,
    tool_step,
    tool_step_options,
)
from helix_dbos.runtime.steps.workflow_start import AgentWorkflow
from helix_dbos.runtime.waits.hitl import (
    HumanWait,
    InterruptNotice,
    answer_outcome,
    evaluate_gates,
    interrupted_message,
    needs_gate_step,
    with_resume,
)
from helix_dbos.store.repository import DuplicateToolCallIdError, PendingToolCall


@dataclass(frozen=True)
class Ending:
    """The batch ended the run: a finish_with tool completed it (or failed in its
    transform), or an interrupt ended a wait for a human."""

    status: FinalStatus
    output: Any = None
    error: str | None = None
    reason: str | None = None  # an interrupt's reason


@dataclass
class BatchResult:
    outcomes: dict[str, ToolOutcome] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    ending: Ending | None = None


class ToolBatch:
    """Runs one step's tool calls; `outcomes` holds each call's `ToolOutcome`."""

    def __init__(
        self,
        rt: Runtime,
        agent: Agent,
        commit: StepCommit,
        workflow: AgentWorkflow,
        tenant: str | None = None,
        ancestor_limits: tuple[AncestorLimits, ...] = (),
    ) -> None:
        self.rt = rt
        self.agent = agent
        self.commit = commit  # the step whose calls these are (a wait writes its head)
        self.session_id = commit.session_id
        self.run_id = commit.run_id
        self.step = commit.step
        self.outcomes: dict[str, ToolOutcome] = {}
        self.interrupt: InterruptNotice | None = None  # a wait for a human was interrupted
        self.tenant = tenant  # the run's, which every run it starts inherits
        # The limits every run it starts checks too (this run's own, and its ancestors').
        self.children = SubAgentDispatch(rt, agent, commit, workflow, tenant, ancestor_limits)
        self.companions = CompanionCalls(rt, agent, commit, workflow, tenant, ancestor_limits)

    async def run(
        self, calls: list[ToolCall], state: dict[str, Any], *, in_order: bool, run_failed: bool
    ) -> BatchResult:
        ids = [c.id for c in calls]
        if len(set(ids)) != len(ids):  # the LLM step makes them unique (call_ids.py)
            duplicate = next(i for i in ids if ids.count(i) > 1)
            raise DuplicateToolCallIdError(self.run_id, duplicate)  # fail closed
        finishers = [c for c in calls if self._is_finisher(c)]
        regular = [c for c in calls if not self._is_finisher(c)]
        gates = await self._gates(regular, state)
        if in_order:
            state = await self._one_by_one(regular, gates, state)
        else:
            state = await self._concurrently(regular, gates, state)
        ending, state = await self._finishers(finishers, state, run_failed=run_failed)
        if self.interrupt is not None:
            reason = self.interrupt.reason
            ending = Ending("interrupted", error=interrupted_message(reason), reason=reason)
        return BatchResult(self.outcomes, state, ending)

    # --- scheduling modes -------------------------------------------------------------

    async def _concurrently(
        self, calls: list[ToolCall], gates: GateDecision, state: dict[str, Any]
    ) -> dict[str, Any]:
        """Plain calls at once; workflow-level calls next, one by one; then gated calls,
        once every human answer is in."""
        subs = [c for c in calls if self.children.is_sub_agent(c)]
        plain = [
            c
            for c in calls
            if c.id not in gates
            and not self._in_workflow(c)
            and not self.children.is_sub_agent(c)
            and not self.companions.is_companion(c)
        ]
        started = await self.children.dispatch(subs, self.outcomes)
        self.interrupt = self.interrupt or self.children.interrupt
        state = await self._parallel(plain, state, started)
        await self.children.settle(started)
        remote = [c for c in calls if self._is_remote(c)]  # remote children (issue 32), at once
        self.outcomes.update(
            await run_remote_children(self.agent, self.commit, remote, self.tenant)
        )
        for call in calls:
            if self._in_workflow(call) and not self._is_remote(call):
                state = await self._in_workflow_code(call, state)
        for call in calls:  # seed 002: "Companion tools have their own phase"
            if self.companions.is_companion(call):
                self.outcomes[call.id] = (
                    self._interrupted()  # no new child turn for an interrupted parent
                    if self.interrupt is not None
                    else await self.companions.run(call)
                )
        gated = [c for c in calls if c.id in gates]
        if gated and self.interrupt is not None:  # taken already: no wait for a human
            for call in gated:
                self.outcomes[call.id] = self._interrupted()
        elif gated:
            state = await self._gated(gated, gates, state)
        return state

    async def _one_by_one(
        self, calls: list[ToolCall], gates: GateDecision, state: dict[str, Any]
    ) -> dict[str, Any]:
        """A terminating call in the batch: every call, whatever its kind, in call order."""
        for call in calls:
            if self.interrupt is not None:
                self.outcomes[call.id] = self._interrupted()
            elif call.id in gates:
                state = await self._gated([call], gates, state)
            elif self._in_workflow(call):
                state = await self._in_workflow_code(call, state)
            elif self.companions.is_companion(call):
                self.outcomes[call.id] = await self.companions.run(call)
            elif self.children.is_sub_agent(call):
                started = await self.children.dispatch([call], self.outcomes)
                self.interrupt = self.interrupt or self.children.interrupt
                await self._parallel([], state, started)
                await self.children.settle(started)
            else:
                state = await self._parallel([call], state)
        return state

    async def _parallel(
        self, calls: list[ToolCall], state: dict[str, Any], children: Sequence[ChildRun] = ()
    ) -> dict[str, Any]:
        """Tool steps, and the steps awaiting started children, at once, at step ids
        reserved in call order; the tools' state changes are merged in call order."""
        if not calls and not children:
            return state
        reservations = [DBOS.reserve_step() for _ in calls]
        waits = [DBOS.reserve_step() for _ in children]
        results = await asyncio.gather(
            *(
                r.run_async(
                    tool_step_options(c),
                    tool_step,
                    self.session_id,
                    self.run_id,
                    self.agent.name,
                    self.step,
                    c,
                    state,
                )
                for r, c in zip(reservations, calls, strict=True)
            ),
            *(
                w.run_async(
                    child_step_options(child),
                    child_result,
                    child,
                    self.children.parent_call(child),
                )
                for w, child in zip(waits, children, strict=True)
            ),
        )
        for child, outcome in zip(children, results[len(calls) :], strict=True):
            self.outcomes[child.call_id] = outcome
        merged = state
        for call, outcome in zip(calls, results, strict=False):
            self.outcomes[call.id] = outcome
            merged = merge_state(merged, state, outcome.state)
        return merged

    async def _in_workflow_code(self, call: ToolCall, state: dict[str, Any]) -> dict[str, Any]:
        if self._is_remote(call):  # remote children (issue 32)
            outcome = (await run_remote_children(self.agent, self.commit, [call], self.tenant))[
                call.id
            ]
        else:
            outcome = await run_workflow_tool(
                self.agent, self.session_id, self.run_id, self.step, call, state
            )
        self.outcomes[call.id] = outcome
        return outcome.state if outcome.state is not None else state

    async def _gated(
        self, calls: list[ToolCall], gates: GateDecision, state: dict[str, Any]
    ) -> dict[str, Any]:
        """Wait for every human answer together, then run what was approved."""
        timeouts = {c.id: self._timeout(c, gates.kind_of(c)) for c in calls}
        pending = [
            PendingToolCall(c.id, c.name, gates.kind_of(c), c.arguments, timeouts[c.id])
            for c in calls
        ]
        waited = await HumanWait(self.rt, self.agent, self.commit).wait(pending)
        self.interrupt = waited.interrupt
        approved: list[ToolCall] = []
        for call in calls:
            kind = gates.kind_of(call)
            answer = waited.answers.get(call.id)
            if answer is None or (self.interrupt is not None and kind == "approval"):
                self.outcomes[call.id] = self._interrupted()  # unanswered, or not to run now
                continue
            outcome = answer_outcome(call, kind, answer, timeouts[call.id])
            if outcome is None:
                approved.append(call)
                continue
            if kind != "approval":  # a client's result or a human's input: its hooks, once
                await DBOS.run_step_async(
                    {"name": f"helix.client_result:{call.name}"},
                    outside_result_hooks,
                    self.session_id,
                    self.run_id,
                    self.agent.name,
                    self.step,
                    call,
                    outcome,
                )
            self.outcomes[call.id] = outcome
        return await with_resume(waited.resume, self._parallel(approved, state))

    async def _finishers(
        self, calls: list[ToolCall], state: dict[str, Any], *, run_failed: bool
    ) -> tuple[Ending | None, dict[str, Any]]:
        """finish_with tools one by one, seeing the state; the first that succeeds (in
        call order) completes the run, and the rest are not executed."""
        ending: Ending | None = None
        winner: str | None = None
        failed = run_failed
        for call in calls:
            if self.interrupt is not None:
                self.outcomes[call.id] = self._interrupted()
                continue
            if winner is not None or failed:
                done = winner if winner is not None else "a failed run"
                self.outcomes[call.id] = ToolOutcome.not_executed(
                    f"Not executed: the run already completed via '{done}'"
                )
                continue
            outcome = await DBOS.run_step_async(
                tool_step_options(call),
                tool_step,
                self.session_id,
                self.run_id,
                self.agent.name,
                self.step,
                call,
                state,
            )
            self.outcomes[call.id] = outcome
            if outcome.state is not None:
                state = outcome.state
            if outcome.transform_error:
                ending, failed = Ending("failed", error=outcome.transform_error), True
            elif outcome.success:
                ending, winner = Ending("completed", output=outcome.finish_output), call.name
        return ending, state

    # --- what kind of call ------------------------------------------------------------

    async def _gates(self, calls: list[ToolCall], state: dict[str, Any]) -> GateDecision:
        if not needs_gate_step(self.agent, calls):
            return GateDecision()
        return await DBOS.run_step_async(
            {"name": "helix.gate"},
            evaluate_gates,
            self.session_id,
            self.run_id,
            self.agent.name,
            self.step,
            calls,
            state,
        )

    def _interrupted(self) -> ToolOutcome:
        assert self.interrupt is not None
        return ToolOutcome.not_executed(interrupted_message(self.interrupt.reason))

    def _is_finisher(self, call: ToolCall) -> bool:
        tool = self.agent.tool(call.name)
        return tool is not None and tool.finish_with

    def _is_remote(self, call: ToolCall) -> bool:
        return isinstance(self.agent.tool(call.name), RemoteSubAgentTool)

    def _in_workflow(self, call: ToolCall) -> bool:
        tool = self.agent.tool(call.name)
        return tool is not None and tool.runs_in_workflow

    def _timeout(self, call: ToolCall, kind: GateKind) -> float:
        tool = self.agent.tool(call.name)
        if kind != "approval" and tool is not None and tool.client_timeout_seconds is not None:
            return tool.client_timeout_seconds
        if kind == "client":
            return self.rt.client_tool_timeout_seconds
        return self.rt.approval_timeout_seconds


_MISSING = object()


def merge_state(
    current: dict[str, Any], base: dict[str, Any], changed: dict[str, Any] | None
) -> dict[str, Any]:
    """Apply one parallel tool's top-level changes (against the shared base) in call order."""
    if changed is None:
        return current
    merged = dict(current)
    for key, value in changed.items():
        if base.get(key, _MISSING) != value:
            merged[key] = value
    for key in base:
        if key not in changed:
            merged.pop(key, None)
    return merged
