"""MockLLM: scripted step results, per-agent queues, responders and recorded inputs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError

from helix_dbos.llm.base import LLMAdapter
from helix_dbos.llm.mock import MockLLM, parse_step_result
from helix_dbos.orchestration.types import (
    ErrorStepResult,
    LLMRequest,
    LLMUsage,
    Message,
    StructuredOutputStepResult,
    TextStepResult,
    ToolCall,
    ToolCallsStepResult,
    ToolSpec,
)


def request(
    agent: str = "agent",
    *,
    messages: list[Message] | None = None,
    tools: list[ToolSpec] | None = None,
) -> LLMRequest:
    return LLMRequest(
        agent_name=agent,
        model="mock",
        messages=messages if messages is not None else [Message(role="user", content="hi")],
        tools=tools or [],
    )


async def test_typed_response_is_returned() -> None:
    llm = MockLLM()
    llm.add_response(TextStepResult(content="Hello!", stop_reason="end_turn"))
    result = await llm.generate_step(request())
    assert isinstance(result, TextStepResult)
    assert result.content == "Hello!"
    assert result.stop_reason == "end_turn"


async def test_text_dict_gets_defaults() -> None:
    llm = MockLLM().add_response({"type": "text", "content": "plain"})
    result = await llm.generate_step(request())
    assert isinstance(result, TextStepResult)
    assert result.content == "plain"
    assert result.stop_reason == "end_turn"
    assert result.should_stop is False


async def test_snake_case_tool_calls_dict() -> None:
    llm = MockLLM().add_response(
        {
            "type": "tool_calls",
            "content": "Searching.",
            "tool_calls": [{"id": "t1", "name": "search", "arguments": {"query": "q"}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 11, "output_tokens": 7},
        }
    )
    result = await llm.generate_step(request())
    assert isinstance(result, ToolCallsStepResult)
    assert result.content == "Searching."
    assert result.tool_calls == [ToolCall(id="t1", name="search", arguments={"query": "q"})]
    assert result.usage == LLMUsage(input_tokens=11, output_tokens=7)


async def test_camel_case_seed_dict_is_accepted() -> None:
    llm = MockLLM()
    llm.add_response(
        {
            "type": "tool_calls",
            "toolCalls": [{"id": "tool-1", "name": "submit_answer", "arguments": {"answer": "x"}}],
        }
    )
    llm.add_response(
        {"type": "text", "content": "bye", "shouldStop": True, "stopReason": "stop_sequence"}
    )
    first = await llm.generate_step(request())
    assert isinstance(first, ToolCallsStepResult)
    assert [c.name for c in first.tool_calls] == ["submit_answer"]
    assert first.tool_calls[0].arguments == {"answer": "x"}
    assert first.stop_reason == "tool_use"
    second = await llm.generate_step(request())
    assert isinstance(second, TextStepResult)
    assert second.should_stop is True
    assert second.stop_reason == "stop_sequence"


async def test_seed_001_dict_with_sub_agent_calls_is_accepted() -> None:
    llm = MockLLM()
    llm.add_response(
        {
            "type": "tool_calls",
            "toolCalls": [{"id": "tc1", "name": "search", "arguments": {"query": "test"}}],
            "subAgentCalls": [{"id": "s1", "agentType": "summarizer", "input": {}}],
        }
    )
    result = await llm.generate_step(request())
    assert isinstance(result, ToolCallsStepResult)
    assert [s.agent_type for s in result.sub_agent_calls] == ["summarizer"]


async def test_error_and_structured_output_dicts() -> None:
    llm = MockLLM().add_responses(
        {"type": "error", "error": "Rate limited", "shouldStop": True},
        {"type": "structured_output", "output": {"result": "done"}},
    )
    error = await llm.generate_step(request())
    assert isinstance(error, ErrorStepResult)
    assert error.error == "Rate limited" and error.should_stop is True
    output = await llm.generate_step(request())
    assert isinstance(output, StructuredOutputStepResult)
    assert output.output == {"result": "done"}


def test_malformed_dicts_fail_when_added() -> None:
    with pytest.raises(ValidationError):
        MockLLM().add_response({"type": "text", "content": "x", "bogus": 1})
    with pytest.raises(ValidationError):
        MockLLM().add_response({"type": "tool_calls", "toolCalls": [{"name": "no id"}]})
    with pytest.raises(ValidationError):
        parse_step_result({"type": "speech"})


async def test_responses_are_served_in_order_then_run_out() -> None:
    llm = MockLLM().add_responses(
        {"type": "text", "content": "one"}, {"type": "text", "content": "two"}
    )
    assert (await llm.generate_step(request())).content == "one"  # type: ignore[union-attr]
    assert (await llm.generate_step(request())).content == "two"  # type: ignore[union-attr]
    with pytest.raises(LookupError, match="no scripted response left for agent 'agent'"):
        await llm.generate_step(request())


async def test_error_when_nothing_is_scripted() -> None:
    llm = MockLLM()
    with pytest.raises(LookupError, match="'planner'"):
        await llm.generate_step(request("planner"))


async def test_per_agent_queues_take_precedence() -> None:
    llm = MockLLM()
    llm.add_response({"type": "text", "content": "global"})
    llm.add_response({"type": "text", "content": "for child"}, agent="child")
    llm.add_response({"type": "text", "content": "global 2"})
    # The child's own queue wins even though the global queue was filled first.
    assert (await llm.generate_step(request("child"))).content == "for child"  # type: ignore[union-attr]
    # Another agent never sees the child's script.
    assert (await llm.generate_step(request("parent"))).content == "global"  # type: ignore[union-attr]
    # Once its queue is empty the child falls back to the global queue.
    assert (await llm.generate_step(request("child"))).content == "global 2"  # type: ignore[union-attr]


async def test_per_agent_scripts_do_not_leak_between_agents() -> None:
    llm = MockLLM().add_responses({"type": "text", "content": "a1"}, agent="a")
    with pytest.raises(LookupError):
        await llm.generate_step(request("b"))
    assert (await llm.generate_step(request("a"))).content == "a1"  # type: ignore[union-attr]


async def test_sync_responder_is_a_function_of_the_request() -> None:
    seen: list[LLMRequest] = []

    def responder(req: LLMRequest) -> dict[str, Any]:
        seen.append(req)
        last = req.messages[-1].content or ""
        return {"type": "text", "content": f"echo {last}"}

    llm = MockLLM(responder)
    first = request(messages=[Message(role="user", content="ping")])
    result = await llm.generate_step(first)
    assert isinstance(result, TextStepResult)
    assert result.content == "echo ping"
    assert seen == [first]
    # Deterministic: the same request gives the same answer, no queue consumed.
    again = await llm.generate_step(first)
    assert again.content == "echo ping"  # type: ignore[union-attr]


async def test_async_responder_returning_typed_results() -> None:
    async def responder(req: LLMRequest) -> ToolCallsStepResult:
        await asyncio.sleep(0)
        return ToolCallsStepResult(
            tool_calls=[ToolCall(id=f"c{len(req.messages)}", name=req.tools[0].name)]
        )

    llm = MockLLM()
    llm.set_responder(responder)
    result = await llm.generate_step(request(tools=[ToolSpec(name="search")]))
    assert isinstance(result, ToolCallsStepResult)
    assert [(c.id, c.name) for c in result.tool_calls] == [("c1", "search")]


async def test_scripted_queue_is_used_before_the_responder() -> None:
    llm = MockLLM(lambda req: {"type": "text", "content": "from responder"})
    llm.add_response({"type": "text", "content": "scripted"})
    assert (await llm.generate_step(request())).content == "scripted"  # type: ignore[union-attr]
    assert (await llm.generate_step(request())).content == "from responder"  # type: ignore[union-attr]


async def test_records_inputs_with_tools_and_messages() -> None:
    llm = MockLLM().add_responses(
        {"type": "text", "content": "a"}, {"type": "text", "content": "b"}
    )
    with pytest.raises(LookupError, match="not been called"):
        llm.get_last_input()
    assert llm.call_count == 0
    first = request("one", tools=[ToolSpec(name="search"), ToolSpec(name="__finish__")])
    second = request(
        "two",
        messages=[Message(role="system", content="sys"), Message(role="user", content="q")],
        tools=[ToolSpec(name="submit_answer")],
    )
    await llm.generate_step(first)
    await llm.generate_step(second)
    assert llm.call_count == 2
    assert llm.inputs == [first, second]
    last = llm.get_last_input()
    assert [t.name for t in last.tools] == ["submit_answer"]
    assert "__finish__" not in [t.name for t in last.tools]
    assert [m.role for m in last.messages] == ["system", "user"]
    assert last.system == "sys"


async def test_usage_is_estimated_when_absent() -> None:
    llm = MockLLM(model="mock-large").add_response({"type": "text", "content": "x" * 40})
    req = request(messages=[Message(role="user", content="y" * 400)])
    result = await llm.generate_step(req)
    assert result.usage is not None
    assert result.usage.model == "mock-large"
    assert result.usage.input_tokens == 100
    assert result.usage.output_tokens >= 10
    # Deterministic: same request, same result, same usage.
    llm.add_response({"type": "text", "content": "x" * 40})
    again = await llm.generate_step(req)
    assert again.usage == result.usage


async def test_usage_is_kept_when_given() -> None:
    usage = LLMUsage(model="real", input_tokens=3, output_tokens=4, cache_read_tokens=2)
    llm = MockLLM().add_response(TextStepResult(content="hi", usage=usage))
    assert (await llm.generate_step(request())).usage == usage


async def test_text_delta_callback_receives_the_content() -> None:
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    llm = MockLLM().add_responses(
        {"type": "text", "content": "streamed"},
        {"type": "tool_calls", "tool_calls": [{"id": "t", "name": "search"}]},
    )
    await llm.generate_step(request(), on_text_delta=on_delta)
    await llm.generate_step(request(), on_text_delta=on_delta)
    assert deltas == ["streamed"]


async def test_reset_clears_scripts_and_inputs() -> None:
    llm = MockLLM().add_response({"type": "text", "content": "x"})
    llm.add_response({"type": "text", "content": "y"}, agent="a")
    await llm.generate_step(request("other"))
    llm.reset()
    assert llm.call_count == 0
    with pytest.raises(LookupError):
        await llm.generate_step(request("a"))


def test_mock_llm_satisfies_the_adapter_protocol() -> None:
    assert isinstance(MockLLM(), LLMAdapter)
    llm = MockLLM()
    assert llm.add_response({"type": "text", "content": "x"}) is llm
    assert llm.add_responses() is llm
