"""Pure orchestration (seed 001 step processing, seed 000 completion): no database, no DBOS."""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import step_calls
from pydantic import BaseModel, TypeAdapter, ValidationError

from helix_dbos.orchestration.completion import (
    DEFAULT_MAX_TOKENS_CORRECTION,
    FAILING_STOP_REASONS,
    MAX_NUDGES_ERROR,
    MAX_STEPS_ERROR,
    CompletionMode,
    build_system_prompt,
    completion_nudge,
    finish_validation_message,
    is_recoverable_error_stop_reason,
    max_tokens_correction,
    output_requirement_section,
)
from helix_dbos.orchestration.messages import (
    FINISH_ACK,
    AssistantMessagePlan,
    build_messages_for_llm,
    create_assistant_message,
    create_subagent_result_message,
    create_tool_result_message,
    find_unpaired_finish_call_id,
    find_unpaired_tool_calls,
    heal_unpaired_finish,
    pair_dangling_tool_calls,
    synthesize_finish_tool_result,
)
from helix_dbos.orchestration.planning import (
    determine_final_status,
    plan_step_processing,
    should_stop_execution,
)
from helix_dbos.orchestration.types import (
    FINISH_TOOL_NAME,
    SUBAGENT_PREFIX,
    ErrorStepResult,
    LLMRequest,
    Message,
    StepResult,
    StructuredOutputStepResult,
    SubAgentCall,
    TextStepResult,
    ThinkingBlock,
    ToolCall,
    ToolCallsStepResult,
    ToolSpec,
)

FINISH_MODE = CompletionMode(tool_names=(FINISH_TOOL_NAME,), inject_finish=True)
SUBMIT_MODE = CompletionMode(tool_names=("submit_answer", "reject"), inject_finish=False)
FREE_MODE = CompletionMode(tool_names=(), inject_finish=False)


class Result(BaseModel):
    result: str


class Sentiment(BaseModel):
    sentiment: str
    confidence: float


def validator(model: type[BaseModel]):
    def validate(value: Any) -> Any:
        return model.model_validate(value).model_dump(mode="json")

    return validate


# --- types --------------------------------------------------------------------


def test_step_result_union_is_discriminated_by_type() -> None:
    adapter: TypeAdapter[StepResult] = TypeAdapter(StepResult)
    assert isinstance(adapter.validate_python({"type": "text", "content": "hi"}), TextStepResult)
    parsed = adapter.validate_python(
        {"type": "tool_calls", "tool_calls": [{"id": "t1", "name": "search"}]}
    )
    assert isinstance(parsed, ToolCallsStepResult)
    assert parsed.tool_calls[0].arguments == {}
    assert isinstance(
        adapter.validate_python({"type": "structured_output", "output": {"a": 1}}),
        StructuredOutputStepResult,
    )
    error = adapter.validate_python({"type": "error", "error": "boom"})
    assert isinstance(error, ErrorStepResult)
    assert error.should_stop is True and error.stop_reason == "error"
    with pytest.raises(ValidationError):
        adapter.validate_python({"type": "nonsense"})


def test_models_reject_unknown_fields_and_roles() -> None:
    with pytest.raises(ValidationError):
        Message(role="assistant", content="x", surprise=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        Message(role="robot", content="x")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        TextStepResult(content="x", stop_reason="tired")  # type: ignore[arg-type]


def test_message_round_trips_through_json() -> None:
    message = Message(
        role="assistant",
        content="thinking out loud",
        tool_calls=[ToolCall(id="t1", name="search", arguments={"query": "q"})],
        thinking=[ThinkingBlock(text="hmm", signature="sig")],
    )
    assert Message.model_validate_json(message.model_dump_json()) == message


def test_tool_spec_default_parameters_and_llm_request_system() -> None:
    spec = ToolSpec(name="ping")
    assert spec.parameters == {"type": "object", "properties": {}}
    assert spec.strict is False
    with_system = LLMRequest(
        agent_name="a",
        model="mock",
        messages=[Message(role="system", content="Be brief."), Message(role="user", content="hi")],
    )
    assert with_system.system == "Be brief."
    without = LLMRequest(agent_name="a", model="mock", messages=[Message(role="user", content="x")])
    assert without.system is None
    assert LLMRequest(agent_name="a", model="mock", messages=[]).system is None


# --- plan_step_processing: seed 001 examples -----------------------------------


def test_text_plan_keeps_the_message_and_completes_with_the_text() -> None:
    plan = plan_step_processing(TextStepResult(content="Hello!", stop_reason="end_turn"))
    assert plan.assistant_message_plan is not None
    assert plan.assistant_message_plan.content == "Hello!"
    assert plan.assistant_message_plan.tool_calls == []
    assert plan.pending_tool_calls == []
    assert plan.pending_sub_agent_calls == []
    assert plan.is_terminal is True
    assert plan.status_update is not None
    assert plan.status_update.status == "completed"
    assert plan.status_update.output == "Hello!"
    assert plan.output == "Hello!"
    assert plan.needs_completion_nudge is False
    assert plan.needs_max_tokens_correction is False
    assert plan.stop_reason == "end_turn"


def test_text_plan_keeps_thinking() -> None:
    thinking = [ThinkingBlock(text="let me think", signature="abc")]
    plan = plan_step_processing(TextStepResult(content="Hi", thinking=thinking))
    assert plan.assistant_message_plan is not None
    assert plan.assistant_message_plan.thinking == thinking


def test_tool_calls_plan_lists_every_call_as_pending() -> None:
    step = step_calls(
        ("tc1", "search", {"query": "test"}),
        ("tc2", "fetch", {"url": "https://example.com"}),
        content="Let me look.",
    )
    plan = plan_step_processing(step, mode=FINISH_MODE)
    assert plan.assistant_message_plan is not None
    assert plan.assistant_message_plan.content == "Let me look."
    assert [c.id for c in plan.assistant_message_plan.tool_calls] == ["tc1", "tc2"]
    assert [c.id for c in plan.pending_tool_calls] == ["tc1", "tc2"]
    assert plan.pending_tool_calls[0].arguments == {"query": "test"}
    assert plan.status_update is None
    assert plan.is_terminal is False
    assert plan.finish_call_ids == []
    assert plan.finish_error is None
    assert plan.needs_completion_nudge is False


def test_tool_calls_plan_carries_sub_agent_calls() -> None:
    step = ToolCallsStepResult(
        tool_calls=[ToolCall(id="t1", name="search")],
        sub_agent_calls=[SubAgentCall(id="s1", agent_type="summarizer", input={"text": "x"})],
    )
    plan = plan_step_processing(step)
    assert [s.id for s in plan.pending_sub_agent_calls] == ["s1"]
    assert plan.assistant_message_plan is not None
    assert [s.agent_type for s in plan.assistant_message_plan.sub_agent_calls] == ["summarizer"]
    assert plan.is_terminal is False


def test_finish_plan_is_terminal_with_output_and_nothing_to_run() -> None:
    step = step_calls(("tc1", FINISH_TOOL_NAME, {"result": "done"}))
    plan = plan_step_processing(step, mode=FINISH_MODE, validate_output=validator(Result))
    assert plan.pending_tool_calls == []
    assert plan.pending_sub_agent_calls == []
    assert plan.is_terminal is True
    assert plan.output == {"result": "done"}
    assert plan.status_update is not None
    assert plan.status_update.status == "completed"
    assert plan.status_update.output == {"result": "done"}
    assert plan.finish_call_ids == ["tc1"]
    assert plan.finish_error is None
    # __finish__ stays in the history.
    assert plan.assistant_message_plan is not None
    assert [c.name for c in plan.assistant_message_plan.tool_calls] == [FINISH_TOOL_NAME]


def test_finish_is_detected_without_options() -> None:
    """Seed 001 test 'detects __finish__ tool'."""
    plan = plan_step_processing(step_calls(("t1", FINISH_TOOL_NAME, {"done": True})))
    assert plan.is_terminal is True
    assert plan.pending_tool_calls == []
    assert plan.output == {"done": True}


def test_finish_is_excluded_from_pending_tools() -> None:
    """Seed 001 test 'excludes __finish__ from pending tools'."""
    plan = plan_step_processing(
        step_calls(("t1", "search", {}), ("t2", FINISH_TOOL_NAME, {})),
    )
    assert plan.pending_tool_calls == []
    assert plan.is_terminal is True
    assert plan.finish_call_ids == ["t2"]


def test_valid_finish_drops_other_calls_from_the_assistant_plan() -> None:
    step = ToolCallsStepResult(
        content="Done.",
        tool_calls=[
            ToolCall(id="t1", name="search", arguments={"query": "x"}),
            ToolCall(id="t2", name=FINISH_TOOL_NAME, arguments={"result": "ok"}),
            ToolCall(id="t3", name=FINISH_TOOL_NAME, arguments={"result": "second"}),
        ],
        sub_agent_calls=[SubAgentCall(id="s1", agent_type="helper")],
    )
    plan = plan_step_processing(step, mode=FINISH_MODE, validate_output=validator(Result))
    assert plan.assistant_message_plan is not None
    assert [c.id for c in plan.assistant_message_plan.tool_calls] == ["t2"]
    assert plan.assistant_message_plan.sub_agent_calls == []
    assert plan.assistant_message_plan.content == "Done."
    assert plan.pending_tool_calls == []
    assert plan.pending_sub_agent_calls == []
    assert plan.output == {"result": "ok"}
    assert plan.finish_call_ids == ["t2"]
    # Every call left in the message is paired by the synthetic result.
    history = [
        create_assistant_message(plan.assistant_message_plan),
        synthesize_finish_tool_result(plan.finish_call_ids[0]),
    ]
    assert find_unpaired_tool_calls(history) == []


def test_finish_output_is_the_validated_value() -> None:
    step = step_calls(("f", FINISH_TOOL_NAME, {"sentiment": "positive", "confidence": "0.95"}))
    plan = plan_step_processing(step, mode=FINISH_MODE, validate_output=validator(Sentiment))
    assert plan.output == {"sentiment": "positive", "confidence": 0.95}
    assert plan.status_update is not None
    assert plan.status_update.output == {"sentiment": "positive", "confidence": 0.95}


def test_invalid_finish_returns_an_error_and_keeps_other_calls_pending() -> None:
    step = step_calls(
        ("t1", "search", {"query": "x"}),
        ("f1", FINISH_TOOL_NAME, {"sentiment": "positive", "confidence": "very"}),
    )
    plan = plan_step_processing(step, mode=FINISH_MODE, validate_output=validator(Sentiment))
    assert plan.is_terminal is False
    assert plan.status_update is None
    assert plan.output is None
    assert plan.finish_error is not None
    assert "confidence" in plan.finish_error
    assert FINISH_TOOL_NAME in plan.finish_error
    assert plan.finish_call_ids == ["f1"]
    assert [c.id for c in plan.pending_tool_calls] == ["t1"]
    # The whole assistant turn is kept; each __finish__ call gets the error result.
    assert plan.assistant_message_plan is not None
    assert [c.id for c in plan.assistant_message_plan.tool_calls] == ["t1", "f1"]


def test_invalid_finish_with_missing_field_names_it_and_lists_every_finish_call() -> None:
    step = step_calls(("f1", FINISH_TOOL_NAME, {"sentiment": "ok"}), ("f2", FINISH_TOOL_NAME, {}))
    plan = plan_step_processing(step, mode=FINISH_MODE, validate_output=validator(Sentiment))
    assert plan.finish_error is not None
    assert "confidence" in plan.finish_error
    assert plan.finish_call_ids == ["f1", "f2"]
    assert plan.pending_tool_calls == []
    assert plan.is_terminal is False


def test_finish_validation_message_text() -> None:
    text = finish_validation_message("confidence: Field required")
    assert text.startswith("Invalid output for __finish__: confidence: Field required.")
    assert "Call __finish__ again" in text


def test_structured_output_plan_has_no_assistant_message() -> None:
    plan = plan_step_processing(StructuredOutputStepResult(output={"result": "done"}))
    assert plan.assistant_message_plan is None
    assert plan.pending_tool_calls == []
    assert plan.pending_sub_agent_calls == []
    assert plan.is_terminal is True
    assert plan.output == {"result": "done"}
    assert plan.status_update is not None
    assert plan.status_update.status == "completed"
    assert plan.status_update.output == {"result": "done"}
    assert plan.finish_call_ids == []


def test_structured_output_is_validated_and_an_invalid_one_is_corrected() -> None:
    ok = plan_step_processing(
        StructuredOutputStepResult(output={"sentiment": "neutral", "confidence": 1}),
        validate_output=validator(Sentiment),
    )
    assert ok.output == {"sentiment": "neutral", "confidence": 1.0}
    assert ok.assistant_message_plan is None, "seed 001: no assistant message when valid"
    bad = plan_step_processing(
        StructuredOutputStepResult(output={"sentiment": "neutral"}),
        validate_output=validator(Sentiment),
    )
    # never passed through, and not a dead end either: the model gets the error back
    assert bad.is_terminal is False and bad.status_update is None and bad.output is None
    assert bad.output_error is not None
    assert bad.output_error.startswith("Your reply is not valid output: confidence:")
    assert bad.assistant_message_plan is not None
    assert bad.assistant_message_plan.content == '{"sentiment":"neutral"}'


def test_json_reply_modes_parse_validate_and_correct() -> None:
    mode = CompletionMode(tool_names=(), inject_finish=False, output_mode="prompted")
    fenced = TextStepResult(content='```json\n{"sentiment": "up", "confidence": "0.5"}\n```')
    plan = plan_step_processing(fenced, mode=mode, validate_output=validator(Sentiment))
    assert plan.is_terminal and plan.output == {"sentiment": "up", "confidence": 0.5}
    prose = TextStepResult(content="It is positive.")
    plan = plan_step_processing(prose, mode=mode, validate_output=validator(Sentiment))
    assert not plan.is_terminal and plan.output_error is not None
    assert "not valid JSON" in plan.output_error
    cut = TextStepResult(content='{"sent', stop_reason="max_tokens")
    plan = plan_step_processing(cut, mode=mode, validate_output=validator(Sentiment))
    assert plan.needs_max_tokens_correction and plan.output_error is None
    refused = TextStepResult(content="No.", stop_reason="refusal")
    plan = plan_step_processing(refused, mode=mode, validate_output=validator(Sentiment))
    assert plan.status_update is not None and plan.status_update.status == "failed"


def test_error_plan_fails_the_run() -> None:
    plan = plan_step_processing(ErrorStepResult(error="Rate limited", should_stop=True))
    assert plan.assistant_message_plan is None
    assert plan.pending_tool_calls == []
    assert plan.pending_sub_agent_calls == []
    assert plan.is_terminal is True
    assert plan.status_update is not None
    assert plan.status_update.status == "failed"
    assert plan.status_update.error == "Rate limited"
    assert plan.stop_reason == "error"


@pytest.mark.parametrize("mode", [FINISH_MODE, SUBMIT_MODE])
def test_text_when_a_completion_tool_is_required_asks_for_a_nudge(mode: CompletionMode) -> None:
    plan = plan_step_processing(
        TextStepResult(content="Here you go", stop_reason="end_turn"), mode=mode
    )
    assert plan.needs_completion_nudge is True
    assert plan.needs_max_tokens_correction is False
    assert plan.is_terminal is False
    assert plan.status_update is None
    assert plan.assistant_message_plan is not None
    assert plan.assistant_message_plan.content == "Here you go"


def test_text_cut_off_by_max_tokens_with_a_completion_tool_needs_a_correction() -> None:
    plan = plan_step_processing(
        TextStepResult(content="A very long ans", stop_reason="max_tokens"), mode=FINISH_MODE
    )
    assert plan.needs_max_tokens_correction is True
    assert plan.needs_completion_nudge is False
    assert plan.is_terminal is False
    assert plan.status_update is None


@pytest.mark.parametrize("stop_reason", ["content_filter", "refusal"])
def test_non_recoverable_stop_reason_fails_even_when_a_completion_tool_is_required(
    stop_reason: str,
) -> None:
    plan = plan_step_processing(
        TextStepResult(content="", stop_reason=stop_reason),  # type: ignore[arg-type]
        mode=FINISH_MODE,
    )
    assert plan.needs_completion_nudge is False
    assert plan.is_terminal is True
    assert plan.status_update is not None
    assert plan.status_update.status == "failed"


@pytest.mark.parametrize(
    ("stop_reason", "fragment"),
    [
        ("content_filter", "content filter"),
        ("refusal", "refused"),
        ("max_tokens", "max_tokens"),
        ("unknown", "unknown"),
        ("error", "error"),
    ],
)
def test_text_without_completion_tool_fails_on_error_stop_reasons(
    stop_reason: str, fragment: str
) -> None:
    plan = plan_step_processing(
        TextStepResult(content="partial", stop_reason=stop_reason),  # type: ignore[arg-type]
        mode=FREE_MODE,
    )
    assert plan.is_terminal is True
    assert plan.status_update is not None
    assert plan.status_update.status == "failed"
    assert plan.status_update.error is not None
    assert fragment in plan.status_update.error
    assert plan.output is None
    assert plan.needs_completion_nudge is False
    assert plan.needs_max_tokens_correction is False
    # The text still goes into the history.
    assert plan.assistant_message_plan is not None
    assert plan.assistant_message_plan.content == "partial"


@pytest.mark.parametrize("stop_reason", ["end_turn", "stop_sequence", None])
def test_text_without_completion_tool_completes_on_normal_stop_reasons(
    stop_reason: str | None,
) -> None:
    plan = plan_step_processing(
        TextStepResult(content="answer", stop_reason=stop_reason),  # type: ignore[arg-type]
    )
    assert plan.status_update is not None
    assert plan.status_update.status == "completed"
    assert plan.output == "answer"


# --- determine_final_status / should_stop_execution ----------------------------


@pytest.mark.parametrize(
    ("stop_reason", "status"),
    [
        ("max_tokens", "failed"),
        ("content_filter", "failed"),
        ("refusal", "failed"),
        ("error", "failed"),
        ("unknown", "failed"),
        ("end_turn", "completed"),
        ("stop_sequence", "completed"),
        ("tool_use", "completed"),
        (None, "completed"),
    ],
)
def test_determine_final_status_for_every_stop_reason(stop_reason: str | None, status: str) -> None:
    assert determine_final_status(TextStepResult(content="x", stop_reason=stop_reason)) == status  # type: ignore[arg-type]
    assert (
        determine_final_status(step_calls(("t", "search", {}), stop_reason=stop_reason)) == status
    )
    assert (
        determine_final_status(StructuredOutputStepResult(output=1, stop_reason=stop_reason))  # type: ignore[arg-type]
        == status
    )


def test_error_step_is_always_failed() -> None:
    assert determine_final_status(ErrorStepResult(error="x", stop_reason="end_turn")) == "failed"
    assert determine_final_status(ErrorStepResult(error="x", stop_reason=None)) == "failed"


def test_only_max_tokens_is_recoverable() -> None:
    assert is_recoverable_error_stop_reason("max_tokens") is True
    for reason in ["content_filter", "refusal", "error", "unknown", "end_turn", "tool_use", None]:
        assert is_recoverable_error_stop_reason(reason) is False  # type: ignore[arg-type]
    assert {"max_tokens", "content_filter", "refusal", "error", "unknown"} == FAILING_STOP_REASONS


def _exploding(_: Any) -> bool:
    raise AssertionError("stop_when must not be consulted when an earlier condition stops")


def test_should_stop_execution_priority_order() -> None:
    # 1. structured output always stops, before max_steps or stop_when.
    assert should_stop_execution(StructuredOutputStepResult(output={}), 0, stop_when=_exploding)
    # 2. error with should_stop.
    assert should_stop_execution(
        ErrorStepResult(error="e", should_stop=True), 0, stop_when=_exploding
    )
    # 3. text with should_stop.
    assert should_stop_execution(
        TextStepResult(content="x", should_stop=True), 0, stop_when=_exploding
    )
    # 4. max steps reached, before stop_when.
    assert should_stop_execution(
        TextStepResult(content="x"), 10, max_steps=10, stop_when=_exploding
    )


def test_should_stop_execution_continues_when_nothing_applies() -> None:
    assert not should_stop_execution(ErrorStepResult(error="e", should_stop=False), 0)
    assert not should_stop_execution(TextStepResult(content="x", should_stop=False), 3)
    assert not should_stop_execution(step_calls(("t", "search", {})), 9, max_steps=10)
    assert should_stop_execution(step_calls(("t", "search", {})), 11, max_steps=10)


def test_should_stop_execution_custom_stop_when_gets_the_result() -> None:
    seen: list[Any] = []

    def stop_when(result: Any) -> bool:
        seen.append(result)
        return isinstance(result, TextStepResult) and "DONE" in result.content

    done = TextStepResult(content="all DONE")
    assert should_stop_execution(done, 1, max_steps=10, stop_when=stop_when) is True
    assert seen == [done]
    assert should_stop_execution(TextStepResult(content="more"), 1, stop_when=stop_when) is False


# --- completion: prompt section, nudges, constants ------------------------------

SEED_000_FINISH_SECTION = (
    "## Output Requirement\n"
    "This task requires structured output. You MUST complete your work by calling\n"
    "the `__finish__` tool. This tool will process your output and complete the task.\n"
    "DO NOT use any other method to return your final answer."
)
SEED_000_SUBMIT_SECTION = (
    "## Output Requirement\n"
    "This task requires structured output. You MUST complete your work by calling\n"
    "the `submit_answer` tool. This tool will process your output and complete the task.\n"
    "DO NOT use any other method to return your final answer."
)


def test_output_requirement_section_matches_seed_000_exactly() -> None:
    assert output_requirement_section("__finish__") == SEED_000_FINISH_SECTION
    assert output_requirement_section("submit_answer") == SEED_000_SUBMIT_SECTION


def test_build_system_prompt_appends_the_section_naming_the_completion_tool() -> None:
    assert (
        build_system_prompt("Analyze the input.\n", FINISH_MODE)
        == "Analyze the input.\n\n" + SEED_000_FINISH_SECTION
    )
    assert (
        build_system_prompt("Answer questions.", SUBMIT_MODE)
        == "Answer questions.\n\n" + SEED_000_SUBMIT_SECTION
    )
    assert build_system_prompt("", FINISH_MODE) == SEED_000_FINISH_SECTION
    assert build_system_prompt("   ", SUBMIT_MODE) == SEED_000_SUBMIT_SECTION
    assert build_system_prompt("Chat freely.", FREE_MODE) == "Chat freely."


def test_completion_mode_properties() -> None:
    assert FINISH_MODE.requires_tool and FINISH_MODE.primary_tool == FINISH_TOOL_NAME
    assert SUBMIT_MODE.requires_tool and SUBMIT_MODE.primary_tool == "submit_answer"
    assert not FREE_MODE.requires_tool and FREE_MODE.primary_tool is None


def test_completion_nudge_names_the_tool_or_uses_the_custom_message() -> None:
    assert "`__finish__`" in completion_nudge(FINISH_MODE, None)
    assert "`submit_answer`" in completion_nudge(SUBMIT_MODE, None)
    assert completion_nudge(SUBMIT_MODE, "Finish now.") == "Finish now."
    assert completion_nudge(SUBMIT_MODE, "") == ""


def test_max_tokens_correction_names_the_tool() -> None:
    text = max_tokens_correction(DEFAULT_MAX_TOKENS_CORRECTION, FINISH_MODE)
    assert "`__finish__`" in text
    assert "maximum output length" in text
    assert max_tokens_correction("Use {tool}!", SUBMIT_MODE) == "Use submit_answer!"


def test_error_constants() -> None:
    assert MAX_NUDGES_ERROR == "Max consecutive nudges exceeded"
    text = MAX_STEPS_ERROR.format(max_steps=7)
    assert text.startswith("Max invocations exceeded")
    assert "max_steps=7" in text


# --- message builders --------------------------------------------------------


def test_create_assistant_message_prefixes_sub_agent_calls() -> None:
    message = create_assistant_message(
        AssistantMessagePlan(
            tool_calls=[ToolCall(id="t1", name="search", arguments={})],
            sub_agent_calls=[SubAgentCall(id="s1", agent_type="summarizer", input={"x": 1})],
        )
    )
    assert message.role == "assistant"
    assert [(c.id, c.name, c.arguments) for c in message.tool_calls] == [
        ("t1", "search", {}),
        ("s1", "subagent__summarizer", {"x": 1}),
    ]
    assert SUBAGENT_PREFIX == "subagent__"


def test_create_assistant_message_keeps_content_and_thinking() -> None:
    thinking = [ThinkingBlock(text="t", signature="s")]
    message = create_assistant_message(AssistantMessagePlan(content="Hi", thinking=thinking))
    assert message.content == "Hi"
    assert message.tool_calls == []
    assert message.thinking == thinking


def test_create_tool_result_message_json_stringifies_the_result() -> None:
    message = create_tool_result_message(
        "tc1", "search", result={"items": ["a", "b"]}, success=True
    )
    assert message.role == "tool"
    assert message.tool_call_id == "tc1"
    assert message.tool_name == "search"
    assert message.content == '{"items":["a","b"]}'
    assert message.is_error is False
    assert create_tool_result_message("t", "n", result=[1, 2]).content == "[1,2]"
    assert create_tool_result_message("t", "n", result=None).content == "null"
    assert (
        create_tool_result_message("t", "n", result=Result(result="r")).content == '{"result":"r"}'
    )
    # Strings are stored as they are (not double-quoted).
    assert create_tool_result_message("t", "n", result="plain").content == "plain"


def test_create_tool_result_message_for_failures() -> None:
    failed = create_tool_result_message("t1", "search", success=False, error="Not found")
    assert failed.is_error is True
    assert failed.content == "Not found"
    assert create_tool_result_message("t1", "search", success=False).content == "Tool failed"


def test_create_subagent_result_message_uses_the_prefix() -> None:
    message = create_subagent_result_message("s1", "summarizer", result={"summary": "..."})
    assert message.role == "tool"
    assert message.tool_call_id == "s1"
    assert message.tool_name == "subagent__summarizer"
    assert message.content == '{"summary":"..."}'
    failed = create_subagent_result_message("s1", "summarizer", success=False, error="crashed")
    assert failed.is_error and failed.content == "crashed"
    assert failed.tool_name == "subagent__summarizer"


def test_synthesize_finish_tool_result_is_the_fixed_sentinel() -> None:
    message = synthesize_finish_tool_result("tc1")
    assert message.role == "tool"
    assert message.tool_call_id == "tc1"
    assert message.tool_name == FINISH_TOOL_NAME
    assert message.content == '{"acknowledged":true}'
    assert json.loads(message.content) == FINISH_ACK == {"acknowledged": True}
    assert message.is_error is False


def test_finish_step_produces_the_seed_001_committed_history() -> None:
    step = step_calls(("tc1", FINISH_TOOL_NAME, {"result": "done"}))
    plan = plan_step_processing(step, mode=FINISH_MODE, validate_output=validator(Result))
    assert plan.assistant_message_plan is not None
    history = [create_assistant_message(plan.assistant_message_plan)] + [
        synthesize_finish_tool_result(i) for i in plan.finish_call_ids
    ]
    dumped = [m.model_dump(exclude_defaults=True) for m in history]
    assert dumped == [
        {
            "role": "assistant",
            "tool_calls": [{"id": "tc1", "name": "__finish__", "arguments": {"result": "done"}}],
        },
        {
            "role": "tool",
            "tool_call_id": "tc1",
            "tool_name": "__finish__",
            "content": '{"acknowledged":true}',
        },
    ]


# --- transcript invariants -------------------------------------------------------


def _assistant(*items: tuple[str, str]) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=i, name=n) for i, n in items])


def _result(call_id: str, name: str) -> Message:
    return create_tool_result_message(call_id, name, result="ok")


def test_find_unpaired_tool_calls_in_transcript_order() -> None:
    history = [
        Message(role="user", content="go"),
        _assistant(("a", "search"), ("b", "fetch")),
        _result("a", "search"),
        _assistant(("c", "search")),
    ]
    assert [c.id for c in find_unpaired_tool_calls(history)] == ["b", "c"]
    assert find_unpaired_tool_calls(history + [_result("b", "fetch"), _result("c", "search")]) == []
    assert find_unpaired_tool_calls([]) == []


def test_find_unpaired_finish_call_id() -> None:
    legacy = [Message(role="user", content="q"), _assistant(("f1", FINISH_TOOL_NAME))]
    assert find_unpaired_finish_call_id(legacy) == "f1"
    healed = legacy + [synthesize_finish_tool_result("f1")]
    assert find_unpaired_finish_call_id(healed) is None
    # A dangling regular call is not a dangling __finish__.
    assert find_unpaired_finish_call_id([_assistant(("t1", "search"))]) is None


def test_heal_unpaired_finish_pairs_a_legacy_finish_and_is_idempotent() -> None:
    legacy = [
        Message(role="user", content="q"),
        _assistant(("t1", "search")),
        _result("t1", "search"),
        _assistant(("f1", FINISH_TOOL_NAME)),
    ]
    patch = heal_unpaired_finish(legacy)
    assert [m.model_dump() for m in patch] == [synthesize_finish_tool_result("f1").model_dump()]
    healed = legacy + patch
    assert find_unpaired_tool_calls(healed) == []
    assert heal_unpaired_finish(healed) == []


def test_heal_unpaired_finish_ignores_other_dangling_calls() -> None:
    history = [_assistant(("t1", "search"))]
    assert heal_unpaired_finish(history) == []


def test_pair_dangling_tool_calls_answers_every_unanswered_call() -> None:
    history = [
        Message(role="user", content="go"),
        _assistant(("a", "search"), ("s1", "subagent__helper")),
        _result("a", "search"),
        _assistant(("b", "fetch"), ("f", FINISH_TOOL_NAME)),
    ]
    patch = pair_dangling_tool_calls(history, "Aborted by the user")
    by_id = {m.tool_call_id: m for m in patch}
    assert list(by_id) == ["s1", "b", "f"]
    assert by_id["s1"].tool_name == "subagent__helper"
    assert by_id["s1"].is_error and by_id["s1"].content == "Aborted by the user"
    assert by_id["b"].tool_name == "fetch"
    assert by_id["b"].is_error and by_id["b"].content == "Aborted by the user"
    # __finish__ is paired with the sentinel, never an error.
    assert by_id["f"].content == '{"acknowledged":true}'
    assert by_id["f"].is_error is False
    assert find_unpaired_tool_calls(history + patch) == []
    assert pair_dangling_tool_calls(history + patch, "again") == []


# --- build_messages_for_llm ------------------------------------------------------


def test_build_messages_prepends_a_static_system_prompt() -> None:
    history = [Message(role="user", content="hi"), Message(role="assistant", content="hello")]
    built = build_messages_for_llm(history, "Be brief.", {})
    assert [m.role for m in built] == ["system", "user", "assistant"]
    assert built[0].content == "Be brief."
    assert built[1:] == history
    assert len(history) == 2  # input not mutated


def test_build_messages_resolves_a_dynamic_prompt_against_the_state() -> None:
    state = {"notes": ["a", "b", "c", "d", "e"]}
    built = build_messages_for_llm(
        [Message(role="user", content="hi")],
        lambda s: f"You have {len(s['notes'])} notes.",
        state,
    )
    assert built[0] == Message(role="system", content="You have 5 notes.")


def test_build_messages_replaces_stored_system_messages_and_skips_empty_prompts() -> None:
    history = [Message(role="system", content="old"), Message(role="user", content="hi")]
    built = build_messages_for_llm(history, "new", None)
    assert [(m.role, m.content) for m in built] == [("system", "new"), ("user", "hi")]
    assert build_messages_for_llm(history, "", None) == [Message(role="user", content="hi")]
    assert build_messages_for_llm(history, lambda _: "", None) == [
        Message(role="user", content="hi")
    ]
