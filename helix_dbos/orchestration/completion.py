"""How an agent finishes (seeds 000 and 004): pure rules, no I/O."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from helix_dbos.orchestration.types import FINISH_TOOL_NAME, OutputMode, StopReason

DEFAULT_NUDGE_MESSAGE = (
    "You are currently in an autonomous execution mode with no user interaction. "
    "You must complete your task by calling one of the terminating tools."
)
DEFAULT_COMPLETION_NUDGE = (
    "You replied with text, but this task must be completed by calling the `{tool}` tool. "
    "Call it now with your final answer."
)
DEFAULT_MAX_TOKENS_CORRECTION = (
    "Your previous response was cut off because it reached the maximum output length. "
    "Do not write a long text answer: call the `{tool}` tool directly with your final output."
)
DEFAULT_JSON_MAX_TOKENS_CORRECTION = (
    "Your previous response was cut off because it reached the maximum output length. "
    "Reply again with only the JSON object, and keep it short."
)
MAX_NUDGES_ERROR = "Max consecutive nudges exceeded"
MAX_STEPS_ERROR = (
    "Max invocations exceeded: the agent reached max_steps={max_steps} without finishing"
)
RECOVERABLE_STOP_REASONS: frozenset[str] = frozenset({"max_tokens"})
FAILING_STOP_REASONS: frozenset[str] = frozenset(
    {"max_tokens", "content_filter", "refusal", "error", "unknown"}
)


@dataclass(frozen=True)
class CompletionMode:
    """Which tools complete the run; empty means a text reply completes it."""

    tool_names: tuple[str, ...]
    inject_finish: bool
    announce: bool = True  # add the Output Requirement section to the system prompt
    # "native" / "prompted": no completion tool; a text reply is the output, as JSON
    # validated against the output schema (`schema_text`, for the prompted instructions).
    output_mode: OutputMode = "tool"
    schema_text: str | None = None

    @property
    def requires_tool(self) -> bool:
        return bool(self.tool_names)

    @property
    def json_reply(self) -> bool:
        """The reply's text is the output, as JSON (the native and prompted modes)."""
        return self.output_mode != "tool" and not self.tool_names

    @property
    def primary_tool(self) -> str | None:
        return self.tool_names[0] if self.tool_names else None


def output_requirement_section(tool_name: str) -> str:
    """The system prompt section that names the completion tool (seed 000)."""
    return (
        "## Output Requirement\n"
        "This task requires structured output. You MUST complete your work by calling\n"
        f"the `{tool_name}` tool. This tool will process your output and complete the task.\n"
        "DO NOT use any other method to return your final answer."
    )


def prompted_output_section(schema_text: str) -> str:
    """The prompted mode's instructions: the schema, and JSON only."""
    return (
        "## Output Requirement\n"
        "Reply with only a JSON object that matches this JSON schema: no other text, "
        "no code fences.\n"
        f"{schema_text}"
    )


def append_section(base_prompt: str, section: str) -> str:
    return f"{base_prompt.rstrip()}\n\n{section}" if base_prompt.strip() else section


def build_system_prompt(base_prompt: str, mode: CompletionMode) -> str:
    """The agent's prompt plus the Output Requirement section: naming the tool that must
    finish, or (prompted mode) giving the schema the reply must match."""
    if mode.json_reply and mode.output_mode == "prompted" and mode.schema_text:
        return append_section(base_prompt, prompted_output_section(mode.schema_text))
    if not mode.requires_tool or not mode.announce:
        return base_prompt
    return append_section(
        base_prompt, output_requirement_section(mode.primary_tool or FINISH_TOOL_NAME)
    )


def completion_nudge(mode: CompletionMode, custom: str | None) -> str:
    if custom is not None:
        return custom
    return DEFAULT_COMPLETION_NUDGE.format(tool=mode.primary_tool or FINISH_TOOL_NAME)


def max_tokens_correction(template: str, mode: CompletionMode) -> str:
    if mode.json_reply and template == DEFAULT_MAX_TOKENS_CORRECTION:
        return DEFAULT_JSON_MAX_TOKENS_CORRECTION
    return template.format(tool=mode.primary_tool or FINISH_TOOL_NAME)


def is_recoverable_error_stop_reason(stop_reason: StopReason | None) -> bool:
    """max_tokens can be corrected once when the agent has an output schema."""
    return stop_reason in RECOVERABLE_STOP_REASONS


def finish_validation_message(details: str) -> str:
    """The tool error sent back to the model for an invalid `__finish__` call."""
    return (
        f"Invalid output for {FINISH_TOOL_NAME}: {details}. "
        f"Call {FINISH_TOOL_NAME} again with arguments that match the output schema."
    )


def finish_with_validation_message(tool_name: str, details: str) -> str:
    """The tool error sent back to the model when a finish_with tool's output (after its
    transform) does not match the agent's output schema."""
    return (
        f"Invalid output from {tool_name}: {details}. The task is not complete: "
        f"call {tool_name} again so that its output matches the output schema."
    )


_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n(.*?)\n?```$", re.DOTALL)


def parse_json_reply(text: str) -> Any:
    """The JSON value a reply holds: the whole text, a fenced block, or the outermost
    `{...}` in it. Raises `ValueError` saying why there is none."""
    stripped = text.strip()
    if not stripped:
        raise ValueError("the reply is empty, expected a JSON object")
    fenced = _FENCE.match(stripped)
    candidates = [fenced.group(1).strip()] if fenced else [stripped]
    start, end = stripped.find("{"), stripped.rfind("}")
    if start != -1 and end > start:
        candidates.append(stripped[start : end + 1])
    error: json.JSONDecodeError | None = None
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError as exc:
            error = error or exc
    raise ValueError(f"the reply is not valid JSON ({error})")


def reply_validation_message(details: str) -> str:
    """The correction sent to the model when its reply is not the output (native and
    prompted modes): a user message, since there is no tool call to answer."""
    return (
        f"Your reply is not valid output: {details}. "
        "Reply again with only a JSON object that matches the output schema."
    )
