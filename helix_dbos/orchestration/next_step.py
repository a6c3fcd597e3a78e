"""What happens after an agent step, decided by one pure function of what the step came to.

The agent loop asks it once per step and matches on the answer (openai-agents'
`NextStep*` outcomes are the model): run again, complete with an output, fail with an
error, or end interrupted. The limits live here, with their precedence, so they are
tested without a database: consecutive nudges, output retries, the one max_tokens
correction, `stop_when` and the step cap (seeds 000, 001, 004).

Counters are values: a decision returns the counters after its step, and the loop
adopts them with the step, so a step decided but not taken changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from helix_dbos.orchestration.completion import MAX_NUDGES_ERROR
from helix_dbos.orchestration.planning import StepProcessingPlan
from helix_dbos.orchestration.types import FINISH_TOOL_NAME

MAX_TOKENS_CORRECTIONS = 1  # a reply cut off at max_tokens is corrected once per run
MAX_TOKENS_AGAIN_ERROR = (
    "The model stopped at the maximum output length (max_tokens) again after a correction"
)


@dataclass(frozen=True)
class Continue:
    """Nothing ended the run: the loop asks the model again."""


@dataclass(frozen=True)
class Complete:
    output: Any = None
    stopped: bool = False  # the agent's `stop_when` ended the run


@dataclass(frozen=True)
class Fail:
    error: str
    stop_reason: str | None = None  # the run row's, when a control ended it ("usage_limit")


@dataclass(frozen=True)
class Interrupted:
    error: str
    reason: str | None = None


Ending = Complete | Fail | Interrupted
NextStep = Continue | Complete | Fail | Interrupted


@dataclass(frozen=True)
class Limits:
    """One run's limits, and what the loop says when it corrects the model."""

    max_steps: int
    max_nudges: int  # consecutive nudges before the run fails
    max_output_retries: int  # invalid outputs allowed before the one that fails the run
    step_cap_error: str
    nudge: str  # the message a text reply gets when a completion tool is required
    max_tokens_correction: str


@dataclass(frozen=True)
class Counters:
    """What the limits count, after the steps taken so far."""

    steps: int = 0
    nudges: int = 0  # consecutive: a step that calls a tool resets it
    output_retries: int = 0  # invalid outputs in the whole run
    max_tokens_fixes: int = 0


@dataclass(frozen=True)
class InvalidOutput:
    """Output that does not match output_schema: from the reply itself, `__finish__`, or
    a finish_with tool; `attempt` is its number in the run (the loop logs each)."""

    source: str
    error: str
    attempt: int = 0


@dataclass(frozen=True)
class ToolsDone:
    """What the step's tools came to, as far as the run's end is concerned."""

    ending: Ending | None = None  # a finish_with tool's end, or a human wait interrupted
    invalid_outputs: tuple[InvalidOutput, ...] = ()  # finish_with outputs, in call order
    terminated: Complete | None = None  # a terminating tool that succeeded (seed 004)


@dataclass(frozen=True)
class StopWhen:
    """The agent's `stop_when` on this step: deterministic workflow code that may raise;
    `output` is the run's output if it stops the run."""

    check: Callable[[], bool]
    output: Any = None


@dataclass(frozen=True)
class StepDecision:
    next: NextStep
    counters: Counters  # after this step
    say: tuple[str, ...] = ()  # user messages the step adds: a nudge, a correction
    invalid_outputs: tuple[InvalidOutput, ...] = ()  # numbered, to log


def reply_decision(plan: StepProcessingPlan, counters: Counters, limits: Limits) -> StepDecision:
    """What the reply alone makes of the run, before any tool runs: its own end (a valid
    completion, a failing stop reason) and its invalid output, counted against the
    retries. The loop tells the tools whether the run has failed already."""
    ending: Ending | None = None
    update = plan.status_update
    if plan.is_terminal and update is not None:
        if update.status == "completed":
            ending = Complete(update.output)
        else:
            ending = Fail(update.error or "")
    invalid: list[InvalidOutput] = []
    if plan.finish_call_ids and plan.finish_error is not None:
        invalid.append(InvalidOutput(FINISH_TOOL_NAME, plan.finish_error))
    if plan.output_error is not None:
        invalid.append(InvalidOutput("the reply", plan.output_error))
    ending, counters, numbered = _count_invalid(invalid, ending, counters, limits)
    return StepDecision(ending or Continue(), counters, invalid_outputs=numbered)


def decide_next_step(
    plan: StepProcessingPlan,
    counters: Counters,
    limits: Limits,
    tools: ToolsDone | None = None,
    stop_when: StopWhen | None = None,
) -> StepDecision:
    """The step's outcome, in this order of precedence: an interrupted wait; a
    finish_with tool's end; the reply's own end; output retries running out; a
    terminating tool; then `stop_when` (raising fails the run) and the step cap, only
    when nothing else ended it. Nudges and the max_tokens correction come only with a
    text reply that has no other end; running out of them fails the run."""
    decided = reply_decision(plan, counters, limits)
    counters = replace(decided.counters, steps=counters.steps + 1)
    ending = None if isinstance(decided.next, Continue) else decided.next
    numbered = decided.invalid_outputs
    if tools is not None:
        if tools.ending is not None:  # the tools ran after the reply: theirs is the last word
            ending = tools.ending
        ending, counters, more = _count_invalid(tools.invalid_outputs, ending, counters, limits)
        numbered += more
        if ending is None and tools.terminated is not None:
            ending = tools.terminated
    say: list[str] = []
    if plan.needs_completion_nudge:
        counters = replace(counters, nudges=counters.nudges + 1)
        if counters.nudges > limits.max_nudges:
            ending = Fail(MAX_NUDGES_ERROR)
        else:
            say.append(limits.nudge)
    elif plan.pending_tool_calls or plan.finish_call_ids:
        counters = replace(counters, nudges=0)
    if plan.needs_max_tokens_correction:
        counters = replace(counters, max_tokens_fixes=counters.max_tokens_fixes + 1)
        if counters.max_tokens_fixes > MAX_TOKENS_CORRECTIONS:
            ending = Fail(MAX_TOKENS_AGAIN_ERROR)
        else:
            say.append(limits.max_tokens_correction)
    if ending is None and stop_when is not None:
        ending = _stop_when(stop_when)
    if ending is None and counters.steps >= limits.max_steps:
        ending = Fail(limits.step_cap_error)
    return StepDecision(ending or Continue(), counters, tuple(say), numbered)


def _count_invalid(
    invalid: Sequence[InvalidOutput],
    ending: Ending | None,
    counters: Counters,
    limits: Limits,
) -> tuple[Ending | None, Counters, tuple[InvalidOutput, ...]]:
    """Each invalid output counts; the first one past `max_output_retries` fails the run,
    unless the step ended it another way."""
    numbered: list[InvalidOutput] = []
    for output in invalid:
        counters = replace(counters, output_retries=counters.output_retries + 1)
        numbered.append(replace(output, attempt=counters.output_retries))
        if ending is None and counters.output_retries > limits.max_output_retries:
            ending = Fail(
                f"Output validation failed {counters.output_retries} times: {output.error}"
            )
    return ending, counters, tuple(numbered)


def _stop_when(stop_when: StopWhen) -> Ending | None:
    try:
        stop = bool(stop_when.check())
    except Exception as exc:
        return Fail(f"stop_when raised {type(exc).__name__}: {exc}")
    return Complete(stop_when.output, stopped=True) if stop else None
