"""Prompt caching (Anthropic breakpoints, cached tokens priced as such) and fallback
models, through the official SDKs against a recording transport and the real runtime."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import httpx
import httpx2
import pytest
from dbos import DBOS
from helpers import sql
from test_runtime_with_providers import anthropic_text_stream, get_weather, openai_text_stream
from wire import (
    ANTHROPIC_MODEL,
    OPENAI_MODEL,
    Recorder,
    anthropic_message,
    anthropic_sse,
    anthropic_stream_tool_use,
    openai_stream_text_and_tool,
)

from helix_dbos import Agent, LLMConfig
from helix_dbos.errors import AgentDefinitionError, LLMConfigurationError
from helix_dbos.llm.anthropic import MAX_BREAKPOINTS, AnthropicAdapter, build_params
from helix_dbos.llm.capabilities import anthropic_capabilities
from helix_dbos.llm.pricing import llm_cost_usd
from helix_dbos.llm.providers import register_provider, unregister_provider
from helix_dbos.orchestration.types import (
    LLMRequest,
    LLMUsage,
    Message,
    TextStepResult,
    ThinkingBlock,
    ToolCall,
    ToolSpec,
)
from helix_dbos.runtime.process import model_limits

OVERLOADED = (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Busy"}})
SERVER_ERROR = (500, {"type": "error", "error": {"type": "api_error", "message": "Internal"}})
INVALID = (
    400,
    {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt too long"}},
)


def breakpoints(body: dict[str, Any]) -> list[str]:
    """Where a request body carries `cache_control`: `system`, `tool:<name>`, `message:<i>`."""
    found = []
    system = body.get("system")
    if isinstance(system, list):
        found += ["system" for block in system if "cache_control" in block]
    found += [f"tool:{t['name']}" for t in body.get("tools", []) if "cache_control" in t]
    for i, message in enumerate(body["messages"]):
        content = message["content"]
        if not isinstance(content, str):
            found += [f"message:{i}" for block in content if "cache_control" in block]
    return found


TRANSCRIPT = [
    Message(role="system", content="You are a weather bot."),
    Message(role="user", content="Weather in Paris?"),
    Message(
        role="assistant",
        thinking=[ThinkingBlock(text="Need the tool.", signature="sig")],
        tool_calls=[ToolCall(id="toolu_1", name="get_weather", arguments={"city": "Paris"})],
    ),
    Message(role="tool", content='{"sky": "clear"}', tool_call_id="toolu_1"),
]
WEATHER = ToolSpec(name="get_weather", description="Weather for a city.")


def params(messages: list[Message], **fields: Any) -> dict[str, Any]:
    request = LLMRequest(agent_name="a", model="anthropic:claude-sonnet-4-6", messages=messages)
    request = request.model_copy(update=fields)
    built, _ = build_params(request, "claude-sonnet-4-6", anthropic_capabilities("x"))
    return dict(built)


# --- The request -------------------------------------------------------------------


def test_cache_marks_the_system_prompt_and_the_last_message() -> None:
    body = params(TRANSCRIPT, cache=True, tools=[WEATHER])
    assert body["system"] == [
        {"type": "text", "text": "You are a weather bot.", "cache_control": {"type": "ephemeral"}}
    ]
    assert breakpoints(body) == ["system", "message:2"]
    assert body["messages"][2]["content"][-1]["type"] == "tool_result"
    assert len(breakpoints(body)) <= MAX_BREAKPOINTS


def test_without_a_system_prompt_the_last_tool_carries_the_breakpoint() -> None:
    body = params(TRANSCRIPT[1:2], cache=True, tools=[WEATHER])
    assert breakpoints(body) == ["tool:get_weather", "message:0"]


def test_a_thinking_block_never_carries_a_breakpoint() -> None:
    assistant = Message(role="assistant", thinking=[ThinkingBlock(text="t", signature="s")])
    body = params([*TRANSCRIPT[:2], assistant], cache=True)
    # the last turn holds only thinking: the breakpoint goes to the turn before it
    assert breakpoints(body) == ["system", "message:0"]


def test_cache_off_sends_no_breakpoint_and_a_plain_system_string() -> None:
    body = params(TRANSCRIPT, cache=False, tools=[WEATHER])
    assert body["system"] == "You are a weather bot." and breakpoints(body) == []


async def test_the_sdk_sends_the_breakpoints_on_the_wire() -> None:
    recorder = Recorder(httpx2, (200, anthropic_message([{"type": "text", "text": "ok"}])))
    adapter = AnthropicAdapter("claude-sonnet-4-6", api_key="k", http_client=recorder.client())
    request = LLMRequest(agent_name="a", model="anthropic:x", messages=TRANSCRIPT, cache=True)
    await adapter.generate_step(request)
    assert breakpoints(recorder.body) == ["system", "message:2"]


# --- Prices --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "provider"), [(ANTHROPIC_MODEL, "anthropic"), (OPENAI_MODEL, "openai")]
)
def test_cached_reads_cost_less_than_the_same_tokens_uncached(model: str, provider: str) -> None:
    cold = llm_cost_usd(LLMUsage(model=model, input_tokens=10_000, output_tokens=100), provider)
    warm = llm_cost_usd(
        LLMUsage(model=model, input_tokens=10_000, output_tokens=100, cache_read_tokens=9_000),
        provider,
    )
    assert cold is not None and warm is not None and warm < cold


# --- The runtime ---------------------------------------------------------------------


def cached_text_stream(text: str, *, uncached: int, read: int, write: int) -> bytes:
    """A text reply whose `message_start` reports cache reads and writes."""
    start = anthropic_message([], None, input_tokens=uncached, output_tokens=1)
    start["usage"] |= {"cache_read_input_tokens": read, "cache_creation_input_tokens": write}
    return anthropic_sse(
        [
            {"type": "message_start", "message": {**start, "stop_reason": None}},
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
            {"type": "message_stop"},
        ]
    )


async def test_a_run_asks_for_caching_and_records_cached_reads_at_their_price(
    helix, make_agent, wire_provider, database_url
):
    recorder = Recorder(
        httpx2,
        (200, anthropic_stream_tool_use("toolu_w", "get_weather", {"city": "Paris"})),
        (200, cached_text_stream("Sunny.", uncached=40, read=2000, write=0)),
    )
    wire_provider["anthropic"] = recorder
    agent = make_agent(
        tools=[get_weather],
        system_prompt="You are a weather bot.",
        llm=LLMConfig(model="anthropic-wire:claude-sonnet-4-6"),
    )
    result = await (await helix.execute(agent, "Weather in Paris?")).result()

    assert result.status == "completed" and result.output == "Sunny."
    first, second = recorder.bodies
    assert breakpoints(first)[0] == "system" and breakpoints(first)[-1] == "message:0"
    assert breakpoints(second)[-1] == f"message:{len(second['messages']) - 1}"
    assert all(len(breakpoints(b)) <= MAX_BREAKPOINTS for b in recorder.bodies)
    rows = sql(
        database_url,
        "SELECT step, model, input_tokens, cache_read_tokens, cost_usd FROM helix.usage "
        "WHERE run_id = %s AND kind = 'llm' ORDER BY step",
        result.run_id,
    )
    assert [r[:4] for r in rows] == [(1, ANTHROPIC_MODEL, 310, 0), (2, ANTHROPIC_MODEL, 2040, 2000)]
    cold = llm_cost_usd(LLMUsage(model=ANTHROPIC_MODEL, input_tokens=2040, output_tokens=5))
    assert cold is not None and Decimal(rows[1][4]) < cold


async def test_cache_false_sends_no_breakpoint(helix, make_agent, wire_provider):
    recorder = Recorder(httpx2, (200, anthropic_text_stream("hi")))
    wire_provider["anthropic"] = recorder
    agent = make_agent(
        system_prompt="Be brief.",
        llm=LLMConfig(model="anthropic-wire:claude-sonnet-4-6", cache=False),
    )
    result = await (await helix.execute(agent, "hello")).result()
    assert result.status == "completed"
    assert recorder.body["system"] == "Be brief." and breakpoints(recorder.body) == []


# --- Fallback models -------------------------------------------------------------------


def fallback_agent(make_agent: Any, **llm: Any) -> Any:
    config = {
        "model": "anthropic-wire:claude-sonnet-4-6",
        "fallback": ["openai-wire:gpt-4o"],
        "max_attempts": 2,
        "retry_interval_seconds": 0,
        "provider_options": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
    }
    return make_agent(tools=[get_weather], llm=LLMConfig(**(config | llm)))


@pytest.mark.parametrize("failure", [OVERLOADED, SERVER_ERROR], ids=["529", "500"])
async def test_the_fallback_answers_once_the_primarys_attempts_are_spent(
    helix, make_agent, wire_provider, database_url, failure
):
    wire_provider["anthropic"] = primary = Recorder(httpx2, failure)
    wire_provider["openai"] = backup = Recorder(
        httpx, (200, openai_stream_text_and_tool()), (200, openai_text_stream("Sunny."))
    )
    result = await (await helix.execute(fallback_agent(make_agent), "Weather?")).result()

    assert result.status == "completed" and result.output == "Sunny."
    assert len(primary.requests) == 4, "2 attempts of each step's primary call"
    assert len(backup.requests) == 2
    assert "thinking" not in backup.bodies[0], "Anthropic's options stay with Anthropic"
    rows = sql(
        database_url,
        "SELECT step, model, input_tokens, cache_read_tokens, success, cost_usd IS NOT NULL "
        "FROM helix.usage WHERE run_id = %s AND kind = 'llm' ORDER BY step",
        result.run_id,
    )
    assert rows == [(1, OPENAI_MODEL, 82, 64, True, True), (2, OPENAI_MODEL, 120, 0, True, True)]
    messages = await helix.get_messages(result.session_id)
    assert messages[1].tool_calls[0].name == "get_weather", "the fallback's answer is kept"


async def test_a_400_does_not_fall_back(helix, make_agent, wire_provider, database_url):
    wire_provider["anthropic"] = primary = Recorder(httpx2, INVALID)
    wire_provider["openai"] = backup = Recorder(httpx, (200, openai_text_stream("never")))
    result = await (await helix.execute(fallback_agent(make_agent), "hi")).result()

    assert result.status == "failed" and "prompt too long" in result.error
    assert len(primary.requests) == 1 and backup.requests == []


async def test_when_every_model_fails_the_run_fails_naming_each(
    helix, make_agent, wire_provider, database_url
):
    wire_provider["anthropic"] = Recorder(httpx2, OVERLOADED)
    rate_limited = (429, {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}})
    wire_provider["openai"] = backup = Recorder(httpx, rate_limited)
    result = await (await helix.execute(fallback_agent(make_agent), "hi")).result()

    assert result.status == "failed"
    assert "Busy" in result.error and "Rate limit reached" in result.error
    assert "openai-wire:gpt-4o" in result.error
    assert len(backup.requests) == 1, "a fallback is tried on the primary's last attempt only"
    usage = sql(
        database_url,
        "SELECT model, success FROM helix.usage WHERE run_id = %s AND kind = 'llm'",
        result.run_id,
    )
    assert usage == [(None, False)]


def test_fallback_names_are_checked() -> None:
    with pytest.raises(AgentDefinitionError, match="provider:model"):
        LLMConfig(model="anthropic:claude-sonnet-4-6", fallback=["gpt-4o"])
    with pytest.raises(AgentDefinitionError, match="repeats"):
        LLMConfig(model="openai:gpt-4o", fallback=["openai:gpt-4o"])
    assert LLMConfig(fallback="openai:gpt-4o").fallback == ("openai:gpt-4o",)  # type: ignore[arg-type]


async def test_an_unknown_fallback_provider_is_refused_at_execute(helix, make_agent):
    agent = make_agent(llm=LLMConfig(model="mock", fallback=["nowhere:model"]))
    with pytest.raises(LLMConfigurationError, match="nowhere"):
        await helix.execute(agent, "hi")


async def test_a_primary_that_recovers_within_its_attempts_never_calls_the_fallback(
    helix, make_agent, wire_provider, database_url
):
    wire_provider["anthropic"] = primary = Recorder(
        httpx2, OVERLOADED, (200, anthropic_text_stream("from the primary"))
    )
    wire_provider["openai"] = backup = Recorder(httpx, (200, openai_text_stream("never")))
    result = await (await helix.execute(fallback_agent(make_agent), "hi")).result()

    assert result.status == "completed" and result.output == "from the primary"
    assert len(primary.requests) == 2 and backup.requests == []
    rows = sql(
        database_url,
        "SELECT model FROM helix.usage WHERE run_id = %s AND kind = 'llm'",
        result.run_id,
    )
    assert rows == [(ANTHROPIC_MODEL,)]


async def test_a_fallbacks_own_400_fails_the_run_with_its_message(
    helix, make_agent, wire_provider, database_url
):
    wire_provider["anthropic"] = Recorder(httpx2, OVERLOADED)
    refused = (
        400,
        {"error": {"message": "Unsupported parameter", "type": "invalid_request_error"}},
    )
    wire_provider["openai"] = backup = Recorder(httpx, refused)
    result = await (await helix.execute(fallback_agent(make_agent), "hi")).result()

    assert result.status == "failed" and "Unsupported parameter" in result.error
    assert len(backup.requests) == 1
    rows = sql(
        database_url,
        "SELECT success FROM helix.usage WHERE run_id = %s AND kind = 'llm'",
        result.run_id,
    )
    assert rows == [(False,)]


# --- Fallback models and fleet-wide limits ------------------------------------------------


def test_a_fallback_model_with_fleet_wide_limits_is_refused() -> None:
    limited = Agent("limited", llm=LLMConfig(model="mock:quota", max_concurrent=1))
    falls_back = Agent("falls_back", llm=LLMConfig(model="openai:gpt-4o", fallback=["mock:quota"]))
    with pytest.raises(AgentDefinitionError, match="fallback model 'mock:quota' has fleet-wide"):
        model_limits.check_fallbacks([limited, falls_back])
    model_limits.check_fallbacks([falls_back])  # alone: nothing limits its fallback


class WaitingFallback:
    """A fallback that answers only once `ready()` holds (or says it gave up)."""

    def __init__(self, ready: Any) -> None:
        self.ready = ready

    async def generate_step(self, request: LLMRequest, on_text_delta: Any = None) -> Any:
        deadline = asyncio.get_running_loop().time() + 30
        while not self.ready() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        return TextStepResult(
            content="ok" if self.ready() else "gave up", usage=LLMUsage(model="waiting-1")
        )


@pytest.fixture
def primary_queue() -> Iterator[None]:
    """The limited model's queue goes with the test (the session's process would poll it)."""
    yield
    with ThreadPoolExecutor(max_workers=1) as thread:  # DBOS refuses the sync call on a loop
        thread.submit(DBOS.delete_queue, model_limits.model_queue(LIMITED)).result()


LIMITED = "anthropic-wire:claude-limited"


async def test_a_limited_primary_frees_its_slot_before_its_fallback_is_called(
    helix, make_agent, wire_provider, database_url, primary_queue
):
    """Two runs, one slot: the first run's fallback waits until the second run's primary
    was called, which happens only if the first run's slot went back to the queue when
    its primary was done (a fallback call takes no slot of the primary's model)."""
    wire_provider["anthropic"] = primary = Recorder(httpx2, OVERLOADED)
    register_provider(
        "waiting", lambda model, **_: WaitingFallback(lambda: len(primary.requests) >= 2)
    )
    try:
        agent = make_agent(
            llm=LLMConfig(
                model=LIMITED, max_concurrent=1, max_attempts=1, fallback=["waiting:fallback"]
            )
        )
        handles = [await helix.execute(agent, f"run {i}") for i in range(2)]
        results = [await h.result() for h in handles]
    finally:
        unregister_provider("waiting")
    assert [(r.status, r.output) for r in results] == [("completed", "ok")] * 2
    assert len(primary.requests) == 2
    rows = sql(
        database_url,
        "SELECT model FROM helix.usage WHERE run_id = ANY(%s) AND kind = 'llm'",
        [h.run_id for h in handles],
    )
    assert rows == [("waiting-1",)] * 2


LATER = "mock:limited-later"


@pytest.fixture
def later_queue() -> Iterator[None]:
    yield
    with ThreadPoolExecutor(max_workers=1) as thread:
        thread.submit(DBOS.delete_queue, model_limits.model_queue(LATER)).result()


async def test_a_fallback_limited_after_its_agent_was_registered_is_not_called(
    helix, make_agent, wire_provider, mock_llm, later_queue
):
    wire_provider["anthropic"] = Recorder(httpx2, OVERLOADED)
    agent = make_agent(
        llm=LLMConfig(model="anthropic-wire:claude-sonnet-4-6", max_attempts=1, fallback=[LATER])
    )
    make_agent(llm=LLMConfig(model=LATER, max_concurrent=3))  # its model gets limits now
    asked = len(mock_llm.inputs)
    result = await (await helix.execute(agent, "hi")).result()

    assert result.status == "failed"
    assert f"{LATER}: not called: it has fleet-wide limits" in result.error
    assert len(mock_llm.inputs) == asked, "the limited model was not called"


async def test_the_chat_span_names_the_fallback_that_answered(helix, make_agent, wire_provider):
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: PLC0415
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: PLC0415
        InMemorySpanExporter,
    )

    from helix_dbos.otel import instrument, uninstrument  # noqa: PLC0415

    memory = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(memory))
    instrument(tracer)
    try:
        wire_provider["anthropic"] = Recorder(httpx2, OVERLOADED)
        wire_provider["openai"] = Recorder(httpx, (200, openai_text_stream("hello")))
        result = await (await helix.execute(fallback_agent(make_agent), "hi")).result()
    finally:
        uninstrument()
    assert result.status == "completed"
    chats = sorted(
        (
            s
            for s in memory.get_finished_spans()
            if s.attributes
            and s.attributes.get("gen_ai.operation.name") == "chat"
            and s.attributes.get("helix.run_id") == result.run_id
        ),
        key=lambda s: s.attributes["helix.attempt"],
    )
    assert [
        (s.attributes["helix.attempt"], s.attributes["gen_ai.provider.name"]) for s in chats
    ] == [
        (1, "anthropic-wire"),
        (2, "openai-wire"),
    ]
    answered = chats[-1].attributes
    assert answered["gen_ai.request.model"] == "gpt-4o"
    assert answered["gen_ai.response.model"] == OPENAI_MODEL
