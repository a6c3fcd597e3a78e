"""Lifecycle hooks. Each receives one event object and may be sync or async.

Every hook fires inside a durable step that exists anyway, so a completed step never
fires its hooks again after a crash (one that had not completed runs again, hooks and
all). One agent step fires, in this order (seed 002's canonical order):

    on_agent_start (first step of a run)
    on_message for the previous step's nudges and corrections
    before_llm_call -> the model -> after_llm_call    (the `helix.llm` step)
    on_message for the model's message
    per tool call: before_tool -> execute -> on_state_change -> on_message -> after_tool
    on_agent_suspended / on_agent_resumed around a wait, and at the end
    on_agent_complete or on_agent_failed.

Hooks of the LLM and tool steps can change the session state through their context
(`event.context.update_state(...)`); the change is part of that step's checkpointed
output and is committed with the agent step, like a tool's.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from helix_dbos.definitions.tool_context import ToolContext
from helix_dbos.errors import StateUpdateError
from helix_dbos.log_events import HOOK_FAILED, log_event
from helix_dbos.orchestration.types import LLMRequest, LLMUsage, Message, StepResult, ToolCall

Hook = Callable[[Any], None | Awaitable[None]]


@dataclass(frozen=True)
class HookContext:
    """Who fires the hook; `state` is the session state the step works on, if the hook
    may change it (the LLM step's and tool steps' hooks)."""

    session_id: str
    run_id: str
    agent_name: str
    step: int
    state: ToolContext | None = field(default=None, repr=False, compare=False)

    def get_state(self) -> Any:
        """A copy of the session state (a `state_schema` instance, or a dict)."""
        if self.state is None:
            raise StateUpdateError("This hook has no session state")
        return self.state.get_state()

    def update_state(self, update: Callable[[Any], Any] | dict[str, Any] | BaseModel) -> None:
        """Change the session state, as `ToolContext.update_state` does; the change is
        committed with the step the hook fires in."""
        if self.state is None:
            raise StateUpdateError(
                "This hook cannot change the state: only hooks of the LLM and tool steps can"
            )
        self.state.update_state(update)


@dataclass(frozen=True)
class LLMCallEvent:
    """before_llm_call (no result yet) and after_llm_call (`result`, or `error` when the
    call failed and DBOS retries the step: each attempt is one call)."""

    context: HookContext
    request: LLMRequest
    attempt: int = 1
    result: StepResult | None = None
    error: str | None = None
    duration_ms: float | None = None

    @property
    def usage(self) -> LLMUsage | None:
        return self.result.usage if self.result is not None else None


@dataclass(frozen=True)
class ToolEvent:
    context: HookContext
    call: ToolCall
    success: bool | None = None
    result: Any = None
    error: str | None = None
    duration_ms: float | None = None


@dataclass(frozen=True)
class StateChangeEvent:
    context: HookContext
    old_state: dict[str, Any]
    new_state: dict[str, Any]
    tool_name: str | None = None


@dataclass(frozen=True)
class MessageEvent:
    context: HookContext
    message: Message


@dataclass(frozen=True)
class RunEvent:
    """on_agent_start / on_agent_complete / on_agent_suspended / on_agent_resumed /
    on_agent_failed."""

    context: HookContext
    status: str
    output: Any = None
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentHooks:
    on_agent_start: Hook | None = None
    before_llm_call: Hook | None = None
    after_llm_call: Hook | None = None
    before_tool: Hook | None = None
    after_tool: Hook | None = None
    on_state_change: Hook | None = None
    on_message: Hook | None = None
    on_agent_complete: Hook | None = None
    on_agent_failed: Hook | None = None
    on_agent_suspended: Hook | None = None
    on_agent_resumed: Hook | None = None


async def fire(hook: Hook | None, event: Any) -> None:
    """Call a hook if set, awaiting it when it is async."""
    if hook is None:
        return
    outcome = hook(event)
    if inspect.isawaitable(outcome):
        await outcome


async def fire_safely(hook: Hook | None, event: Any) -> None:
    """Hooks observe; a failing hook is logged and never breaks the run."""
    try:
        await fire(hook, event)
    except Exception as exc:
        context = getattr(event, "context", None)
        log_event(
            HOOK_FAILED,
            logging.ERROR,
            f"hook {getattr(hook, '__name__', repr(hook))} raised {type(exc).__name__}: {exc}",
            exc_info=True,
            hook=getattr(hook, "__name__", repr(hook)),
            event_type=type(event).__name__,
            error=f"{type(exc).__name__}: {exc}",
            run_id=getattr(context, "run_id", None),
            session_id=getattr(context, "session_id", None),
            agent_name=getattr(context, "agent_name", None),
            step=getattr(context, "step", None),
        )
