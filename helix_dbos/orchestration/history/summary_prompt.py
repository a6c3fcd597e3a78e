"""The request that asks a model for a summary: the older part of the transcript written
out as plain text (so a provider never sees a tool result without its call), on top of
the previous summary."""

from __future__ import annotations

import json
from collections.abc import Sequence

from helix_dbos.orchestration.types import Message

#: Each message is cut to this many characters in the summary request.
MAX_MESSAGE_CHARS = 4000
#: The first line of a summary request's user message (`is_summary_request`).
SUMMARY_REQUEST_HEADER = "Summarise the conversation below."


def summary_messages(
    instructions: str, previous: str, messages: Sequence[Message]
) -> list[Message]:
    """System instructions, then one user message holding the conversation to summarise."""
    lines = [SUMMARY_REQUEST_HEADER]
    if previous:
        lines.append(f"Summary so far:\n{previous}\n")
    lines.append("Conversation:")
    lines += [_line(m) for m in messages]
    return [
        Message(role="system", content=instructions),
        Message(role="user", content="\n".join(lines)),
    ]


def _line(m: Message) -> str:
    if m.role == "tool":
        text = f"[tool {m.tool_name or ''} {'failed' if m.is_error else 'returned'}] "
        return _cut(text + (m.content or ""))
    text = f"{m.role}: {m.content or ''}"
    for call in m.tool_calls:
        args = json.dumps(call.arguments, separators=(",", ":"), default=str)
        text += f"\n  [calls {call.name}({args})]"
    return _cut(text)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + " [...]"


def is_summary_request(messages: Sequence[Message]) -> bool:
    """Whether a request's messages ask for a summary (a scripted model tells them apart
    from the agent's own calls with it)."""
    last = messages[-1] if messages else None
    return (
        last is not None
        and last.role == "user"
        and (last.content or "").startswith(SUMMARY_REQUEST_HEADER)
    )
