"""Custom stop conditions (seed 001 `stopWhen`): `Agent(stop_when=fn(step_result, state))`,
evaluated after each step on the real runtime with a scripted LLM."""

from __future__ import annotations

from typing import Any

from helpers import calls, sql
from pydantic import BaseModel

from helix_dbos import MockLLM, ToolContext, tool
from helix_dbos.orchestration.types import StepResult, ToolCallsStepResult
from helix_dbos.runtime.steps.results import AgentResult
from helix_dbos.streaming.chunks import RunStopped


class Counter(BaseModel):
    hits: int = 0


@tool
def hit(ctx: ToolContext) -> int:
    """Count a hit in the state."""
    state = ctx.get_state()
    hits = (state.hits if isinstance(state, Counter) else state.get("hits", 0)) + 1
    ctx.update_state({"hits": hits})
    return hits


def hit_call(call_id: str, content: str | None = None) -> dict:
    return calls((call_id, "hit", {}), content=content)


async def test_stop_when_sees_the_state_after_the_step_and_ends_the_run(
    helix, make_agent, mock_llm: MockLLM, database_url
):
    seen: list[tuple[str, int]] = []

    def enough(result: StepResult, state: Counter) -> bool:
        seen.append((result.type, state.hits))
        return state.hits >= 2

    agent = make_agent(tools=[hit], state_schema=Counter, stop_when=enough)
    mock_llm.add_responses(
        hit_call("h1"), hit_call("h2", "second hit"), hit_call("h3"), agent=agent.name
    )
    calls_before = mock_llm.call_count
    result = await (await helix.execute(agent, "go")).result()

    assert result.status == "completed" and result.stop_reason == "stop_when", result.error
    assert result.output == "second hit" and result.step_count == 2
    assert seen == [("tool_calls", 1), ("tool_calls", 2)]
    assert mock_llm.call_count - calls_before == 2, "no third model call"
    chunks = sql(
        database_url,
        "SELECT payload FROM helix.stream_chunks WHERE run_id = %s AND type = 'run_stopped'",
        result.run_id,
    )
    assert chunks == [({"reason": "stop_when", "step": 2},)]
    streamed = [c async for c in helix.stream(result.session_id, run_id=result.run_id)]
    stopped = [c for c in streamed if c.type == "run_stopped"]
    assert [c.data for c in stopped] == [RunStopped(reason="stop_when", step=2)]
    assert streamed[-1].type == "run_completed"
    messages = await helix.get_messages(result.session_id)
    assert messages[-1].role == "tool" and messages[-1].tool_call_id == "h2"
    assert (await helix.get_session(result.session_id)).state == {"hits": 2}


async def test_stop_when_on_the_step_result_with_an_output_schema_makes_no_output(
    helix, make_agent, mock_llm: MockLLM
):
    class Report(BaseModel):
        text: str

    def after_any_tool(result: StepResult, state: dict[str, Any]) -> bool:
        return isinstance(result, ToolCallsStepResult) and result.tool_calls[0].name == "hit"

    agent = make_agent(tools=[hit], output_schema=Report, stop_when=after_any_tool)
    mock_llm.add_response(hit_call("h1", "hitting"), agent=agent.name)
    result = await (await helix.execute(agent, "go")).result()

    assert result.status == "completed" and result.stop_reason == "stop_when"
    assert result.output is None, "no output is made up for the schema"


async def test_a_finished_run_is_not_stopped_and_a_raising_condition_fails_the_run(
    helix, make_agent, mock_llm: MockLLM
):
    asked: list[str] = []

    def never(result: StepResult, state: dict[str, Any]) -> bool:
        asked.append(result.type)
        return True

    finished = make_agent(stop_when=never)
    mock_llm.add_response({"type": "text", "content": "done"}, agent=finished.name)
    done = await (await helix.execute(finished, "go")).result()
    assert done.status == "completed" and done.stop_reason is None and asked == []

    def broken(result: StepResult, state: dict[str, Any]) -> bool:
        raise KeyError("nope")

    agent = make_agent(tools=[hit], stop_when=broken)
    mock_llm.add_response(hit_call("h1"), agent=agent.name)
    failed = await (await helix.execute(agent, "go")).result()
    assert failed.status == "failed" and failed.error == "stop_when raised KeyError: 'nope'"


def test_a_result_pickled_before_stop_reason_existed_still_loads() -> None:
    result = AgentResult(status="completed", session_id="s", run_id="r", output=1)
    state = result.__getstate__()
    del state["__dict__"]["stop_reason"]  # as an older helix pickled it
    old = AgentResult.__new__(AgentResult)
    old.__setstate__(state)
    assert old.stop_reason is None and old.output == 1
