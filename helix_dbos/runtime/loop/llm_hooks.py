"""The hooks that fire inside the `helix.llm` step, sharing one session state.

on_agent_start (a run's first step), on_message for the previous step's messages made
in workflow code (nudges, corrections), before_llm_call, after_llm_call and on_message
for the model's message. Their state changes are returned with the step's
checkpoint (`ModelReply.state_changed`), so they are committed with the agent step.

DBOS retries the step on a retryable provider error: each attempt is one model call
with its own before/after_llm_call, while the hooks before the first call fire once;
their state is carried to the next attempt in this process (a crash re-runs the step
from its first attempt, hooks and all).
"""

from __future__ import annotations

from typing import Any

from dbos import DBOS

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.hooks import (
    AgentHooks,
    HookContext,
    LLMCallEvent,
    MessageEvent,
    RunEvent,
    fire_safely,
)
from helix_dbos.definitions.tool_context import ToolContext
from helix_dbos.orchestration.types import LLMRequest, Message, StepResult

# State after the first attempt's opening hooks, for the step's later attempts.
_carried: dict[str, dict[str, Any]] = {}


def attempt_number() -> int:
    """This attempt of the running step, from 1."""
    status = DBOS.step_status
    if status is None or status.current_attempt is None:
        return 1
    return status.current_attempt + 1


def is_last_attempt() -> bool:
    status = DBOS.step_status
    return status is None or status.max_attempts is None or attempt_number() >= status.max_attempts


class LLMStepHooks:
    """One LLM step's hooks and the state they may change."""

    def __init__(
        self, agent: Agent, session_id: str, run_id: str, step: int, state: dict[str, Any]
    ) -> None:
        self.hooks: AgentHooks = agent.hooks
        self.key = f"{run_id}:{step}"
        self.attempt = attempt_number()
        self.before = state
        if self.attempt > 1:
            state = _carried.get(self.key, state)
        self.ctx = ToolContext(
            session_id=session_id,
            run_id=run_id,
            agent_name=agent.name,
            step=step,
            state=state,
            state_schema=agent.state_schema,
        )
        self.context = HookContext(session_id, run_id, agent.name, step, state=self.ctx)

    @property
    def state(self) -> dict[str, Any]:
        return self.ctx.state_dict

    @property
    def changed(self) -> bool:
        return self.state != self.before

    async def open(self, previous_messages: list[Message]) -> None:
        """Before the first call: on_agent_start, and on_message for the previous step's
        messages made in workflow code."""
        if self.attempt > 1:
            return
        if self.context.step == 1:
            await fire_safely(self.hooks.on_agent_start, RunEvent(self.context, "running"))
        for message in previous_messages:
            await fire_safely(self.hooks.on_message, MessageEvent(self.context, message))
        _carried[self.key] = self.state

    async def before_call(self, request: LLMRequest) -> None:
        await fire_safely(
            self.hooks.before_llm_call, LLMCallEvent(self.context, request, self.attempt)
        )

    async def after_call(
        self,
        request: LLMRequest,
        duration_ms: float,
        *,
        result: StepResult | None = None,
        error: str | None = None,
    ) -> None:
        event = LLMCallEvent(self.context, request, self.attempt, result, error, duration_ms)
        await fire_safely(self.hooks.after_llm_call, event)

    async def message(self, message: Message | None) -> None:
        if message is not None:
            await fire_safely(self.hooks.on_message, MessageEvent(self.context, message))

    def done(self, *, retrying: bool = False) -> None:
        """The step ends (`retrying`: this attempt failed and DBOS tries again)."""
        if not retrying or is_last_attempt():
            _carried.pop(self.key, None)


async def announce(agent: Agent, context: HookContext, messages: list[Message]) -> None:
    """on_message for messages whose step has no state to change (a run's last write)."""
    for message in messages:
        await fire_safely(agent.hooks.on_message, MessageEvent(context, message))
