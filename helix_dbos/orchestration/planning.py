"""From one LLM step result to a plan of what happens next (seed 001), pure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from helix_dbos.orchestration.completion import (
    FAILING_STOP_REASONS,
    CompletionMode,
    finish_validation_message,
    is_recoverable_error_stop_reason,
    parse_json_reply,
    reply_validation_message,
)
from helix_dbos.orchestration.messages import (
    AssistantMessagePlan,
    sub_agent_tool_call,
    to_json_text,
)
from helix_dbos.orchestration.types import (
    FINISH_TOOL_NAME,
    ErrorStepResult,
    StepResult,
    StopReason,
    StructuredOutputStepResult,
    SubAgentCall,
    TextStepResult,
    ToolCall,
    ToolCallsStepResult,
)

OutputValidator = Callable[[Any], Any]


class StatusUpdate(BaseModel):
    status: Literal["completed", "failed"]
    output: Any = None
    error: str | None = None


class StepProcessingPlan(BaseModel):
    assistant_message_plan: AssistantMessagePlan | None = None
    pending_tool_calls: list[ToolCall] = []
    pending_sub_agent_calls: list[SubAgentCall] = []
    status_update: StatusUpdate | None = None
    is_terminal: bool = False
    output: Any = None
    stop_reason: StopReason | None = None
    # __finish__ handling: the calls to pair, and the validation error if any.
    finish_call_ids: list[str] = []
    finish_error: str | None = None
    # A text reply when a completion tool is required: the runtime nudges or fails.
    needs_completion_nudge: bool = False
    # A text reply cut off by max_tokens while a completion tool is required.
    needs_max_tokens_correction: bool = False
    # Native and prompted modes: the reply is not valid output; this correction goes
    # back to the model as a user message (bounded retries, like an invalid __finish__).
    output_error: str | None = None


def describe_validation_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()
        )
    return str(exc)


def plan_step_processing(
    step_result: StepResult,
    *,
    mode: CompletionMode | None = None,
    validate_output: OutputValidator | None = None,
) -> StepProcessingPlan:
    """Decide messages, tools to run and status changes for one step result."""
    mode = mode or CompletionMode(tool_names=(), inject_finish=False)
    if isinstance(step_result, ErrorStepResult):
        return StepProcessingPlan(
            status_update=StatusUpdate(status="failed", error=step_result.error),
            is_terminal=True,
            stop_reason=step_result.stop_reason,
        )
    if isinstance(step_result, StructuredOutputStepResult):
        return _plan_output(step_result.output, validate_output, step_result.stop_reason)
    if isinstance(step_result, TextStepResult):
        return _plan_text(step_result, mode, validate_output)
    if not step_result.tool_calls and not step_result.sub_agent_calls:
        # An empty tool-call reply is a text reply: nudged or completed like one, never a silent loop.
        text = TextStepResult(
            content=step_result.content or "",
            thinking=step_result.thinking,
            stop_reason=step_result.stop_reason,
        )
        return _plan_text(text, mode, validate_output)
    return _plan_tool_calls(step_result, validate_output)


def calls_to_run(plan: StepProcessingPlan) -> list[ToolCall]:
    """Every call the step runs: its tool calls, then seed 001's `subAgentCalls` as the
    `subagent__<type>` calls the stored message holds, so each gets a result (a
    sub-agent tool of that name runs the child; any other name is an unknown tool)."""
    return plan.pending_tool_calls + [sub_agent_tool_call(s) for s in plan.pending_sub_agent_calls]


def _plan_output(
    output: Any, validate_output: OutputValidator | None, stop_reason: StopReason | None
) -> StepProcessingPlan:
    """A native structured_output step (seed 001): no assistant message when valid; an
    invalid one is kept as the reply it was and corrected, never passed through."""
    try:
        value = validate_output(output) if validate_output else output
    except Exception as exc:
        return StepProcessingPlan(
            assistant_message_plan=AssistantMessagePlan(content=to_json_text(output)),
            output_error=reply_validation_message(describe_validation_error(exc)),
            stop_reason=stop_reason,
        )
    return StepProcessingPlan(
        status_update=StatusUpdate(status="completed", output=value),
        is_terminal=True,
        output=value,
        stop_reason=stop_reason,
    )


def _plan_json_reply(
    step: TextStepResult, message: AssistantMessagePlan, validate_output: OutputValidator | None
) -> StepProcessingPlan:
    """Native and prompted modes: the reply's text is the output, as JSON."""
    if step.stop_reason == "max_tokens":
        return StepProcessingPlan(
            assistant_message_plan=message,
            stop_reason=step.stop_reason,
            needs_max_tokens_correction=True,
        )
    try:
        value = parse_json_reply(step.content)
        output = validate_output(value) if validate_output else value
    except Exception as exc:
        return StepProcessingPlan(
            assistant_message_plan=message,
            output_error=reply_validation_message(describe_validation_error(exc)),
            stop_reason=step.stop_reason,
        )
    return StepProcessingPlan(
        assistant_message_plan=message,
        status_update=StatusUpdate(status="completed", output=output),
        is_terminal=True,
        output=output,
        stop_reason=step.stop_reason,
    )


def _plan_text(
    step: TextStepResult, mode: CompletionMode, validate_output: OutputValidator | None
) -> StepProcessingPlan:
    message = AssistantMessagePlan(content=step.content, thinking=step.thinking)
    fails_now = step.stop_reason in FAILING_STOP_REASONS and not is_recoverable_error_stop_reason(
        step.stop_reason
    )
    if mode.json_reply and not fails_now:
        return _plan_json_reply(step, message, validate_output)
    if mode.requires_tool and not fails_now:
        return StepProcessingPlan(
            assistant_message_plan=message,
            stop_reason=step.stop_reason,
            needs_max_tokens_correction=step.stop_reason == "max_tokens",
            needs_completion_nudge=step.stop_reason != "max_tokens",
        )
    status = determine_final_status(step)
    update = (
        StatusUpdate(status="completed", output=step.content)
        if status == "completed"
        else StatusUpdate(status="failed", error=_stop_reason_error(step.stop_reason))
    )
    return StepProcessingPlan(
        assistant_message_plan=message,
        status_update=update,
        is_terminal=True,
        output=update.output,
        stop_reason=step.stop_reason,
    )


def _plan_tool_calls(
    step: ToolCallsStepResult, validate_output: OutputValidator | None
) -> StepProcessingPlan:
    finish_calls = [c for c in step.tool_calls if c.name == FINISH_TOOL_NAME]
    others = [c for c in step.tool_calls if c.name != FINISH_TOOL_NAME]
    message = AssistantMessagePlan(
        content=step.content,
        tool_calls=step.tool_calls,
        sub_agent_calls=step.sub_agent_calls,
        thinking=step.thinking,
    )
    if not finish_calls:
        return StepProcessingPlan(
            assistant_message_plan=message,
            pending_tool_calls=others,
            pending_sub_agent_calls=step.sub_agent_calls,
            stop_reason=step.stop_reason,
        )
    first = finish_calls[0]
    try:
        output = validate_output(first.arguments) if validate_output else first.arguments
    except Exception as exc:
        # Invalid output goes back to the model; the other calls still run.
        return StepProcessingPlan(
            assistant_message_plan=message,
            pending_tool_calls=others,
            pending_sub_agent_calls=step.sub_agent_calls,
            finish_call_ids=[c.id for c in finish_calls],
            finish_error=finish_validation_message(describe_validation_error(exc)),
            stop_reason=step.stop_reason,
        )
    # A valid __finish__ ends the turn: it is not executed, and calls made beside it
    # are dropped from the stored message so history holds no unanswered call.
    message = message.model_copy(update={"tool_calls": [first], "sub_agent_calls": []})
    return StepProcessingPlan(
        assistant_message_plan=message,
        status_update=StatusUpdate(status="completed", output=output),
        is_terminal=True,
        output=output,
        finish_call_ids=[first.id],
        stop_reason=step.stop_reason,
    )


def _stop_reason_error(stop_reason: StopReason | None) -> str:
    return {
        "max_tokens": "The model stopped at the maximum output length (max_tokens)",
        "content_filter": "The model's response was blocked by a content filter",
        "refusal": "The model refused to respond",
    }.get(stop_reason or "unknown", f"The model stopped unexpectedly (stop reason: {stop_reason})")


def determine_final_status(step_result: StepResult) -> Literal["completed", "failed"]:
    """Error stop reasons fail the run; normal ones complete it."""
    if isinstance(step_result, ErrorStepResult):
        return "failed"
    if step_result.stop_reason in FAILING_STOP_REASONS:
        return "failed"
    return "completed"


def should_stop_execution(
    step_result: StepResult,
    step_count: int,
    *,
    max_steps: int | None = None,
    stop_when: Callable[[StepResult], bool] | None = None,
) -> bool:
    """Stop conditions in seed 001's priority order."""
    if isinstance(step_result, StructuredOutputStepResult):
        return True
    if isinstance(step_result, ErrorStepResult) and step_result.should_stop:
        return True
    if isinstance(step_result, TextStepResult) and step_result.should_stop:
        return True
    if max_steps is not None and step_count >= max_steps:
        return True
    return bool(stop_when and stop_when(step_result))
