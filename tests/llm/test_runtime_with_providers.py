"""The real runtime driving the real provider adapters through their official SDKs.

Only HTTP is replaced (an SDK mock transport serving the providers' documented
SSE bodies). The runtime always streams, so these runs take the streaming path:
text deltas become stream chunks while the recorded step result stays whole.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import httpx2
import wire
from helpers import sql
from pydantic import BaseModel
from wire import (
    ANTHROPIC_MODEL,
    OPENAI_MODEL,
    Recorder,
    anthropic_sse,
    anthropic_stream_thinking_text_tool,
    anthropic_stream_tool_use,
    openai_sse,
    openai_stream_error_event,
    openai_stream_text_and_tool,
)

from helix_dbos import LLMConfig, tool
from helix_dbos.llm.openai_responses import OpenAIResponsesAdapter
from helix_dbos.llm.providers import register_provider, unregister_provider


@tool
def get_weather(city: str, days: int = 1) -> dict:
    """Weather forecast for a city."""
    return {"city": city, "days": days, "forecast": "sunny"}


def openai_text_stream(text: str) -> bytes:
    base = {
        "id": "chatcmpl-2",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": OPENAI_MODEL,
    }
    return openai_sse(
        [
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": text},
                        "finish_reason": None,
                    }
                ],
            },
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {
                **base,
                "choices": [],
                "usage": {"prompt_tokens": 120, "completion_tokens": 5, "total_tokens": 125},
            },
        ]
    )


def anthropic_text_stream(text: str) -> bytes:
    return anthropic_sse(
        [
            {
                "type": "message_start",
                "message": {
                    "id": "msg_2",
                    "type": "message",
                    "role": "assistant",
                    "model": ANTHROPIC_MODEL,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 150, "output_tokens": 1},
                },
            },
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
                "usage": {"output_tokens": 6},
            },
            {"type": "message_stop"},
        ]
    )


async def test_openai_streamed_tool_call_runs_durably(
    helix, make_agent, wire_provider, database_url
):
    recorder = Recorder(
        httpx, (200, openai_stream_text_and_tool()), (200, openai_text_stream("Sunny for 3 days."))
    )
    wire_provider["openai"] = recorder
    agent = make_agent(tools=[get_weather], llm=LLMConfig(model="openai-wire:gpt-4o"))
    handle = await helix.execute(agent, "Weather in Paris?")
    result = await handle.result()

    assert result.status == "completed" and result.output == "Sunny for 3 days."
    messages = await helix.get_messages(result.session_id)
    assert messages[1].content == "Checking the weather."
    assert [(c.id, c.name, c.arguments) for c in messages[1].tool_calls] == [
        ("call_stream", "get_weather", {"city": "Paris", "days": 3})
    ]
    assert json.loads(messages[2].content)["forecast"] == "sunny"
    second = recorder.bodies[1]
    assert second["stream"] is True and second["stream_options"] == {"include_usage": True}
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_stream",
        "content": messages[2].content,
    }
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "get_weather"
    deltas = sql(
        database_url,
        "SELECT payload->>'delta' FROM helix.stream_chunks WHERE run_id = %s AND type = 'text_delta' ORDER BY seq",
        handle.run_id,
    )
    assert "".join(d for (d,) in deltas) == "Checking the weather.Sunny for 3 days."
    usage = sql(
        database_url,
        "SELECT model, input_tokens, output_tokens, cache_read_tokens FROM helix.usage WHERE run_id = %s AND kind = 'llm' ORDER BY step",
        handle.run_id,
    )
    assert usage[0] == (OPENAI_MODEL, 82, 17, 64)


async def test_anthropic_thinking_is_kept_and_sent_back(
    helix, make_agent, wire_provider, database_url
):
    recorder = Recorder(
        httpx2,
        (200, anthropic_stream_thinking_text_tool()),
        (200, anthropic_text_stream("It will be sunny.")),
    )
    wire_provider["anthropic"] = recorder
    agent = make_agent(
        tools=[get_weather],
        llm=LLMConfig(
            model="anthropic-wire:claude-sonnet-4-6",
            provider_options={"thinking": {"type": "enabled", "budget_tokens": 1024}},
        ),
    )
    result = await (await helix.execute(agent, "Weather in Paris?")).result()

    assert result.status == "completed" and result.output == "It will be sunny."
    assistant = (await helix.get_messages(result.session_id))[1]
    assert (
        assistant.thinking[0].text == "Need the weather in Paris."
        and assistant.thinking[0].signature == "EqQBCgIYAhIMsig"
    )
    second = recorder.bodies[1]
    sent_back = second["messages"][1]["content"]
    assert sent_back[0] == {
        "type": "thinking",
        "thinking": "Need the weather in Paris.",
        "signature": "EqQBCgIYAhIMsig",
    }
    assert sent_back[-1]["type"] == "tool_use" and sent_back[-1]["input"] == {
        "city": "Paris",
        "days": 3,
    }
    assert second["messages"][2]["content"][0]["type"] == "tool_result"
    assert second["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    chunks = sql(
        database_url,
        "SELECT type FROM helix.stream_chunks WHERE run_id = %s AND type IN ('thinking', 'text_delta') ORDER BY seq",
        result.run_id,
    )
    assert ("thinking",) in chunks and ("text_delta",) in chunks


async def test_a_provider_rate_limit_is_retried_as_a_dbos_step_retry(
    helix, make_agent, wire_provider, database_url
):
    rate_limited = (429, {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}})
    recorder = Recorder(httpx, rate_limited, (200, openai_text_stream("after the retry")))
    wire_provider["openai"] = recorder
    agent = make_agent(llm=LLMConfig(model="openai-wire:gpt-4o"))
    result = await (await helix.execute(agent, "hi")).result()
    assert result.status == "completed" and result.output == "after the retry"
    assert len(recorder.requests) == 2, "one SDK attempt per DBOS step attempt"


async def test_a_provider_400_fails_the_run_with_the_providers_message(
    helix, make_agent, wire_provider
):
    bad = (
        400,
        {
            "error": {
                "message": "Invalid schema for function 'get_weather'",
                "type": "invalid_request_error",
            }
        },
    )
    wire_provider["openai"] = Recorder(httpx, bad)
    agent = make_agent(tools=[get_weather], llm=LLMConfig(model="openai-wire:gpt-4o"))
    result = await (await helix.execute(agent, "hi")).result()
    assert result.status == "failed" and "Invalid schema for function 'get_weather'" in result.error
    assert len(wire_provider["openai"].requests) == 1, "a 4xx other than 429 is not retried"


async def test_an_error_event_in_a_200_stream_fails_the_run_once_and_records_the_call(
    helix, make_agent, wire_provider, database_url
):
    """Recorded traffic: a gateway's `{"error": {"code": 400, ...}}` inside a 200 stream
    was retried 6 times over 31 s; it is a 4xx, so the run fails at once."""
    recorder = Recorder(httpx, (200, openai_stream_error_event(400, "Token limit reached")))
    wire_provider["openai"] = recorder
    agent = make_agent(llm=LLMConfig(model="openai-wire:gpt-4o", retry_interval_seconds=0))
    result = await (await helix.execute(agent, "hi")).result()

    assert result.status == "failed" and "Token limit reached" in result.error
    assert len(recorder.requests) == 1
    usage = sql(
        database_url,
        "SELECT model, input_tokens, output_tokens, success FROM helix.usage WHERE run_id = %s AND kind = 'llm'",
        result.run_id,
    )
    # the chunks before the error named the model; no phantom 'openai-wire:gpt-4o'
    assert usage == [(OPENAI_MODEL, 0, 0, False)]


async def test_a_rejected_call_records_a_failed_row_without_a_model(
    helix, make_agent, wire_provider, database_url
):
    bad = (400, {"error": {"message": "Bad request", "type": "invalid_request_error"}})
    wire_provider["openai"] = Recorder(httpx, bad)
    agent = make_agent(llm=LLMConfig(model="openai-wire:gpt-4o"))
    result = await (await helix.execute(agent, "hi")).result()

    assert result.status == "failed"
    usage = sql(
        database_url,
        "SELECT model, success FROM helix.usage WHERE run_id = %s AND kind = 'llm'",
        result.run_id,
    )
    assert usage == [(None, False)]


async def test_retries_that_run_out_leave_one_failed_row_for_the_call(
    helix, make_agent, wire_provider, database_url
):
    overloaded = (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Busy"}})
    recorder = Recorder(httpx2, overloaded)
    wire_provider["anthropic"] = recorder
    agent = make_agent(
        llm=LLMConfig(
            model="anthropic-wire:claude-sonnet-4-6", max_attempts=3, retry_interval_seconds=0
        )
    )
    result = await (await helix.execute(agent, "hi")).result()

    assert result.status == "failed" and "Busy" in result.error
    assert len(recorder.requests) == 3
    usage = sql(
        database_url,
        "SELECT step, model, input_tokens, success FROM helix.usage WHERE run_id = %s AND kind = 'llm'",
        result.run_id,
    )
    assert usage == [(1, None, 0, False)]


async def test_input_tokens_mean_the_same_for_both_providers(
    helix, make_agent, wire_provider, database_url
):
    """Anthropic reports 472 uncached + 64 cache-read input tokens; OpenAI 82 prompt
    tokens of which 64 cached. Both rows count every input token."""
    wire_provider["anthropic"] = Recorder(
        httpx2,
        (200, anthropic_stream_thinking_text_tool()),
        (200, anthropic_text_stream("done")),
    )
    wire_provider["openai"] = Recorder(
        httpx, (200, openai_stream_text_and_tool()), (200, openai_text_stream("done"))
    )
    rows = {}
    for model in ("anthropic-wire:claude-sonnet-4-6", "openai-wire:gpt-4o"):
        agent = make_agent(tools=[get_weather], llm=LLMConfig(model=model))
        result = await (await helix.execute(agent, "Weather?")).result()
        assert result.status == "completed"
        rows[model.split("-")[0]] = sql(
            database_url,
            "SELECT input_tokens, cache_read_tokens, success FROM helix.usage "
            "WHERE run_id = %s AND kind = 'llm' AND step = 1",
            result.run_id,
        )
    assert rows == {"anthropic": [(472 + 64, 64, True)], "openai": [(82, 64, True)]}


# --- Output modes end to end through the adapters ----------------------------------


class Verdict(BaseModel):
    label: str
    note: str = "none"


async def test_tool_mode_through_anthropic_forces_a_tool_and_finishes(
    helix, make_agent, wire_provider
):
    recorder = Recorder(
        httpx2, (200, anthropic_stream_tool_use("toolu_f", "__finish__", {"label": "good"}))
    )
    wire_provider["anthropic"] = recorder
    agent = make_agent(
        output_schema=Verdict, llm=LLMConfig(model="anthropic-wire:claude-sonnet-4-6")
    )
    result = await (await helix.execute(agent, "judge")).result()

    assert result.status == "completed" and result.output == {"label": "good", "note": "none"}
    body = recorder.body
    assert body["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in body["tools"]] == ["__finish__"]
    # cache=True (the default): the system prompt is sent as a block with a breakpoint
    assert "the `__finish__` tool" in body["system"][0]["text"]


async def test_native_mode_through_openai_validates_corrects_and_completes(
    helix, make_agent, wire_provider, caplog
):
    recorder = Recorder(
        httpx,
        (200, openai_text_stream('{"note": "no label"}')),
        (200, openai_text_stream('{"label": "good", "note": null}')),
    )
    wire_provider["openai"] = recorder
    agent = make_agent(
        system_prompt="Judge.",
        output_schema=Verdict,
        output_mode="native",
        llm=LLMConfig(model="openai-wire:gpt-4o"),
    )
    with caplog.at_level(logging.WARNING, logger="helix_dbos"):
        result = await (await helix.execute(agent, "judge")).result()

    assert result.status == "completed"
    assert result.output == {"label": "good", "note": "none"}, "strict null: the default"
    first, second = recorder.bodies
    assert first["response_format"]["type"] == "json_schema"
    assert first["response_format"]["json_schema"]["strict"] is True
    assert first["response_format"]["json_schema"]["schema"]["required"] == ["label", "note"]
    assert "tools" not in first and "tool_choice" not in first
    assert first["messages"][0] == {"role": "system", "content": "Judge."}
    assert second["messages"][-2] == {"role": "assistant", "content": '{"note": "no label"}'}
    correction = second["messages"][-1]
    assert correction["role"] == "user"
    assert correction["content"].startswith("Your reply is not valid output: label: Field required")
    assert any("invalid output from the reply" in r.getMessage() for r in caplog.records)


async def test_native_mode_through_anthropic_sends_output_config(helix, make_agent, wire_provider):
    recorder = Recorder(httpx2, (200, anthropic_text_stream('{"label": "ok"}')))
    wire_provider["anthropic"] = recorder
    agent = make_agent(
        output_schema=Verdict,
        output_mode="native",
        llm=LLMConfig(model="anthropic-wire:claude-sonnet-4-6"),
    )
    result = await (await helix.execute(agent, "judge")).result()

    assert result.status == "completed" and result.output == {"label": "ok", "note": "none"}
    output_format = recorder.body["output_config"]["format"]
    assert output_format["type"] == "json_schema"
    assert output_format["schema"]["additionalProperties"] is False
    assert "tool_choice" not in recorder.body


async def test_prompted_mode_through_openai_puts_the_schema_in_the_prompt(
    helix, make_agent, wire_provider
):
    recorder = Recorder(httpx, (200, openai_text_stream('```json\n{"label": "fine"}\n```')))
    wire_provider["openai"] = recorder
    agent = make_agent(
        system_prompt="Judge.",
        output_schema=Verdict,
        output_mode="prompted",
        llm=LLMConfig(model="openai-wire:gpt-4o"),
    )
    result = await (await helix.execute(agent, "judge")).result()

    assert result.status == "completed" and result.output == {"label": "fine", "note": "none"}
    body = recorder.body
    assert "response_format" not in body and "tools" not in body
    system = body["messages"][0]["content"]
    assert system.startswith("Judge.\n\n## Output Requirement\nReply with only a JSON object")
    assert '"label":{"title":"Label","type":"string"}' in system


# --- OpenAI Responses API through the runtime ----------------------------------------


async def test_responses_api_carries_reasoning_items_across_turns(helix, make_agent, database_url):
    final_tool = wire.RESPONSES_REASONING_TOOL_CALL
    final_text = wire.openai_response(
        [
            wire.responses_reasoning("rs_2", "", "gAAAAB-enc-2"),
            wire.responses_message("Sunny in Paris."),
        ]
    )
    recorder = Recorder(
        httpx,
        (200, wire.responses_stream(final_tool)),
        (200, wire.responses_stream(final_text, ["Sunny ", "in Paris."])),
    )

    def factory(model: str, **_: Any) -> OpenAIResponsesAdapter:
        client = httpx.AsyncClient(transport=httpx.MockTransport(recorder.handle))
        return OpenAIResponsesAdapter(model, api_key="sk-test", http_client=client)

    register_provider("openai-responses-wire", factory)
    try:
        agent = make_agent(
            tools=[get_weather], llm=LLMConfig(model="openai-responses-wire:o4-mini")
        )
        result = await (await helix.execute(agent, "Weather in Paris?")).result()
    finally:
        unregister_provider("openai-responses-wire")

    assert result.status == "completed" and result.output == "Sunny in Paris."
    second = recorder.bodies[1]
    assert second["store"] is False and second["include"] == ["reasoning.encrypted_content"]
    kinds = [item.get("type", item.get("role")) for item in second["input"]]
    assert kinds == ["user", "reasoning", "function_call", "function_call_output"]
    assert second["input"][1] == {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "The user wants the weather: call the tool."}],
        "encrypted_content": "gAAAAB-enc-1",
    }
    messages = await helix.get_messages(result.session_id)
    assert messages[1].thinking[0].item_id == "rs_1"
    assert messages[3].thinking[0].signature == "gAAAAB-enc-2"
    usage = sql(
        database_url,
        "SELECT model, input_tokens, cache_read_tokens, reasoning_tokens, success "
        "FROM helix.usage WHERE run_id = %s AND kind = 'llm' ORDER BY step",
        result.run_id,
    )
    assert usage == [(wire.RESPONSES_MODEL, 1200, 1024, 256, True)] * 2
