"""The early-taken step (`runtime/loop/step_ahead.py`) on the real runtime with a scripted
LLM: each reply is planned once, a step with no tool is taken in the LLM step, and a
run's final write starts there only when nothing follows it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from helix_dbos import AgentHooks, tool
from helix_dbos.runtime.loop import reply_plan, step_ahead


@tool
def ping() -> str:
    """Answer at once."""
    return "pong"


class Out(BaseModel):
    value: int


def count_plans(monkeypatch) -> list[Any]:
    plans: list[Any] = []
    real = reply_plan.plan_step_processing

    def counted(result, **options):
        plans.append(result)
        return real(result, **options)

    monkeypatch.setattr(reply_plan, "plan_step_processing", counted)
    return plans


def count_early_writes(monkeypatch) -> list[int]:
    steps: list[int] = []
    real = step_ahead.write_final

    async def counted(commit, unwritten, notify):
        steps.append(commit.step)
        return await real(commit, unwritten, notify)

    monkeypatch.setattr(step_ahead, "write_final", counted)
    return steps


async def test_each_reply_is_planned_once_even_with_an_on_message_hook(
    helix, make_agent, mock_llm, monkeypatch
):
    said: list[str] = []
    agent = make_agent(
        tools=[ping], hooks=AgentHooks(on_message=lambda e: said.append(e.message.role))
    )
    mock_llm.add_responses(
        {"type": "tool_calls", "tool_calls": [{"id": "p1", "name": "ping", "arguments": {}}]},
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    plans = count_plans(monkeypatch)
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "completed" and result.output == "done"
    assert len(plans) == 2  # one per model reply: the hook's plan is the step's
    assert said == ["assistant", "tool", "assistant"]


async def test_a_quiet_end_is_written_from_the_llm_step(helix, make_agent, mock_llm, monkeypatch):
    agent = make_agent(tools=[ping])
    mock_llm.add_responses(
        {"type": "tool_calls", "tool_calls": [{"id": "p1", "name": "ping", "arguments": {}}]},
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    early = count_early_writes(monkeypatch)
    result = await (await helix.execute(agent, "go")).result()
    assert (result.status, result.output, result.step_count) == ("completed", "done", 2)
    assert early == [2]  # the step with a tool was taken in workflow code


async def test_an_end_with_a_hook_after_it_is_written_by_the_workflow(
    helix, make_agent, mock_llm, monkeypatch
):
    completed: list[Any] = []
    agent = make_agent(hooks=AgentHooks(on_agent_complete=lambda e: completed.append(e.output)))
    mock_llm.add_response({"type": "text", "content": "done"}, agent=agent.name)
    early = count_early_writes(monkeypatch)
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "completed"
    assert completed == ["done"]
    assert early == []


async def test_a_step_cap_reached_by_a_nudged_reply_ends_the_run_early_and_failed(
    helix, make_agent, mock_llm, monkeypatch
):
    """The policy decides the cap with the step, so the early take ends such a run too;
    the run's rows are those of its steps, and its result is the cap's error."""
    agent = make_agent(output_schema=Out, max_steps=2, max_consecutive_nudges=5)
    mock_llm.add_responses(
        {"type": "text", "content": "one"}, {"type": "text", "content": "two"}, agent=agent.name
    )
    early = count_early_writes(monkeypatch)
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "failed" and result.error is not None
    assert result.error.startswith("Max invocations exceeded: the agent reached max_steps=2")
    assert result.step_count == 2
    assert early == [2]
    roles = [m.role for m in await helix.get_messages(result.session_id)]
    assert roles == ["user", "assistant", "user", "assistant", "user"]  # each nudge kept
