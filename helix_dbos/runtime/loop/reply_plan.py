"""What a model's reply makes of a step, as one pure function of the reply, and the
run's limits for the step policy (`orchestration/next_step.py`), from the agent.

A reply is planned once, in the LLM step (`StepAhead.plan`: the model's message, whose
`on_message` hook fires inside that step, before the tools' hooks); the workflow
plans it again only on a replay, where that step did not run.
"""

from __future__ import annotations

from dataclasses import dataclass

from helix_dbos.definitions.agent import Agent, TerminatingConfig
from helix_dbos.orchestration.completion import (
    MAX_STEPS_ERROR,
    CompletionMode,
    completion_nudge,
    max_tokens_correction,
)
from helix_dbos.orchestration.messages import create_assistant_message
from helix_dbos.orchestration.next_step import Limits
from helix_dbos.orchestration.planning import StepProcessingPlan, plan_step_processing
from helix_dbos.orchestration.terminating import MAX_INVOCATIONS_ERROR, truncate_at_terminating
from helix_dbos.orchestration.types import Message, StepResult, ToolCall, ToolCallsStepResult


@dataclass(frozen=True)
class PlannedReply:
    result: StepResult  # the reply, cut after a terminating call (seed 004)
    terminating_call: ToolCall | None
    plan: StepProcessingPlan

    @property
    def assistant_message(self) -> Message | None:
        plan = self.plan.assistant_message_plan
        return create_assistant_message(plan) if plan is not None else None


def plan_reply(
    agent: Agent, terminating: TerminatingConfig | None, mode: CompletionMode, result: StepResult
) -> PlannedReply:
    """Seed 004: calls after a terminating call are dropped, unexecuted and unstored;
    then seed 001's plan of the step."""
    call: ToolCall | None = None
    if terminating is not None and isinstance(result, ToolCallsStepResult):
        kept, call = truncate_at_terminating(result.tool_calls, terminating.tool_ids)
        result = result.model_copy(update={"tool_calls": kept})
    plan = plan_step_processing(
        result,
        mode=mode,
        validate_output=agent.validate_output if agent.output_schema else None,
    )
    return PlannedReply(result, call, plan)


def step_limits(
    agent: Agent, terminating: TerminatingConfig | None, mode: CompletionMode
) -> Limits:
    """The run's limits: a terminating config's (seed 004) win over the agent's."""
    nudges, custom = agent.max_consecutive_nudges, agent.nudge_message
    max_steps, cap_error = agent.max_steps, MAX_STEPS_ERROR.format(max_steps=agent.max_steps)
    if terminating is not None:
        nudges, custom = terminating.consecutive_nudges, terminating.nudge_message
        max_steps, cap_error = terminating.max_invocations, MAX_INVOCATIONS_ERROR
    return Limits(
        max_steps=max_steps,
        max_nudges=nudges,
        max_output_retries=agent.max_output_retries,
        step_cap_error=cap_error,
        nudge=completion_nudge(mode, custom),
        max_tokens_correction=max_tokens_correction(agent.max_tokens_correction, mode),
    )
