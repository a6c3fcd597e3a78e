"""Where a transcript may be cut: never between a tool call and its result.

A cut at index `c` keeps `messages[c:]`. It is safe when no assistant message before `c`
has a call answered at or after `c`: an assistant message with tool calls and the results
that answer them stay together or go together, even when other messages (a steering
message, a companion's notice) sit between them.
"""

from __future__ import annotations

from collections.abc import Sequence

from helix_dbos.orchestration.types import Message


def safe_cuts(messages: Sequence[Message]) -> list[bool]:
    """`safe[c]` for every `c` in `0..len(messages)`: whether cutting there splits no pair."""
    answered_at: dict[str, int] = {}
    for i, m in enumerate(messages):
        if m.role == "tool" and m.tool_call_id is not None:
            answered_at.setdefault(m.tool_call_id, i)
    # +1 where a call's span opens (just after the call), -1 just after its last result.
    delta = [0] * (len(messages) + 2)
    for i, m in enumerate(messages):
        if m.role != "assistant" or not m.tool_calls:
            continue
        last = max((answered_at.get(c.id, i) for c in m.tool_calls), default=i)
        if last > i:
            delta[i + 1] += 1
            delta[last + 1] -= 1
    safe, open_spans = [], 0
    for c in range(len(messages) + 1):
        open_spans += delta[c]
        safe.append(open_spans == 0)
    return safe


def turn_starts(messages: Sequence[Message], safe: Sequence[bool]) -> list[int]:
    """Indices where a turn starts (a user message) and a cut is safe, ascending."""
    return [i for i, m in enumerate(messages) if m.role == "user" and safe[i]]


def unit_starts(messages: Sequence[Message], safe: Sequence[bool], after: int) -> list[int]:
    """Safe cuts after `after` that keep the transcript's alternation when they follow a
    user message: the kept part starts with an assistant message."""
    return [
        i for i in range(after + 1, len(messages)) if safe[i] and messages[i].role == "assistant"
    ]
