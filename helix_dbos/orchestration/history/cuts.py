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


class SafeCuts:
    """`safe_cuts` kept as a transcript grows: `flags` is `safe_cuts(messages)` after
    each `extend`, each message looked at once. A call's span only ever grows (its first
    answer arrives), so a cut turns unsafe and never back: an answer marks the cuts
    between its call and itself, as `safe_cuts` does from the whole list."""

    __slots__ = ("_answered_at", "_reach", "_waiting", "flags")

    def __init__(self) -> None:
        self.flags: list[bool] = [True]  # the cut before the first message
        self._answered_at: dict[str, int] = {}  # a call id's first result
        self._waiting: dict[str, list[int]] = {}  # calls not answered yet: their messages
        self._reach: dict[int, int] = {}  # an assistant message: the end of its span

    def extend(self, messages: Sequence[Message]) -> None:
        for m in messages:
            i = len(self.flags) - 1  # this message's index
            self.flags.append(True)
            if m.role == "tool" and m.tool_call_id is not None:
                if m.tool_call_id not in self._answered_at:
                    self._answered_at[m.tool_call_id] = i
                    for caller in self._waiting.pop(m.tool_call_id, ()):
                        self._span(caller, i)
            elif m.role == "assistant" and m.tool_calls:
                for call in m.tool_calls:
                    if call.id not in self._answered_at:  # else answered before: no span
                        self._waiting.setdefault(call.id, []).append(i)

    def _span(self, caller: int, last: int) -> None:
        """The cuts after `caller` up to `last` split its call from a result."""
        reach = self._reach.get(caller, caller)
        for c in range(reach + 1, last + 1):
            self.flags[c] = False
        self._reach[caller] = max(reach, last)


def turn_starts(messages: Sequence[Message], safe: Sequence[bool]) -> list[int]:
    """Indices where a turn starts (a user message) and a cut is safe, ascending."""
    return [i for i, m in enumerate(messages) if m.role == "user" and safe[i]]


def unit_starts(messages: Sequence[Message], safe: Sequence[bool], after: int) -> list[int]:
    """Safe cuts after `after` that keep the transcript's alternation when they follow a
    user message: the kept part starts with an assistant message."""
    return [
        i for i in range(after + 1, len(messages)) if safe[i] and messages[i].role == "assistant"
    ]
