"""The step policy (`orchestration/next_step.py`), without a database: what one step's
reply and tools make of the run, the limits, their precedence, and properties of whole
runs driven by it (the step cap is never passed, nudges never exceed their limit)."""

from __future__ import annotations

from typing import Any

from helpers import step_calls
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from helix_dbos.orchestration.completion import MAX_NUDGES_ERROR, CompletionMode
from helix_dbos.orchestration.next_step import (
    MAX_TOKENS_AGAIN_ERROR,
    Complete,
    Continue,
    Counters,
    Fail,
    Interrupted,
    InvalidOutput,
    Limits,
    StepDecision,
    StopWhen,
    ToolsDone,
    decide_next_step,
    reply_decision,
)
from helix_dbos.orchestration.planning import StepProcessingPlan, plan_step_processing
from helix_dbos.orchestration.types import (
    ErrorStepResult,
    StepResult,
    TextStepResult,
    ToolCallsStepResult,
)

LIMITS = Limits(
    max_steps=5,
    max_nudges=1,
    max_output_retries=2,
    step_cap_error="cap",
    nudge="call a tool",
    max_tokens_correction="shorter",
)
FINISH_MODE = CompletionMode(tool_names=("__finish__",), inject_finish=True)
JSON_MODE = CompletionMode(tool_names=(), inject_finish=False, output_mode="native")


class Answer(BaseModel):
    answer: str


def validate(value: Any) -> Answer:
    return Answer.model_validate(value)


def plan_of(result: StepResult, mode: CompletionMode | None = None) -> StepProcessingPlan:
    return plan_step_processing(result, mode=mode, validate_output=validate)


def text(content: str = "hi", stop_reason: str = "end_turn") -> TextStepResult:
    return TextStepResult(content=content, stop_reason=stop_reason)  # type: ignore[arg-type]


def calls(*names_and_args: tuple[str, dict[str, Any]]) -> ToolCallsStepResult:
    return step_calls(*((f"c{i}", n, a) for i, (n, a) in enumerate(names_and_args)))


TOOL_STEP = plan_of(calls(("search", {})))
NUDGED = plan_of(text(), FINISH_MODE)
CUT_OFF = plan_of(text(stop_reason="max_tokens"), FINISH_MODE)
BAD_FINISH = plan_of(calls(("__finish__", {"wrong": 1}), ("search", {})), FINISH_MODE)
GOOD_FINISH = plan_of(calls(("__finish__", {"answer": "42"})), FINISH_MODE)


# --- one step ---------------------------------------------------------------------------


def test_a_step_with_tools_runs_again_and_counts_itself() -> None:
    decided = decide_next_step(TOOL_STEP, Counters(steps=2), LIMITS, ToolsDone())
    assert decided == StepDecision(Continue(), Counters(steps=3))


def test_a_text_reply_completes_with_its_text_when_no_tool_is_required() -> None:
    decided = decide_next_step(plan_of(text("done")), Counters(), LIMITS)
    assert decided.next == Complete("done")
    assert decided.say == ()


def test_a_valid_finish_completes_with_the_validated_output() -> None:
    assert decide_next_step(GOOD_FINISH, Counters(), LIMITS).next == Complete(Answer(answer="42"))


def test_an_error_reply_fails_with_its_error() -> None:
    decided = decide_next_step(plan_of(ErrorStepResult(error="boom")), Counters(), LIMITS)
    assert decided.next == Fail("boom")


def test_a_failing_stop_reason_fails_the_run() -> None:
    decided = decide_next_step(plan_of(text(stop_reason="content_filter")), Counters(), LIMITS)
    assert isinstance(decided.next, Fail)
    assert "content filter" in decided.next.error


def test_the_step_cap_fails_the_step_that_reaches_it_without_ending() -> None:
    at_cap = Counters(steps=LIMITS.max_steps - 1)
    assert decide_next_step(TOOL_STEP, at_cap, LIMITS).next == Fail("cap")
    below = Counters(steps=LIMITS.max_steps - 2)
    assert decide_next_step(TOOL_STEP, below, LIMITS).next == Continue()


def test_a_step_that_completes_at_the_cap_completes() -> None:
    at_cap = Counters(steps=LIMITS.max_steps - 1)
    assert decide_next_step(plan_of(text("ok")), at_cap, LIMITS).next == Complete("ok")


# --- nudges and the max_tokens correction -------------------------------------------------


def test_a_text_reply_when_a_tool_is_required_is_nudged_then_fails() -> None:
    first = decide_next_step(NUDGED, Counters(), LIMITS)
    assert first.next == Continue()
    assert first.say == ("call a tool",)
    assert first.counters.nudges == 1
    second = decide_next_step(NUDGED, first.counters, LIMITS)
    assert second.next == Fail(MAX_NUDGES_ERROR)
    assert second.say == ()


def test_a_tool_call_resets_the_nudges_and_a_finish_call_does_too() -> None:
    assert decide_next_step(TOOL_STEP, Counters(nudges=1), LIMITS).counters.nudges == 0
    assert decide_next_step(BAD_FINISH, Counters(nudges=1), LIMITS).counters.nudges == 0


def test_no_nudges_allowed_fails_the_first_text_reply() -> None:
    limits = Limits(**{**LIMITS.__dict__, "max_nudges": 0})
    assert decide_next_step(NUDGED, Counters(), limits).next == Fail(MAX_NUDGES_ERROR)


def test_a_reply_cut_off_at_max_tokens_is_corrected_once_per_run() -> None:
    first = decide_next_step(CUT_OFF, Counters(), LIMITS)
    assert (first.next, first.say) == (Continue(), ("shorter",))
    assert first.counters.nudges == 0  # a correction is not a nudge
    between = decide_next_step(TOOL_STEP, first.counters, LIMITS)
    second = decide_next_step(CUT_OFF, between.counters, LIMITS)
    assert second.next == Fail(MAX_TOKENS_AGAIN_ERROR)


def test_a_json_reply_cut_off_at_max_tokens_is_corrected_too() -> None:
    plan = plan_of(text('{"answer": ', stop_reason="max_tokens"), JSON_MODE)
    assert decide_next_step(plan, Counters(), LIMITS).say == ("shorter",)


# --- output retries ---------------------------------------------------------------------------


def test_invalid_finish_output_counts_and_fails_past_the_retries() -> None:
    counters = Counters()
    for attempt in (1, 2):
        decided = decide_next_step(BAD_FINISH, counters, LIMITS, ToolsDone())
        assert decided.next == Continue()
        assert decided.invalid_outputs[0].attempt == attempt
        assert decided.invalid_outputs[0].source == "__finish__"
        counters = decided.counters
    last = decide_next_step(BAD_FINISH, counters, LIMITS, ToolsDone())
    assert isinstance(last.next, Fail)
    assert last.next.error.startswith(
        "Output validation failed 3 times: Invalid output for __finish__"
    )


def test_the_reply_alone_says_whether_the_run_failed_before_its_tools_run() -> None:
    spent = Counters(output_retries=LIMITS.max_output_retries)
    assert isinstance(reply_decision(BAD_FINISH, spent, LIMITS).next, Fail)
    assert reply_decision(BAD_FINISH, Counters(), LIMITS).next == Continue()
    assert reply_decision(TOOL_STEP, spent, LIMITS).next == Continue()


def test_an_invalid_json_reply_is_an_invalid_output_from_the_reply() -> None:
    decided = decide_next_step(plan_of(text("not json"), JSON_MODE), Counters(), LIMITS)
    assert decided.next == Continue()
    assert decided.invalid_outputs[0].source == "the reply"
    assert decided.counters.output_retries == 1


def test_invalid_finish_with_outputs_count_one_each_in_call_order() -> None:
    tools = ToolsDone(invalid_outputs=(InvalidOutput("a", "x"), InvalidOutput("b", "y")))
    decided = decide_next_step(TOOL_STEP, Counters(output_retries=1), LIMITS, tools)
    assert [(i.source, i.attempt) for i in decided.invalid_outputs] == [("a", 2), ("b", 3)]
    assert decided.next == Fail("Output validation failed 3 times: y")


def test_an_invalid_output_does_not_fail_a_step_another_finish_with_tool_completed() -> None:
    tools = ToolsDone(ending=Complete("won"), invalid_outputs=(InvalidOutput("a", "x"),))
    spent = Counters(output_retries=LIMITS.max_output_retries)
    decided = decide_next_step(TOOL_STEP, spent, LIMITS, tools)
    assert decided.next == Complete("won")
    assert decided.counters.output_retries == spent.output_retries + 1


# --- the tools' end -----------------------------------------------------------------------


def test_an_interrupted_wait_overrides_a_failure_the_reply_caused() -> None:
    spent = Counters(output_retries=LIMITS.max_output_retries)
    tools = ToolsDone(ending=Interrupted("Interrupted: stop", "stop"))
    decided = decide_next_step(BAD_FINISH, spent, LIMITS, tools)
    assert decided.next == Interrupted("Interrupted: stop", "stop")


def test_a_finish_with_tool_ends_the_run_with_its_outcome() -> None:
    for ending in (Complete({"x": 1}), Fail("transform raised")):
        assert (
            decide_next_step(TOOL_STEP, Counters(), LIMITS, ToolsDone(ending=ending)).next == ending
        )


def test_a_terminating_tool_completes_unless_the_step_ended_otherwise() -> None:
    done = ToolsDone(terminated=Complete("bye"))
    assert decide_next_step(TOOL_STEP, Counters(), LIMITS, done).next == Complete("bye")
    failed = ToolsDone(ending=Fail("no"), terminated=Complete("bye"))
    assert decide_next_step(TOOL_STEP, Counters(), LIMITS, failed).next == Fail("no")


# --- stop_when ----------------------------------------------------------------------------


def test_stop_when_completes_a_step_that_did_not_end_the_run() -> None:
    stop = StopWhen(lambda: True, output="text")
    assert decide_next_step(TOOL_STEP, Counters(), LIMITS, ToolsDone(), stop).next == Complete(
        "text", stopped=True
    )
    keep = StopWhen(lambda: False)
    assert decide_next_step(TOOL_STEP, Counters(), LIMITS, ToolsDone(), keep).next == Continue()


def test_stop_when_is_not_asked_when_the_step_ended_the_run() -> None:
    asked: list[int] = []

    def check() -> bool:
        asked.append(1)
        return True

    decided = decide_next_step(plan_of(text("done")), Counters(), LIMITS, None, StopWhen(check))
    assert decided.next == Complete("done")
    assert asked == []


def test_stop_when_comes_before_the_step_cap_and_after_a_nudge() -> None:
    at_cap = Counters(steps=LIMITS.max_steps - 1)
    stop = StopWhen(lambda: True)
    assert decide_next_step(TOOL_STEP, at_cap, LIMITS, None, stop).next == Complete(None, True)
    nudged = decide_next_step(NUDGED, Counters(), LIMITS, None, stop)
    assert (nudged.next, nudged.say) == (Complete(None, True), ("call a tool",))


def test_stop_when_raising_fails_the_run_with_its_error() -> None:
    def check() -> bool:
        raise ValueError("bad state")

    decided = decide_next_step(TOOL_STEP, Counters(), LIMITS, None, StopWhen(check))
    assert decided.next == Fail("stop_when raised ValueError: bad state")


# --- whole runs, as properties ------------------------------------------------------------

KINDS = ("tools", "nudged", "cut_off", "bad_finish", "good_finish", "text_done", "error")
PLANS = {
    "tools": TOOL_STEP,
    "nudged": NUDGED,
    "cut_off": CUT_OFF,
    "bad_finish": BAD_FINISH,
    "good_finish": GOOD_FINISH,
    "text_done": plan_of(text("done")),
    "error": plan_of(ErrorStepResult(error="boom")),
}
limits_strategy = st.builds(
    Limits,
    max_steps=st.integers(1, 12),
    max_nudges=st.integers(0, 3),
    max_output_retries=st.integers(0, 3),
    step_cap_error=st.just("cap"),
    nudge=st.just("nudge"),
    max_tokens_correction=st.just("shorter"),
)


def drive(limits: Limits, replies: list[str]) -> tuple[list[StepDecision], int]:
    """Run the policy over scripted replies (repeating the last) until it ends the run;
    returns the decisions and the most consecutive nudges said."""
    counters, decisions, streak, most = Counters(), [], 0, 0
    for i in range(limits.max_steps + 5):
        kind = replies[min(i, len(replies) - 1)]
        tools = ToolsDone() if kind in ("tools", "bad_finish") else None
        decided = decide_next_step(PLANS[kind], counters, limits, tools)
        decisions.append(decided)
        streak = (
            streak + 1
            if "nudge" in decided.say
            else (0 if kind in ("tools", "bad_finish") else streak)
        )
        most = max(most, streak)
        if not isinstance(decided.next, Continue):
            return decisions, most
        counters = decided.counters
    raise AssertionError("the policy never ended the run")


@settings(max_examples=300, deadline=None)
@given(limits=limits_strategy, replies=st.lists(st.sampled_from(KINDS), min_size=1, max_size=15))
def test_a_run_ends_and_never_takes_more_steps_than_its_cap(
    limits: Limits, replies: list[str]
) -> None:
    decisions, _ = drive(limits, replies)
    assert len(decisions) <= limits.max_steps
    assert [d.counters.steps for d in decisions] == list(range(1, len(decisions) + 1))
    if len(decisions) == limits.max_steps and decisions[-1].next == Fail("cap"):
        assert all(isinstance(d.next, Continue) for d in decisions[:-1])


@settings(max_examples=300, deadline=None)
@given(limits=limits_strategy, replies=st.lists(st.sampled_from(KINDS), min_size=1, max_size=15))
def test_limits_are_never_exceeded_by_what_the_run_says(limits: Limits, replies: list[str]) -> None:
    decisions, most_nudges = drive(limits, replies)
    assert most_nudges <= limits.max_nudges
    assert all(d.counters.nudges <= limits.max_nudges for d in decisions[:-1])
    corrections = sum(d.say.count("shorter") for d in decisions)
    assert corrections <= 1
    invalid = [i for d in decisions for i in d.invalid_outputs]
    assert [i.attempt for i in invalid] == list(range(1, len(invalid) + 1))
    # Every step that continued stayed within the output retries; the one past them failed.
    assert all(d.counters.output_retries <= limits.max_output_retries for d in decisions[:-1])
    if decisions[-1].counters.output_retries > limits.max_output_retries:
        assert isinstance(decisions[-1].next, Fail)


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    counters=st.builds(
        Counters,
        steps=st.integers(0, 6),
        nudges=st.integers(0, 2),
        output_retries=st.integers(0, 3),
        max_tokens_fixes=st.integers(0, 1),
    ),
    limits=limits_strategy,
)
def test_the_decision_is_a_function_of_its_inputs(
    kind: str, counters: Counters, limits: Limits
) -> None:
    first = decide_next_step(PLANS[kind], counters, limits, ToolsDone())
    assert first == decide_next_step(PLANS[kind], counters, limits, ToolsDone())
    assert first.counters.steps == counters.steps + 1
    assert first.counters.output_retries >= counters.output_retries
    assert first.counters.max_tokens_fixes >= counters.max_tokens_fixes


def test_a_run_of_tool_steps_fails_at_the_cap_after_exactly_max_steps() -> None:
    decisions, _ = drive(LIMITS, ["tools"])
    assert decisions[-1].next == Fail("cap")
    assert len(decisions) == LIMITS.max_steps
