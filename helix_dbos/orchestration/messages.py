"""Message builders and the transcript invariants (seed 001), pure functions.

Invariant: persisted history never holds a tool call without its result.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from helix_dbos.orchestration.parts import Attachment
from helix_dbos.orchestration.types import (
    FINISH_TOOL_NAME,
    SUBAGENT_PREFIX,
    Message,
    SubAgentCall,
    ThinkingBlock,
    ToolCall,
)

FINISH_ACK: dict[str, bool] = {"acknowledged": True}


class AssistantMessagePlan(BaseModel):
    content: str | None = None
    tool_calls: list[ToolCall] = []
    sub_agent_calls: list[SubAgentCall] = []
    thinking: list[ThinkingBlock] = []


def to_json_text(value: Any) -> str:
    """Tool results are stored as JSON text; strings stay as they are."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, default=str, separators=(",", ":"))


def sub_agent_tool_call(call: SubAgentCall) -> ToolCall:
    """A seed-001 sub-agent call as the `subagent__<type>` tool call it is stored as."""
    return ToolCall(id=call.id, name=f"{SUBAGENT_PREFIX}{call.agent_type}", arguments=call.input)


def create_assistant_message(plan: AssistantMessagePlan) -> Message:
    """Sub-agent calls are stored as tool calls named `subagent__<type>`."""
    calls = list(plan.tool_calls) + [sub_agent_tool_call(s) for s in plan.sub_agent_calls]
    return Message(role="assistant", content=plan.content, tool_calls=calls, thinking=plan.thinking)


def create_tool_result_message(
    tool_call_id: str,
    tool_name: str,
    *,
    result: Any = None,
    success: bool = True,
    error: str | None = None,
    attachments: Sequence[Attachment] = (),
) -> Message:
    content = to_json_text(result) if success else (error or "Tool failed")
    return Message(
        role="tool",
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        content=content,
        is_error=not success,
        attachments=list(attachments) if success else [],
    )


def create_subagent_result_message(
    tool_call_id: str,
    agent_type: str,
    *,
    result: Any = None,
    success: bool = True,
    error: str | None = None,
) -> Message:
    return create_tool_result_message(
        tool_call_id, f"{SUBAGENT_PREFIX}{agent_type}", result=result, success=success, error=error
    )


def synthesize_finish_tool_result(tool_call_id: str) -> Message:
    """The fixed `{"acknowledged": true}` result that pairs a `__finish__` call."""
    return create_tool_result_message(tool_call_id, FINISH_TOOL_NAME, result=FINISH_ACK)


def find_unpaired_tool_calls(messages: Sequence[Message]) -> list[ToolCall]:
    """Tool calls in history that have no tool result, in transcript order."""
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    return [
        call
        for m in messages
        if m.role == "assistant"
        for call in m.tool_calls
        if call.id not in answered
    ]


def find_unpaired_finish_call_id(messages: Sequence[Message]) -> str | None:
    """The id of a `__finish__` call left without its result by older code, if any."""
    for call in find_unpaired_tool_calls(messages):
        if call.name == FINISH_TOOL_NAME:
            return call.id
    return None


def heal_unpaired_finish(messages: Sequence[Message]) -> list[Message]:
    """Messages to append so a reopened session has no dangling `__finish__`."""
    call_id = find_unpaired_finish_call_id(messages)
    return [synthesize_finish_tool_result(call_id)] if call_id else []


def pair_dangling_tool_calls(messages: Sequence[Message], error: str) -> list[Message]:
    """Error results for every unanswered call (abort, crash heal)."""
    out: list[Message] = []
    for call in find_unpaired_tool_calls(messages):
        if call.name == FINISH_TOOL_NAME:
            out.append(synthesize_finish_tool_result(call.id))
        else:
            out.append(create_tool_result_message(call.id, call.name, success=False, error=error))
    return out


def build_messages_for_llm(
    messages: Sequence[Message],
    system_prompt: str | Callable[[Any], str],
    custom_state: Any,
) -> list[Message]:
    """Resolve a dynamic prompt against the state and put it first."""
    without_system = [m for m in messages if m.role != "system"]
    return with_system_prompt(without_system, system_prompt, custom_state)


def with_system_prompt(
    without_system: Sequence[Message],
    system_prompt: str | Callable[[Any], str],
    custom_state: Any,
) -> list[Message]:
    """`build_messages_for_llm` for messages that hold no system message already (a
    `Transcript`'s `for_llm`): no walk of the transcript in Python."""
    prompt = system_prompt(custom_state) if callable(system_prompt) else system_prompt
    head = [Message(role="system", content=prompt)] if prompt else []
    return head + list(without_system)
