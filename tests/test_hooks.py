"""Hooks (seed 002): the canonical order across one run, on_message for the model's
messages and nudges, LLM call hooks per attempt, and state changed through the hook
context, committed with the step the hook fires in."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from helix_dbos import AgentHooks, ToolContext, tool
from helix_dbos.definitions.agent import LLMConfig
from helix_dbos.errors import StateUpdateError
from helix_dbos.llm.base import LLMProviderError


def recorder(log: list[str]) -> AgentHooks:
    """Hooks that append `name:step[:detail]` for every event."""

    def hook(name: str):
        def fire(event) -> None:
            detail = ""
            if hasattr(event, "call"):
                detail = event.call.id
            elif hasattr(event, "message"):
                detail = event.message.role
            elif hasattr(event, "request"):
                detail = f"attempt{event.attempt}"
                if name == "after_llm_call":
                    detail += ":" + ("error" if event.error else event.result.type)
            log.append(f"{name}:{event.context.step}" + (f":{detail}" if detail else ""))

        return fire

    names = [
        "on_agent_start",
        "before_llm_call",
        "after_llm_call",
        "before_tool",
        "after_tool",
        "on_state_change",
        "on_message",
        "on_agent_complete",
        "on_agent_failed",
    ]
    return AgentHooks(**{n: hook(n) for n in names})


@tool
def bump(ctx: ToolContext) -> str:
    """Bump a counter."""
    ctx.update_state({"bumped": True})
    return "ok"


async def test_one_run_fires_every_hook_once_in_canonical_order(helix, make_agent, mock_llm):
    log: list[str] = []
    agent = make_agent(tools=[bump], hooks=recorder(log))
    mock_llm.add_responses(
        {"type": "tool_calls", "tool_calls": [{"id": "b1", "name": "bump", "arguments": {}}]},
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "completed"
    assert log == [
        "on_agent_start:1",
        "before_llm_call:1:attempt1",
        "after_llm_call:1:attempt1:tool_calls",
        "on_message:1:assistant",
        "before_tool:1:b1",
        "on_state_change:1",
        "on_message:1:tool",
        "after_tool:1:b1",
        "before_llm_call:2:attempt1",
        "after_llm_call:2:attempt1:text",
        "on_message:2:assistant",
        "on_agent_complete:2",
    ]


class Answer(BaseModel):
    value: int


async def test_a_nudge_fires_on_message_before_the_next_llm_call(helix, make_agent, mock_llm):
    log: list[str] = []
    agent = make_agent(output_schema=Answer, hooks=recorder(log))
    mock_llm.add_responses(
        {"type": "text", "content": "just text"},
        {
            "type": "tool_calls",
            "tool_calls": [{"id": "f", "name": "__finish__", "arguments": {"value": 3}}],
        },
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "answer")).result()
    assert result.status == "completed" and result.output == {"value": 3}
    assert log == [
        "on_agent_start:1",
        "before_llm_call:1:attempt1",
        "after_llm_call:1:attempt1:text",
        "on_message:1:assistant",
        "on_message:2:user",  # the nudge, fired in the step that writes it
        "before_llm_call:2:attempt1",
        "after_llm_call:2:attempt1:tool_calls",
        "on_message:2:assistant",
        "on_message:2:tool",  # __finish__'s synthesized result, written with the run's end
        "on_agent_complete:2",
    ]


async def test_hooks_change_state_and_it_is_committed_with_their_step(helix, make_agent, mock_llm):
    seen_by_tool: list[dict] = []

    @tool
    def look(ctx: ToolContext) -> str:
        """Look at the state."""
        seen_by_tool.append(ctx.get_state())
        return "seen"

    def start(event) -> None:
        event.context.update_state({"started": True, "calls": 0})

    def after_llm(event) -> None:
        event.context.update_state(lambda s: {**s, "calls": s["calls"] + 1})

    def before_tool(event) -> None:
        event.context.update_state({"before_tool": event.call.id})

    def after_tool(event) -> None:
        event.context.update_state({"after_tool": event.call.id})

    rejected: list[str] = []

    def complete(event) -> None:
        try:
            event.context.update_state({"late": True})
        except StateUpdateError as exc:
            rejected.append(str(exc))

    hooks = AgentHooks(
        on_agent_start=start,
        after_llm_call=after_llm,
        before_tool=before_tool,
        after_tool=after_tool,
        on_agent_complete=complete,
    )
    agent = make_agent(tools=[look], hooks=hooks)
    mock_llm.add_responses(
        {"type": "tool_calls", "tool_calls": [{"id": "l1", "name": "look", "arguments": {}}]},
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "completed"
    # The tool sees what the LLM step's hooks and its own before_tool set.
    assert seen_by_tool == [{"started": True, "calls": 1, "before_tool": "l1"}]
    session = await helix.get_session(result.session_id)
    assert session.state == {"started": True, "calls": 2, "before_tool": "l1", "after_tool": "l1"}
    assert rejected and "cannot change the state" in rejected[0]
    # The model of step 2 was asked with the state as step 1's hooks and tool left it.
    assert mock_llm.inputs[-1].agent_name == agent.name


async def test_a_state_change_by_the_llm_step_alone_is_committed(helix, make_agent, mock_llm):
    """No tool runs: the state comes only from the LLM step's hooks."""
    agent = make_agent(
        hooks=AgentHooks(before_llm_call=lambda e: e.context.update_state({"asked": e.attempt}))
    )
    mock_llm.add_response({"type": "text", "content": "hi"}, agent=agent.name)
    result = await (await helix.execute(agent, "hi")).result()
    assert (await helix.get_session(result.session_id)).state == {"asked": 1}


async def test_llm_call_hooks_fire_per_attempt_and_start_hooks_once(helix, make_agent, mock_llm):
    log: list[str] = []
    hooks = recorder(log)
    counted = AgentHooks(
        **{
            **{k: getattr(hooks, k) for k in hooks.__dataclass_fields__},
            "on_agent_start": lambda e: (
                log.append("on_agent_start"),
                e.context.update_state({"n": 1}),
            ),
        }
    )
    agent = make_agent(hooks=counted, llm=LLMConfig(max_attempts=3, retry_interval_seconds=0.01))
    attempts = 0

    def flaky(request):
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise LLMProviderError("503 overloaded", retryable=True, status_code=503)
        return {"type": "text", "content": "second time lucky"}

    mock_llm.set_responder(flaky)
    try:
        result = await asyncio.wait_for((await helix.execute(agent, "hi")).result(), 30)
    finally:
        mock_llm.set_responder(None)
    assert result.status == "completed"
    assert log == [
        "on_agent_start",
        "before_llm_call:1:attempt1",
        "after_llm_call:1:attempt1:error",
        "before_llm_call:1:attempt2",
        "after_llm_call:1:attempt2:text",
        "on_message:1:assistant",
        "on_agent_complete:1",
    ]
    # on_agent_start's change, made on the first attempt, survives the retry.
    assert (await helix.get_session(result.session_id)).state == {"n": 1}
