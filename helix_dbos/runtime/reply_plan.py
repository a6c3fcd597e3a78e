"""What a model's reply makes of a step, as one pure function of the reply.

The agent loop plans with it in workflow code; the LLM step plans the same reply
(deterministically, so identically) only to know the model's message, whose
`on_message` hook fires inside that step, before the tools' hooks.
"""

from __future__ import annotations

from dataclasses import dataclass

from helix_dbos.definitions.agent import Agent, TerminatingConfig
from helix_dbos.orchestration.completion import CompletionMode
from helix_dbos.orchestration.messages import create_assistant_message
from helix_dbos.orchestration.planning import StepProcessingPlan, plan_step_processing
from helix_dbos.orchestration.terminating import truncate_at_terminating
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
