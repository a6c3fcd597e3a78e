"""Terminating tool calls (seed 004), pure rules.

Named tools end the run with their output. In a response with several calls,
the calls run in order up to the first terminating one; the rest are neither
executed nor kept in the stored assistant message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helix_dbos.orchestration.messages import to_json_text
from helix_dbos.orchestration.types import Message, ToolCall

MAX_INVOCATIONS_ERROR = "Max invocations exceeded"


def truncate_at_terminating(
    calls: Sequence[ToolCall], tool_ids: Sequence[str]
) -> tuple[list[ToolCall], ToolCall | None]:
    """The calls to execute (up to and including the first terminating one) and that call."""
    for index, call in enumerate(calls):
        if call.name in tool_ids:
            return list(calls[: index + 1]), call
    return list(calls), None


def response_text(output: Any) -> str:
    """The `response` field: the terminating tool's output as a string."""
    return to_json_text(output)


def generated_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """A run's transcript in seed 004's `generated_messages` shape.

    A user message that comes after the run's first model reply was injected by the
    runtime (a nudge, a max_tokens correction), not written by a human: it is
    `{"sender": "system", ...}`.
    """
    out: list[dict[str, Any]] = []
    replied = False
    for m in messages:
        if m.role == "user":
            sender = "system" if replied else "human"
            out.append({"sender": sender, "message": m.content or ""})
        elif m.role == "system":
            out.append({"sender": "system", "message": m.content or ""})
        elif m.role == "assistant":
            replied = True
            if m.content:
                out.append({"sender": "ai", "message": m.content})
            out.extend(
                {
                    "type": "tool_call",
                    "tool_call_id": c.id,
                    "tool_name": c.name,
                    "tool_input": c.arguments,
                }
                for c in m.tool_calls
            )
        elif m.role == "tool":
            out.append(
                {"type": "tool_response", "tool_call_id": m.tool_call_id, "tool_output": m.content}
            )
    return out
