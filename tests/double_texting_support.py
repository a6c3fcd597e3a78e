"""Fixtures of the double-texting tests: a run held live at a gate, a scripted model."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from helix_dbos import MockLLM, ToolContext, tool
from helix_dbos.orchestration.types import LLMRequest


class Gate:
    """A tool that blocks its run until released: the run stays live meanwhile."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

        @tool
        def gate() -> str:
            """Wait until released."""
            self.entered.set()
            self.release.wait(60)
            return "opened"

        @tool
        def bump(ctx: ToolContext) -> str:
            """Add one to the counter."""
            ctx.update_state(lambda s: {**s, "n": s.get("n", 0) + 1})
            return "bumped"

        self.tool = gate
        self.bump = bump

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 30), "the run never reached its gate"


def last_user(request: LLMRequest) -> str:
    return next(m.content or "" for m in reversed(request.messages) if m.role == "user")


def responder(request: LLMRequest) -> dict[str, Any]:
    """`gate` for "hold", `bump` then `gate` for "bump then hold", else a text reply
    naming the last user message (so each run's answer shows what it was asked)."""
    last = request.messages[-1]
    said = last_user(request)
    if last.role == "user" and said == "hold":
        return {"type": "tool_calls", "tool_calls": [{"id": "g", "name": "gate", "arguments": {}}]}
    if said == "bump then hold" and last.role == "user":
        return {"type": "tool_calls", "tool_calls": [{"id": "b", "name": "bump", "arguments": {}}]}
    if said == "bump then hold" and last.tool_name == "bump":
        return {"type": "tool_calls", "tool_calls": [{"id": "g", "name": "gate", "arguments": {}}]}
    return {"type": "text", "content": f"re: {said}"}


@pytest.fixture
def scripted(mock_llm: MockLLM) -> Iterator[MockLLM]:
    mock_llm.set_responder(responder)
    yield mock_llm
    mock_llm.set_responder(None)


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.release.set()
