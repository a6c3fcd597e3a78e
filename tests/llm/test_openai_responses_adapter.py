"""OpenAIResponsesAdapter through the real SDK, with an httpx MockTransport serving the
Responses API's documented JSON and SSE bodies."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from helix_dbos.llm.base import LLMProviderError
from helix_dbos.llm.openai_responses import OpenAIResponsesAdapter
from helix_dbos.llm.providers import resolve_adapter
from helix_dbos.orchestration.types import (
    ErrorStepResult,
    LLMRequest,
    LLMUsage,
    Message,
    OutputFormat,
    TextStepResult,
    ThinkingBlock,
    ToolCall,
    ToolCallsStepResult,
    ToolSpec,
)
from tests.llm import wire

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


def request(**overrides: Any) -> LLMRequest:
    fields: dict[str, Any] = {
        "agent_name": "tester",
        "model": "openai-responses:o4-mini",
        "messages": [
            Message(role="system", content="You are a weather bot."),
            Message(role="user", content="Weather in Paris?"),
        ],
    }
    return LLMRequest(**(fields | overrides))


def serve(
    *responses: tuple[int, Any], **kwargs: Any
) -> tuple[OpenAIResponsesAdapter, wire.Recorder]:
    recorder = wire.Recorder(httpx, *responses)
    adapter = OpenAIResponsesAdapter(api_key="test-key", http_client=recorder.client(), **kwargs)
    return adapter, recorder


#: A finished tool turn whose reasoning item must go back before its function call.
TOOL_TURN = [
    Message(role="system", content="You are a weather bot."),
    Message(role="user", content="Weather in Paris?"),
    Message(
        role="assistant",
        thinking=[
            ThinkingBlock(text="Call the tool.", signature="gAAAAB-enc-1", item_id="rs_1"),
            ThinkingBlock(text="from another provider", signature="sig-anthropic"),
        ],
        tool_calls=[ToolCall(id="call_w1", name="get_weather", arguments={"city": "Paris"})],
    ),
    Message(role="tool", tool_call_id="call_w1", tool_name="get_weather", content='"18C"'),
]


async def test_request_is_stateless_with_instructions_items_and_encrypted_reasoning() -> None:
    adapter, rec = serve((200, wire.openai_response([wire.responses_message("18C.")])))

    await adapter.generate_step(
        request(messages=TOOL_TURN, tools=[WEATHER], tool_choice="required", max_tokens=500)
    )

    body = rec.body
    assert rec.requests[0].url.path == "/v1/responses"
    assert body["model"] == "o4-mini" and body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["instructions"] == "You are a weather bot."
    assert body["max_output_tokens"] == 500
    assert body["input"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Call the tool."}],
            "encrypted_content": "gAAAAB-enc-1",
        },
        {
            "type": "function_call",
            "call_id": "call_w1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_w1", "output": '"18C"'},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": WEATHER.parameters,
            "strict": False,
            "description": "Current weather for a city.",
        }
    ]
    assert body["tool_choice"] == "required"


async def test_a_model_that_does_not_reason_is_not_asked_for_encrypted_reasoning() -> None:
    adapter, rec = serve((200, wire.openai_response([wire.responses_message("hi")])))
    await adapter.generate_step(request(model="openai-responses:gpt-4o"))
    assert "include" not in rec.body and rec.body["model"] == "gpt-4o"


async def test_reasoning_and_function_call_parse_with_usage() -> None:
    adapter, _ = serve((200, wire.RESPONSES_REASONING_TOOL_CALL))

    result = await adapter.generate_step(request(tools=[WEATHER]))

    assert result == ToolCallsStepResult(
        tool_calls=[ToolCall(id="call_w1", name="get_weather", arguments={"city": "Paris"})],
        thinking=[
            ThinkingBlock(
                text="The user wants the weather: call the tool.",
                signature="gAAAAB-enc-1",
                item_id="rs_1",
            )
        ],
        stop_reason="tool_use",
        usage=LLMUsage(
            model=wire.RESPONSES_MODEL,
            input_tokens=1200,
            output_tokens=300,
            cache_read_tokens=1024,
            reasoning_tokens=256,
        ),
    )


async def test_incomplete_at_max_output_tokens_is_a_max_tokens_text_result() -> None:
    body = wire.openai_response(
        [wire.responses_message("The weather in Pa")],
        status="incomplete",
        incomplete_reason="max_output_tokens",
    )
    adapter, _ = serve((200, body))
    result = await adapter.generate_step(request())
    assert isinstance(result, TextStepResult)
    assert result.stop_reason == "max_tokens" and result.content == "The weather in Pa"


async def test_native_output_is_a_strict_text_format_with_its_nulls_undone() -> None:
    output = OutputFormat(
        name="Verdict",
        json_schema={
            "type": "object",
            "properties": {"label": {"type": "string"}, "note": {"type": "string"}},
            "required": ["label"],
        },
        prompt="## Output Requirement",
    )
    reply = wire.openai_response([wire.responses_message('{"label": "ok", "note": null}')])
    adapter, rec = serve((200, reply))

    result = await adapter.generate_step(request(output_format=output))

    assert rec.body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "Verdict",
            "schema": {
                "type": "object",
                "properties": {
                    "label": {"type": "string"},
                    "note": {"type": ["string", "null"]},
                },
                "required": ["label", "note"],
                "additionalProperties": False,
            },
            "strict": True,
        }
    }
    assert isinstance(result, TextStepResult) and json.loads(result.content) == {"label": "ok"}


async def test_streaming_forwards_deltas_and_returns_the_final_response() -> None:
    final = wire.openai_response([wire.responses_message("Sunny in Paris.")])
    adapter, rec = serve((200, wire.responses_stream(final, ["Sunny ", "in Paris."])))
    deltas: list[str] = []

    async def on_delta(delta: str) -> None:
        deltas.append(delta)

    result = await adapter.generate_step(request(), on_text_delta=on_delta)

    assert rec.body["stream"] is True
    assert deltas == ["Sunny ", "in Paris."]
    assert isinstance(result, TextStepResult) and result.content == "Sunny in Paris."
    assert result.usage is not None and result.usage.input_tokens == 1200


async def _ignore(delta: str) -> None:
    pass


async def test_a_request_error_event_in_the_stream_fails_once_naming_the_model() -> None:
    adapter, rec = serve((200, wire.responses_stream_error("context_length_exceeded", "Too long")))
    result = await adapter.generate_step(request(), on_text_delta=_ignore)
    assert isinstance(result, ErrorStepResult)
    assert result.error == "OpenAI stream error: Too long"
    assert result.usage == LLMUsage(model=wire.RESPONSES_MODEL)
    assert len(rec.requests) == 1


@pytest.mark.parametrize("code", ["server_error", "503", None])
async def test_other_error_events_in_the_stream_are_retried(code: str | None) -> None:
    adapter, _ = serve((200, wire.responses_stream_error(code, "Try again")))
    with pytest.raises(LLMProviderError) as info:
        await adapter.generate_step(request(), on_text_delta=_ignore)
    assert info.value.retryable is True and "Try again" in str(info.value)


async def test_http_errors_follow_the_chat_adapter() -> None:
    limited = (429, wire.openai_error("Rate limit reached", "rate_limit_error"))
    adapter, _ = serve(limited)
    with pytest.raises(LLMProviderError) as info:
        await adapter.generate_step(request())
    assert info.value.retryable is True and info.value.status_code == 429

    bad = (400, wire.openai_error("Invalid input", "invalid_request_error", param="input"))
    adapter, _ = serve(bad)
    result = await adapter.generate_step(request())
    assert isinstance(result, ErrorStepResult)
    assert result.error == "OpenAI API error 400: Invalid input (param: input)"


def test_the_openai_responses_prefix_resolves_to_this_adapter() -> None:
    adapter = resolve_adapter("openai-responses:o4-mini", api_key="k")
    assert isinstance(adapter, OpenAIResponsesAdapter) and adapter.model == "o4-mini"


def test_a_thinking_block_checkpointed_before_item_id_existed_still_loads() -> None:
    """DBOS pickles the LLM step's output: a recovered run may hold an older block."""
    block = ThinkingBlock(text="t", signature="s")
    state = BaseModel.__getstate__(block)  # every field, as pydantic pickles a model
    del state["__dict__"]["item_id"]
    old = ThinkingBlock.__new__(ThinkingBlock)
    old.__setstate__(state)
    assert old.item_id is None and old.model_dump()["signature"] == "s"
