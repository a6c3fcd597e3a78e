"""Lifecycle hooks. Each receives one event object and may be sync or async.

Tool hooks fire inside the tool's durable step, in the order
before_tool -> execute -> on_state_change -> on_message -> after_tool,
so a completed step never fires them again after a crash.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from helix_dbos.log_events import HOOK_FAILED, log_event
from helix_dbos.orchestration.types import Message, ToolCall

Hook = Callable[[Any], None | Awaitable[None]]


@dataclass(frozen=True)
class HookContext:
    session_id: str
    run_id: str
    agent_name: str
    step: int


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
    """on_agent_complete / on_agent_suspended / on_agent_resumed / on_agent_failed."""

    context: HookContext
    status: str
    output: Any = None
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentHooks:
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
