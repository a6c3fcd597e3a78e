"""Which of a step's messages carries which of its usage records (migration 0027).

A step's LLM call's usage rides on the step's assistant message and each tool call's on
the call's result message, so the step writes no `helix.usage` row of its own for them.
The choice depends only on the step's rows, so the head write and the step write (and a
replay of either) agree on it: the step write skips the head's message, and its usage
with it, when the head went first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class _Message(Protocol):
    @property
    def role(self) -> str: ...

    @property
    def tool_call_id(self) -> str | None: ...

    @property
    def tool_name(self) -> str | None: ...


class _Usage(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def step(self) -> int: ...

    @property
    def tool_call_id(self) -> str | None: ...

    @property
    def tool_name(self) -> str | None: ...


def usage_carriers(
    messages: Sequence[_Message], usage: Sequence[_Usage], step: int
) -> list[int | None]:
    """For each usage record, the index of the message that carries it (None: it gets a
    row of its own). The `llm` record goes on the step's first message when that is the
    model's (the head); a tool call's record on the result of that call. A message
    carries one record at most, only of the step being written, and only one whose
    tool_name is its own: the message's column is the usage's (migration 0027)."""
    taken: set[int] = set()
    result_of = {
        m.tool_call_id: i
        for i, m in reversed(list(enumerate(messages)))
        if m.role == "tool" and m.tool_call_id is not None
    }
    carriers: list[int | None] = []
    for record in usage:
        index: int | None = None
        if record.step != step:
            index = None
        elif record.kind == "llm" and record.tool_call_id is None:
            index = 0 if messages and messages[0].role == "assistant" else None
        elif record.tool_call_id is not None:
            index = result_of.get(record.tool_call_id)
        if index is not None and (index in taken or messages[index].tool_name != record.tool_name):
            index = None
        if index is not None:
            taken.add(index)
        carriers.append(index)
    return carriers
