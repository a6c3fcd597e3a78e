"""Completion semantics of seed 000 on the real runtime (DBOS + Postgres, scripted LLM)."""

from __future__ import annotations

import json
import logging

import pytest
from helpers import calls, sql
from pydantic import BaseModel

from helix_dbos import AgentHooks, MockLLM, ToolContext, tool
from helix_dbos.orchestration.types import TextStepResult

FINISH = "__finish__"


class Sentiment(BaseModel):
    sentiment: str
    confidence: float


@tool
async def search(query: str) -> list[str]:
    """Search for information."""
    return [f"found {query}"]


async def test_finish_completes_with_validated_output_and_paired_transcript(
    helix, make_agent, mock_llm: MockLLM, database_url
):
    agent = make_agent(system_prompt="Analyze.", tools=[search], output_schema=Sentiment)
    mock_llm.add_responses(
        calls(("c1", "search", {"query": "reviews"})),
        calls(("c2", FINISH, {"sentiment": "positive", "confidence": 0.9})),
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "How do people feel?")).result()

    assert result.status == "completed"
    assert result.output == {"sentiment": "positive", "confidence": 0.9}
    request = mock_llm.get_last_input()
    assert [t.name for t in request.tools] == ["search", FINISH]
    assert "## Output Requirement" in request.messages[0].content
    assert "the `__finish__` tool" in request.messages[0].content
    messages = await helix.get_messages(result.session_id)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert messages[-1].tool_call_id == "c2" and json.loads(messages[-1].content) == {
        "acknowledged": True
    }
    assert json.loads(messages[2].content) == ["found reviews"]
    rows = sql(
        database_url,
        "SELECT kind, tool_name, success FROM helix.usage WHERE run_id = %s ORDER BY step, kind",
        result.run_id,
    )
    assert rows == [("llm", None, True), ("tool", "search", True), ("llm", None, True)]
    assert result.usage["llm_calls"] == 2 and result.usage["input_tokens"] > 0


async def test_invalid_finish_goes_back_to_the_model_with_a_warning(
    helix, make_agent, mock_llm, caplog
):
    agent = make_agent(output_schema=Sentiment)
    mock_llm.add_responses(
        calls(("c1", FINISH, {"sentiment": "positive"})),
        calls(("c2", FINISH, {"sentiment": "positive", "confidence": 0.5})),
        agent=agent.name,
    )
    with caplog.at_level(logging.WARNING, logger="helix_dbos"):
        result = await (await helix.execute(agent, "go")).result()
    assert result.status == "completed" and result.output["confidence"] == 0.5
    messages = await helix.get_messages(result.session_id)
    error = next(m for m in messages if m.tool_call_id == "c1")
    assert error.is_error and "confidence" in error.content and "Field required" in error.content
    assert any("invalid output" in r.getMessage() for r in caplog.records)


async def test_invalid_finish_is_bounded(helix, make_agent, mock_llm):
    agent = make_agent(output_schema=Sentiment, max_output_retries=1)
    mock_llm.add_responses(
        calls(("a", FINISH, {})), calls(("b", FINISH, {"x": 1})), agent=agent.name
    )
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "failed"
    assert "Output validation failed 2 times" in result.error
    messages = await helix.get_messages(result.session_id)
    assert {m.tool_call_id for m in messages if m.role == "tool"} == {"a", "b"}


async def test_finish_with_tool_replaces_finish_and_persists_state(helix, make_agent, mock_llm):
    seen_state = {}

    @tool
    def note(ctx: ToolContext, text: str) -> str:
        """Record a note in state."""
        ctx.update_state(lambda s: s.setdefault("notes", []).append(text))
        return "ok"

    @tool(finish_with=True)
    def submit_answer(answer: str, ctx: ToolContext) -> dict:
        """Submit the final answer."""
        seen_state.update(ctx.get_state())
        ctx.update_state({"submitted": answer})
        return {"result": answer}

    agent = make_agent(tools=[note, submit_answer], output_schema=None)
    mock_llm.add_responses(
        calls(("n1", "note", {"text": "first"}), ("s1", "submit_answer", {"answer": "42"})),
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "answer")).result()
    assert result.status == "completed" and result.output == {"result": "42"}
    assert seen_state == {"notes": ["first"]}, "finish_with tools see the state of regular tools"
    assert (await helix.get_session(result.session_id)).state == {
        "notes": ["first"],
        "submitted": "42",
    }
    request = mock_llm.get_last_input()
    assert FINISH not in [t.name for t in request.tools]
    assert "the `submit_answer` tool" in request.messages[0].content


async def test_finish_with_error_goes_back_then_first_success_wins(helix, make_agent, mock_llm):
    ran = []

    @tool(finish_with=True)
    def submit(data: str) -> dict:
        """Submit."""
        ran.append(("submit", data))
        if len(data) < 5:
            raise ValueError("Data too short. Please provide more detail.")
        return {"result": data}

    @tool(finish_with=True)
    def reject(reason: str) -> dict:
        """Reject."""
        ran.append(("reject", reason))
        return {"rejected": reason}

    agent = make_agent(tools=[submit, reject])
    mock_llm.add_responses(
        calls(("a", "submit", {"data": "Hi"})),
        calls(("b", "submit", {"data": "long enough"}), ("c", "reject", {"reason": "no"})),
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "completed" and result.output == {"result": "long enough"}
    assert ran == [("submit", "Hi"), ("submit", "long enough")], (
        "reject is not executed after a winner"
    )
    messages = await helix.get_messages(result.session_id)
    first_error = next(m for m in messages if m.tool_call_id == "a")
    assert first_error.is_error and "Data too short" in first_error.content
    skipped = next(m for m in messages if m.tool_call_id == "c")
    assert skipped.is_error and "already completed via 'submit'" in skipped.content


async def test_finish_with_transform_maps_output_and_failure_fails_the_run(
    helix, make_agent, mock_llm
):
    @tool(
        finish_with=True,
        finish_with_transform=lambda out: {"result": out["raw"].upper(), "score": out["m"]},
    )
    def process(raw: str, m: int = 1) -> dict:
        """Process."""
        return {"raw": raw, "m": m}

    def bad_transform(out: dict) -> dict:
        raise ValueError("Invalid output")

    @tool(finish_with=True, finish_with_transform=bad_transform)
    def broken(x: str) -> dict:
        """Broken."""
        return {"x": x}

    good = make_agent(tools=[process])
    mock_llm.add_response(calls(("p", "process", {"raw": "hello", "m": 5})), agent=good.name)
    ok = await (await helix.execute(good, "go")).result()
    assert ok.output == {"result": "HELLO", "score": 5}

    bad = make_agent(tools=[broken])
    mock_llm.add_response(calls(("q", "broken", {"x": "y"})), agent=bad.name)
    failed = await (await helix.execute(bad, "go")).result()
    assert failed.status == "failed" and "Invalid output" in failed.error


async def test_text_reply_gets_a_nudge_then_fails_after_the_limit(helix, make_agent, mock_llm):
    agent = make_agent(output_schema=Sentiment)
    mock_llm.add_responses(
        {"type": "text", "content": "I think it is positive"},
        calls(("f", FINISH, {"sentiment": "positive", "confidence": 1})),
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "completed"
    messages = await helix.get_messages(result.session_id)
    assert messages[2].role == "user" and "`__finish__`" in messages[2].content

    strict = make_agent(
        output_schema=Sentiment, max_consecutive_nudges=2, nudge_message="CALL THE TOOL"
    )
    mock_llm.add_responses(
        *[{"type": "text", "content": f"t{i}"} for i in range(3)], agent=strict.name
    )
    failed = await (await helix.execute(strict, "go")).result()
    assert failed.status == "failed" and failed.error == "Max consecutive nudges exceeded"
    contents = [m.content for m in await helix.get_messages(failed.session_id) if m.role == "user"]
    assert contents.count("CALL THE TOOL") == 2


async def test_max_steps_fails_with_max_invocations_error(helix, make_agent, mock_llm):
    agent = make_agent(tools=[search], max_steps=2)
    mock_llm.add_responses(
        *[calls((f"s{i}", "search", {"query": "q"})) for i in range(2)], agent=agent.name
    )
    result = await (await helix.execute(agent, "loop")).result()
    assert result.status == "failed" and "Max invocations exceeded" in result.error
    assert result.step_count == 2


async def test_max_tokens_is_recoverable_once_with_output_schema(helix, make_agent, mock_llm):
    agent = make_agent(output_schema=Sentiment)
    mock_llm.add_responses(
        {"type": "text", "content": "a very long ans", "stop_reason": "max_tokens"},
        calls(("f", FINISH, {"sentiment": "neutral", "confidence": 0.1})),
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "completed"
    correction = (await helix.get_messages(result.session_id))[2]
    assert correction.role == "user" and "maximum output length" in correction.content

    again = make_agent(output_schema=Sentiment)
    mock_llm.add_responses(
        *[{"type": "text", "content": "x", "stop_reason": "max_tokens"}] * 2, agent=again.name
    )
    failed = await (await helix.execute(again, "go")).result()
    assert failed.status == "failed" and "max_tokens" in failed.error


async def test_text_reply_completes_an_agent_without_output_schema(helix, make_agent, mock_llm):
    agent = make_agent(system_prompt="Chat.")
    mock_llm.add_response({"type": "text", "content": "Hello there"}, agent=agent.name)
    result = await (await helix.execute(agent, "hi")).result()
    assert (result.status, result.output) == ("completed", "Hello there")
    refused = make_agent()
    mock_llm.add_response(
        {"type": "text", "content": "", "stop_reason": "refusal"}, agent=refused.name
    )
    assert (await (await helix.execute(refused, "hi")).result()).status == "failed"


async def test_llm_error_fails_the_run_with_its_message(helix, make_agent, mock_llm):
    agent = make_agent()
    mock_llm.add_response(
        {"type": "error", "error": "400 invalid_request_error: bad schema"}, agent=agent.name
    )
    result = await (await helix.execute(agent, "hi")).result()
    assert result.status == "failed" and "bad schema" in result.error


async def test_hooks_fire_in_canonical_order_on_every_completion_path(helix, make_agent, mock_llm):
    events: list[str] = []
    hooks = AgentHooks(
        before_tool=lambda e: events.append(f"before:{e.call.name}"),
        on_state_change=lambda e: events.append(f"state:{e.tool_name}"),
        on_message=lambda e: events.append(f"message:{e.message.tool_name}"),
        after_tool=lambda e: events.append(f"after:{e.call.name}:{e.success}"),
        on_agent_complete=lambda e: events.append(f"complete:{e.status}"),
    )

    @tool
    def bump(ctx: ToolContext) -> int:
        """Bump a counter."""
        events.append("execute:bump")
        ctx.update_state({"n": 1})
        return 1

    @tool(finish_with=True)
    def done(ctx: ToolContext) -> str:
        """Finish."""
        return "done"

    agent = make_agent(tools=[bump, done], hooks=hooks)
    mock_llm.add_responses(calls(("b", "bump", {})), calls(("d", "done", {})), agent=agent.name)
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "completed"
    assert events == [
        "message:None",  # the model's message (issue 16: on_message for assistant messages)
        "before:bump",
        "execute:bump",
        "state:bump",
        "message:bump",
        "after:bump:True",
        "message:None",
        "before:done",
        "message:done",
        "after:done:True",
        "complete:completed",
    ]

    events.clear()
    finisher = make_agent(output_schema=Sentiment, hooks=hooks)
    mock_llm.add_response(
        calls(("f", FINISH, {"sentiment": "x", "confidence": 1})), agent=finisher.name
    )
    await (await helix.execute(finisher, "go")).result()
    # The model's message, and __finish__'s synthesized result (made in workflow code).
    assert events == ["message:None", f"message:{FINISH}", "complete:completed"]


async def test_dynamic_system_prompt_sees_the_state(helix, make_agent, mock_llm):
    class Notes(BaseModel):
        notes: list[str] = []

    agent = make_agent(
        system_prompt=lambda s: f"You have {len(s.notes)} notes.", state_schema=Notes
    )
    mock_llm.add_response({"type": "text", "content": "ok"}, agent=agent.name)
    await (await helix.execute(agent, "hi", state=Notes(notes=["a", "b"]))).result()
    assert mock_llm.get_last_input().messages[0].content == "You have 2 notes."


@pytest.mark.parametrize("mode", ["dict", "function"])
async def test_mock_llm_function_responder_sees_the_transcript(helix, make_agent, mode):
    def respond(request):
        last = request.messages[-1].content
        return (
            {"type": "text", "content": f"echo:{last}"}
            if mode == "dict"
            else TextStepResult(content=f"echo:{last}")
        )

    helix.runtime.llm_override.set_responder(respond)
    try:
        agent = make_agent()
        result = await (await helix.execute(agent, "ping")).result()
    finally:
        helix.runtime.llm_override.set_responder(None)
    assert result.output == "echo:ping"
