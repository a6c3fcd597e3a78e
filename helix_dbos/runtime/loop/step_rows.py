"""What one agent step writes (its `StepCommit`), built from checkpointed outputs only:
the reply's rows, the tools' rows, and the end the step policy decided
(`orchestration/next_step.py`). A replay rebuilds the very same rows.
"""

from __future__ import annotations

import logging
from typing import Any

from helix_dbos.definitions.agent import Agent
from helix_dbos.log_events import OUTPUT_VALIDATION_FAILED, log_event
from helix_dbos.orchestration.messages import (
    create_tool_result_message,
    synthesize_finish_tool_result,
)
from helix_dbos.orchestration.next_step import (
    Complete,
    Continue,
    Ending,
    Fail,
    Interrupted,
    InvalidOutput,
    StepDecision,
    StopWhen,
    ToolsDone,
)
from helix_dbos.orchestration.planning import StepProcessingPlan
from helix_dbos.orchestration.types import FINISH_TOOL_NAME, Message, ToolCall
from helix_dbos.runtime.loop.llm_step import llm_usage_record
from helix_dbos.runtime.loop.reply_plan import PlannedReply
from helix_dbos.runtime.loop.tool_batch import BatchResult
from helix_dbos.runtime.steps.commit import StepCommit
from helix_dbos.runtime.steps.live_chunks import runs_at_once
from helix_dbos.runtime.steps.step_types import ChunkRecord, ModelReply

STOP_WHEN = "stop_when"


def reply_rows(
    session_id: str, run_id: str, agent: Agent, step: int, reply: ModelReply, planned: PlannedReply
) -> StepCommit:
    """The step's rows from its reply, before any tool runs: the model's message (its
    on_message fired in the LLM step), its usage, the state the step's hooks changed,
    `__finish__`'s pairing, and the correction of a reply that is not the output."""
    result, plan = planned.result, planned.plan
    commit = StepCommit(session_id, run_id, agent.name, step)
    if reply.state_changed:
        commit.state = reply.state
    commit.usage.append(llm_usage_record(run_id, step, result, agent.llm.provider))
    assistant = planned.assistant_message
    if assistant is not None:
        commit.messages.append(assistant)
        commit.head_messages = len(commit.messages)
    _pair_finish(plan, commit)
    if plan.output_error is not None:  # native/prompted: the reply is not the output
        commit.say(Message(role="user", content=plan.output_error))
    return commit


def _pair_finish(plan: StepProcessingPlan, commit: StepCommit) -> None:
    """`__finish__` is never executed: a valid call is acknowledged, an invalid one goes
    back to the model with the validation error (seed 000)."""
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


def tool_rows(
    commit: StepCommit,
    agent: Agent,
    calls: list[ToolCall],
    done: BatchResult,
    state: dict[str, Any],
    terminating_call: ToolCall | None,
) -> ToolsDone:
    """The rows of the step's tool calls, and what they came to for the step policy."""
    ending: Ending | None = None
    if done.ending is not None:
        status, error = done.ending.status, done.ending.error or ""
        if status == "interrupted":  # a wait for a human was interrupted
            ending = Interrupted(error, done.ending.reason)
            payload = {"reason": done.ending.reason}
            commit.events.append(
                ChunkRecord(f"{commit.run_id}:interrupted", "run_interrupted", payload)
            )
        else:
            ending = Complete(done.ending.output) if status == "completed" else Fail(error)
    invalid: list[InvalidOutput] = []
    for call in calls:
        outcome = done.outcomes[call.id]
        commit.add_tool_outcome(call, outcome, start_chunk=runs_at_once(agent, call))
        if outcome.invalid_output:  # a finish_with output that fails output_schema
            invalid.append(InvalidOutput(call.name, outcome.error or ""))
    if done.state != state:
        commit.state = done.state
        commit.events.append(
            ChunkRecord(
                f"{commit.run_id}:{commit.step}:state",
                "state_patch",
                _state_patch(state, done.state),
            )
        )
    terminated: Complete | None = None
    if terminating_call is not None:
        ended = done.outcomes.get(terminating_call.id)
        if ended is not None and ended.success:
            terminated = Complete(ended.result)
    return ToolsDone(ending, tuple(invalid), terminated)


def stop_check(agent: Agent, reply: ModelReply, commit: StepCommit) -> StopWhen | None:
    """Seed 001's stopWhen on this step: `stop_when(step_result, state)`, with the state
    after the step's tools. No output is made up: the reply's text, unless an output
    schema wants more."""
    stop_when = agent.stop_when
    if stop_when is None:
        return None
    state = commit.state if commit.state is not None else reply.state
    text = getattr(reply.result, "content", None)
    output = text if agent.output_schema is None and isinstance(text, str) else None
    return StopWhen(lambda: stop_when(reply.result, agent.state_view(state)), output)


def conclude(commit: StepCommit, decision: StepDecision) -> None:
    """The step's part of the decision: the messages it says, and its end, if any (the one
    place a step's end is set; a stop by `stop_when` adds its reason and chunk)."""
    for text in decision.say:
        commit.say(Message(role="user", content=text))
    match decision.next:
        case Continue():
            pass
        case Complete(output=output, stopped=stopped):
            commit.end("completed", output=output)
            if stopped:
                commit.stop_reason = STOP_WHEN
                payload = {"reason": STOP_WHEN, "step": commit.step}
                commit.events.append(
                    ChunkRecord(f"{commit.run_id}:stopped", "run_stopped", payload)
                )
        case Fail(error=error, stop_reason=reason):
            commit.end("failed", error=error)
            commit.stop_reason = reason
        case Interrupted(error=error):
            commit.end("interrupted", error=error)


def log_invalid_outputs(commit: StepCommit, agent: Agent, decision: StepDecision) -> None:
    """A loud warning for each output that did not match output_schema (seed 000: it
    never passes silently); the run fails after `max_output_retries` more tries."""
    for invalid in decision.invalid_outputs:
        log_event(
            OUTPUT_VALIDATION_FAILED,
            logging.WARNING,
            f"agent '{agent.name}' (run {commit.run_id}): invalid output from {invalid.source} "
            f"(attempt {invalid.attempt} of {agent.max_output_retries + 1}): {invalid.error}",
            run_id=commit.run_id,
            session_id=commit.session_id,
            agent_name=agent.name,
            step=commit.step,
            source=invalid.source,
            attempt=invalid.attempt,
            max_attempts=agent.max_output_retries + 1,
            error=invalid.error,
        )


_MISSING = object()


def _state_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    return {
        "set": {k: v for k, v in new.items() if old.get(k, _MISSING) != v},
        "removed": [k for k in old if k not in new],
    }
