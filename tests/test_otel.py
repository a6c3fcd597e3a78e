"""OpenTelemetry spans (issue 16, extra `otel`): GenAI semantic-convention spans per
run, LLM call and tool call, one trace per session, suspend/resume events, content
off by default. Checked with the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio

import pytest
from helpers import calls

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

from helix_dbos import tool
from helix_dbos.otel import instrument, run_span_id, session_trace_id, uninstrument


@pytest.fixture
def exporter():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrument(provider)
    yield exporter, provider
    uninstrument()


def of_session(exporter: InMemorySpanExporter, session_id: str) -> list[ReadableSpan]:
    return [
        s
        for s in exporter.get_finished_spans()
        if s.attributes and s.attributes.get("gen_ai.conversation.id") == session_id
    ]


def by_op(spans: list[ReadableSpan], op: str) -> list[ReadableSpan]:
    return [s for s in spans if s.attributes and s.attributes["gen_ai.operation.name"] == op]


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def tool_call(call_id: str, a: int, b: int) -> dict:
    usage = {"model": "gpt-4o-2024-08-06", "input_tokens": 120, "output_tokens": 7}
    return calls((call_id, "add", {"a": a, "b": b}), usage=usage)


async def test_a_run_is_an_invoke_agent_span_over_its_chat_and_tool_spans(
    exporter, helix, make_agent, mock_llm
):
    memory, _ = exporter
    agent = make_agent(tools=[add])
    mock_llm.add_responses(
        tool_call("c1", 2, 3), {"type": "text", "content": "5"}, agent=agent.name
    )
    result = await (await helix.execute(agent, "2 + 3?")).result()
    assert result.status == "completed"
    spans = of_session(memory, result.session_id)
    [run] = by_op(spans, "invoke_agent")
    chats = by_op(spans, "chat")
    [tool_span] = by_op(spans, "execute_tool")
    assert len(chats) == 2

    # One trace per session, derived from its id; the run's span id from the run's id.
    assert {s.context.trace_id for s in spans} == {session_trace_id(result.session_id)}
    assert run.context.span_id == run_span_id(result.run_id) and run.parent is None
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in chats)
    assert tool_span.parent is not None and tool_span.parent.span_id == run.context.span_id

    assert run.name == f"invoke_agent {agent.name}"
    assert run.attributes["gen_ai.agent.name"] == agent.name
    assert run.attributes["helix.status"] == "completed"
    assert run.attributes["gen_ai.usage.input_tokens"] > 120
    assert run.start_time <= min(s.start_time for s in chats)
    assert run.end_time >= max(s.end_time for s in chats + [tool_span])

    first = min(chats, key=lambda s: s.start_time)
    assert first.name == "chat mock"
    assert first.attributes["gen_ai.request.model"] == "mock"
    assert first.attributes["gen_ai.response.model"] == "gpt-4o-2024-08-06"
    assert first.attributes["gen_ai.usage.input_tokens"] == 120
    assert first.attributes["gen_ai.usage.output_tokens"] == 7
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert tool_span.name == "execute_tool add"
    assert tool_span.attributes["gen_ai.tool.call.id"] == "c1"
    # Message content is off by default.
    keys = {k for s in spans for k in (s.attributes or {})}
    assert not keys & {"gen_ai.input.messages", "gen_ai.output.messages"}
    assert not keys & {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"}


async def test_content_is_captured_only_when_asked(exporter, helix, make_agent, mock_llm):
    memory, provider = exporter
    instrument(provider, capture_content=True)
    agent = make_agent(tools=[add])
    mock_llm.add_responses(
        tool_call("c2", 4, 4), {"type": "text", "content": "8"}, agent=agent.name
    )
    result = await (await helix.execute(agent, "secret question")).result()
    spans = of_session(memory, result.session_id)
    first = min(by_op(spans, "chat"), key=lambda s: s.start_time)
    assert "secret question" in first.attributes["gen_ai.input.messages"]
    [tool_span] = by_op(spans, "execute_tool")
    assert tool_span.attributes["gen_ai.tool.call.result"] == "8"


async def test_every_run_of_a_session_is_in_its_one_trace(exporter, helix, make_agent, mock_llm):
    memory, _ = exporter
    agent = make_agent()
    mock_llm.add_responses(
        {"type": "text", "content": "one"}, {"type": "text", "content": "two"}, agent=agent.name
    )
    first = await (await helix.execute(agent, "hi")).result()
    second = await (await helix.execute(agent, "again", session_id=first.session_id)).result()
    runs = by_op(of_session(memory, first.session_id), "invoke_agent")
    assert {s.attributes["helix.run_id"] for s in runs} == {first.run_id, second.run_id}
    assert {s.context.trace_id for s in runs} == {session_trace_id(first.session_id)}


async def test_a_wait_for_approval_is_a_suspend_and_a_resume_event(
    exporter, helix, make_agent, mock_llm
):
    memory, _ = exporter

    @tool(require_approval=True)
    def wipe(path: str) -> str:
        """Wipe a path."""
        return f"wiped {path}"

    agent = make_agent(tools=[wipe])
    mock_llm.add_responses(
        {
            "type": "tool_calls",
            "tool_calls": [{"id": "w1", "name": "wipe", "arguments": {"path": "/x"}}],
        },
        {"type": "text", "content": "wiped"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "wipe /x")
    for _ in range(400):
        if await helix.pending_tool_calls(handle.session_id):
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    await helix.approve(handle.session_id, "w1")
    result = await handle.result()
    assert result.status == "completed"
    [run] = by_op(of_session(memory, result.session_id), "invoke_agent")
    events = [(e.name, e.attributes["tool_call_id"], e.timestamp) for e in run.events]
    assert [(n, c) for n, c, _ in events] == [
        ("helix.run.suspended", "w1"),
        ("helix.run.resumed", "w1"),
    ]
    assert run.start_time <= events[0][2] < events[1][2] <= run.end_time
    assert run.events[1].attributes["helix.resolution"] == "approved"


async def test_a_failed_run_and_a_failed_tool_are_error_spans(
    exporter, helix, make_agent, mock_llm
):
    memory, _ = exporter

    @tool
    def broken() -> str:
        """Always fails."""
        raise RuntimeError("kaput")

    agent = make_agent(tools=[broken], max_steps=1)
    mock_llm.add_response(
        {"type": "tool_calls", "tool_calls": [{"id": "b1", "name": "broken", "arguments": {}}]},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "failed"
    spans = of_session(memory, result.session_id)
    [tool_span] = by_op(spans, "execute_tool")
    assert (
        tool_span.status.status_code == StatusCode.ERROR and "kaput" in tool_span.status.description
    )
    [run] = by_op(spans, "invoke_agent")
    assert run.status.status_code == StatusCode.ERROR and run.attributes["error.type"] == "failed"


async def test_spans_keep_out_of_the_callers_trace(exporter, helix, make_agent, mock_llm):
    """A span current when the run starts (DBOS's or the app's) stays as it is: helix's
    spans make the session's trace, not children of it."""
    memory, provider = exporter
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "ok"}, agent=agent.name)
    with provider.get_tracer("app").start_as_current_span("request") as outer:
        result = await (await helix.execute(agent, "hi")).result()
    spans = of_session(memory, result.session_id)
    assert spans and all(s.context.trace_id != outer.get_span_context().trace_id for s in spans)
