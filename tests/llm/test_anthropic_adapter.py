"""AnthropicAdapter through the real SDK, with an httpx2 MockTransport as the API."""

from __future__ import annotations

import pickle
from typing import Any

import httpx
import httpx2
import pytest

from helix_dbos.llm.anthropic import DEFAULT_MAX_TOKENS, AnthropicAdapter
from helix_dbos.llm.base import LLMAdapter, LLMProviderError
from helix_dbos.llm.capabilities import (
    ANTHROPIC_STRUCTURED_OUTPUTS_BETA,
    ModelCapabilities,
    anthropic_capabilities,
)
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
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    },
)

FINISH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "source": {
            "type": "object",
            "properties": {"url": {"type": "string"}},
            "required": ["url"],
        },
    },
    "required": ["answer"],
}


def request(**overrides: Any) -> LLMRequest:
    fields: dict[str, Any] = {
        "agent_name": "tester",
        "model": "anthropic:claude-sonnet-4-6",
        "messages": [Message(role="user", content="What's the weather in Paris?")],
    }
    return LLMRequest(**(fields | overrides))


#: System, user, an assistant turn with thinking and two tool calls, two results, user.
TOOL_TRANSCRIPT = [
    Message(role="system", content="You are a weather bot."),
    Message(role="user", content="Weather and time in Paris?"),
    Message(
        role="assistant",
        content="Let me check both.",
        thinking=[
            ThinkingBlock(text="Two tools needed.", signature="sig-abc"),
            ThinkingBlock(text="opaque-data", redacted=True),
        ],
        tool_calls=[
            ToolCall(id="toolu_1", name="get_weather", arguments={"city": "Paris"}),
            ToolCall(id="toolu_2", name="get_time", arguments={"tz": "CET"}),
        ],
    ),
    Message(role="tool", tool_call_id="toolu_1", tool_name="get_weather", content="18C"),
    Message(
        role="tool", tool_call_id="toolu_2", tool_name="get_time", content="boom", is_error=True
    ),
    Message(role="user", content="Thanks, and tomorrow?"),
]


def serve(*responses: tuple[int, Any]) -> tuple[AnthropicAdapter, wire.Recorder]:
    recorder = wire.Recorder(httpx2, *responses)
    return AnthropicAdapter(api_key="test-key", http_client=recorder.client()), recorder


# --- Request conversion ------------------------------------------------------


async def test_sends_system_param_merged_tool_results_and_signed_thinking() -> None:
    adapter, rec = serve((200, wire.ANTHROPIC_TEXT))
    await adapter.generate_step(request(messages=TOOL_TRANSCRIPT, tools=[WEATHER]))

    body = rec.body
    assert body["system"] == "You are a weather bot."
    assert body["model"] == "claude-sonnet-4-6"
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS == 4096
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Two tools needed.", "signature": "sig-abc"},
        {"type": "redacted_thinking", "data": "opaque-data"},
        {"type": "text", "text": "Let me check both."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {"tz": "CET"}},
    ]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom", "is_error": True},
        {"type": "text", "text": "Thanks, and tomorrow?"},
    ]
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": WEATHER.parameters,
        }
    ]
    assert "stream" not in body
    assert len(rec.requests) == 1


async def test_request_keys_are_sent_in_a_stable_order() -> None:
    """The raw JSON keeps the builders' key order (json.loads preserves it)."""
    adapter, rec = serve((200, wire.ANTHROPIC_TEXT))
    strict_weather = WEATHER.model_copy(update={"strict": True})

    await adapter.generate_step(
        request(messages=TOOL_TRANSCRIPT, tools=[strict_weather], temperature=0)
    )

    body = rec.body
    assert list(body) == ["max_tokens", "messages", "model", "system", "tools", "temperature"]
    assert [list(m) for m in body["messages"]] == [["role", "content"]] * 3
    assert [list(b) for b in body["messages"][1]["content"]] == [
        ["type", "thinking", "signature"],
        ["type", "data"],
        ["type", "text"],
        ["type", "id", "name", "input"],
        ["type", "id", "name", "input"],
    ]
    assert [list(b) for b in body["messages"][2]["content"]] == [
        ["type", "tool_use_id", "content"],
        ["type", "tool_use_id", "content", "is_error"],
        ["type", "text"],
    ]
    assert list(body["tools"][0]) == ["name", "input_schema", "description", "strict"]


async def test_max_tokens_temperature_and_provider_options_reach_the_body() -> None:
    adapter, rec = serve((200, wire.ANTHROPIC_TEXT))
    thinking = {"type": "enabled", "budget_tokens": 1024}

    await adapter.generate_step(
        request(max_tokens=2048, temperature=0.2, provider_options={"thinking": thinking})
    )

    assert rec.body["max_tokens"] == 2048
    assert rec.body["temperature"] == 0.2
    assert rec.body["thinking"] == thinking


async def test_no_temperature_key_when_unset() -> None:
    adapter, rec = serve((200, wire.ANTHROPIC_TEXT))
    await adapter.generate_step(request())
    assert "temperature" not in rec.body
    assert "system" not in rec.body


# --- Strict tools ------------------------------------------------------------


async def test_strict_output_sends_strict_finish_tool_with_closed_schema() -> None:
    adapter, rec = serve((200, wire.ANTHROPIC_FINISH))
    finish = ToolSpec(name="__finish__", description="Final answer.", parameters=FINISH_SCHEMA)

    await adapter.generate_step(request(tools=[WEATHER, finish], strict_output=True))

    weather_tool, finish_tool = rec.body["tools"]
    assert "strict" not in weather_tool
    assert finish_tool["strict"] is True
    schema = finish_tool["input_schema"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["source"]["additionalProperties"] is False
    assert schema["required"] == ["answer"]  # Anthropic keeps optional fields optional
    beta = rec.requests[0].headers["anthropic-beta"]
    assert ANTHROPIC_STRUCTURED_OUTPUTS_BETA in beta.split(",")


async def test_toolspec_strict_applies_to_that_tool_and_keeps_user_betas() -> None:
    adapter, rec = serve((200, wire.ANTHROPIC_TOOL_USE))
    strict_weather = WEATHER.model_copy(update={"strict": True})

    await adapter.generate_step(
        request(
            tools=[strict_weather],
            provider_options={
                "extra_headers": {"anthropic-beta": "token-efficient-tools-2025-02-19"}
            },
        )
    )

    assert rec.body["tools"][0]["strict"] is True
    assert rec.requests[0].headers["anthropic-beta"].split(",") == [
        "token-efficient-tools-2025-02-19",
        ANTHROPIC_STRUCTURED_OUTPUTS_BETA,
    ]


async def test_strict_is_dropped_silently_for_models_without_structured_outputs() -> None:
    adapter, rec = serve((200, wire.ANTHROPIC_FINISH))
    finish = ToolSpec(name="__finish__", parameters=FINISH_SCHEMA)

    result = await adapter.generate_step(
        request(model="anthropic:claude-3-5-sonnet-20241022", tools=[finish], strict_output=True)
    )

    assert isinstance(result, ToolCallsStepResult)
    assert "strict" not in rec.body["tools"][0]
    assert rec.body["tools"][0]["input_schema"] == FINISH_SCHEMA
    assert "anthropic-beta" not in rec.requests[0].headers


async def test_400_under_strict_names_the_schema_feature() -> None:
    provider_message = "tools.0.custom.input_schema: JSON schema is invalid for strict mode"
    adapter, _ = serve((400, wire.anthropic_error("invalid_request_error", provider_message)))
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}}
        },
        "required": ["tags"],
    }
    finish = ToolSpec(name="__finish__", parameters=schema)

    result = await adapter.generate_step(request(tools=[finish], strict_output=True))

    assert isinstance(result, ErrorStepResult)
    assert provider_message in result.error
    assert "400" in result.error
    assert (
        "strict mode rejected tool '__finish__': schema uses 'patternProperties' at $.properties.tags"
        in result.error
    )


# --- Response parsing --------------------------------------------------------


async def test_text_reply_with_usage_mapping() -> None:
    adapter, _ = serve((200, wire.ANTHROPIC_TEXT))

    result = await adapter.generate_step(request())

    assert result == TextStepResult(
        content="Paris is the capital of France.",
        should_stop=False,
        stop_reason="end_turn",
        usage=LLMUsage(
            model=wire.ANTHROPIC_MODEL,
            # helix's one definition: every input token, cached or not (40 + 1200 + 300);
            # Anthropic's own input_tokens (40) counts only those after the cache.
            input_tokens=1540,
            output_tokens=9,
            cache_read_tokens=1200,
            cache_write_tokens=300,
        ),
    )


async def test_tool_call() -> None:
    adapter, _ = serve((200, wire.ANTHROPIC_TOOL_USE))

    result = await adapter.generate_step(request(tools=[WEATHER]))

    assert isinstance(result, ToolCallsStepResult)
    assert result.content == "I'll look up the weather."
    assert result.tool_calls == [
        ToolCall(
            id="toolu_01A09q90qw90lq917835lq9",
            name="get_weather",
            arguments={"city": "Paris", "unit": "celsius"},
        )
    ]
    assert result.stop_reason == "tool_use"
    assert result.usage is not None and result.usage.input_tokens == 25


async def test_parallel_tool_calls_keep_their_order() -> None:
    adapter, _ = serve((200, wire.ANTHROPIC_PARALLEL_TOOL_USE))

    result = await adapter.generate_step(request(tools=[WEATHER]))

    assert isinstance(result, ToolCallsStepResult)
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("toolu_01", "get_weather", {"city": "Paris"}),
        ("toolu_02", "get_time", {"tz": "Europe/Paris"}),
    ]
    assert result.content is None


async def test_finish_call_is_a_tool_call_with_the_output_as_arguments() -> None:
    adapter, _ = serve((200, wire.ANTHROPIC_FINISH))

    result = await adapter.generate_step(request(tools=[ToolSpec(name="__finish__")]))

    assert isinstance(result, ToolCallsStepResult)
    assert result.tool_calls == [
        ToolCall(id="toolu_fin", name="__finish__", arguments={"answer": "42", "confidence": 0.9})
    ]


async def test_thinking_with_tool_use_keeps_signature_and_redacted_data() -> None:
    adapter, _ = serve((200, wire.ANTHROPIC_THINKING_TOOL_USE))

    result = await adapter.generate_step(request(tools=[WEATHER]))

    assert isinstance(result, ToolCallsStepResult)
    assert result.thinking == [
        ThinkingBlock(
            text="The user wants the weather; I should call the tool.",
            signature="EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
        ),
        ThinkingBlock(text="EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw", redacted=True),
    ]
    assert result.tool_calls[0].arguments == {"city": "Oslo"}


async def test_thinking_round_trips_into_the_next_request() -> None:
    first, _ = serve((200, wire.ANTHROPIC_THINKING_TOOL_USE))
    step = await first.generate_step(request(tools=[WEATHER]))
    assert isinstance(step, ToolCallsStepResult)
    transcript = [
        Message(role="user", content="Weather in Oslo?"),
        Message(role="assistant", tool_calls=step.tool_calls, thinking=step.thinking),
        Message(role="tool", tool_call_id="toolu_th", tool_name="get_weather", content="-3C"),
    ]
    second, rec = serve((200, wire.ANTHROPIC_TEXT))

    await second.generate_step(request(messages=transcript, tools=[WEATHER]))

    blocks = rec.body["messages"][1]["content"]
    assert [b["type"] for b in blocks] == ["thinking", "redacted_thinking", "tool_use"]
    assert blocks[0]["signature"] == "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
    assert blocks[1]["data"] == "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"


async def test_empty_reply_at_max_tokens_is_a_text_result() -> None:
    adapter, _ = serve((200, wire.ANTHROPIC_MAX_TOKENS_EMPTY))

    result = await adapter.generate_step(request())

    assert isinstance(result, TextStepResult)
    assert result.content == ""
    assert result.stop_reason == "max_tokens"
    assert result.usage is not None and result.usage.output_tokens == 1024


async def test_refusal_stop_reason() -> None:
    adapter, _ = serve((200, wire.ANTHROPIC_REFUSAL))
    result = await adapter.generate_step(request())
    assert isinstance(result, TextStepResult) and result.stop_reason == "refusal"


# --- Errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (429, "rate_limit_error"),
        (529, "overloaded_error"),
        (500, "api_error"),
        (408, "timeout_error"),
        (409, "conflict_error"),
    ],
)
async def test_retryable_status_raises_after_exactly_one_attempt(
    status: int, error_type: str
) -> None:
    adapter, rec = serve((status, wire.anthropic_error(error_type, "Please slow down")))

    with pytest.raises(LLMProviderError) as info:
        await adapter.generate_step(request())

    assert info.value.retryable is True
    assert info.value.status_code == status
    assert "Please slow down" in str(info.value)
    assert len(rec.requests) == 1  # the SDK did not retry on its own


async def test_connection_error_is_retryable() -> None:
    def refuse(req: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=req)

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(refuse))
    adapter = AnthropicAdapter(api_key="k", http_client=client)

    with pytest.raises(LLMProviderError) as info:
        await adapter.generate_step(request())

    assert info.value.retryable is True
    assert info.value.status_code is None


@pytest.mark.parametrize("status", [400, 401, 404])
async def test_other_4xx_become_an_error_result_with_the_provider_message(status: int) -> None:
    message = "messages.0.content: Input should be a valid list"
    adapter, rec = serve((status, wire.anthropic_error("invalid_request_error", message)))

    result = await adapter.generate_step(request())

    assert isinstance(result, ErrorStepResult)
    assert message in result.error and str(status) in result.error
    assert result.should_stop is True and result.stop_reason == "error"
    assert len(rec.requests) == 1


# --- Streaming ---------------------------------------------------------------


async def test_streaming_forwards_text_deltas_and_returns_the_whole_step() -> None:
    adapter, rec = serve((200, wire.anthropic_stream_thinking_text_tool()))
    deltas: list[str] = []

    async def on_delta(delta: str) -> None:
        deltas.append(delta)

    result = await adapter.generate_step(request(tools=[WEATHER]), on_text_delta=on_delta)

    assert rec.body["stream"] is True
    assert deltas == ["Checking ", "the weather."]
    assert result == ToolCallsStepResult(
        content="Checking the weather.",
        tool_calls=[
            ToolCall(id="toolu_stream", name="get_weather", arguments={"city": "Paris", "days": 3})
        ],
        thinking=[ThinkingBlock(text="Need the weather in Paris.", signature="EqQBCgIYAhIMsig")],
        stop_reason="tool_use",
        usage=LLMUsage(
            model=wire.ANTHROPIC_MODEL,
            input_tokens=472 + 64,
            output_tokens=89,
            cache_read_tokens=64,
        ),
    )


async def test_a_failing_delta_listener_does_not_fail_the_step() -> None:
    adapter, _ = serve((200, wire.anthropic_stream_thinking_text_tool()))
    calls: list[str] = []

    async def broken(delta: str) -> None:
        calls.append(delta)
        raise RuntimeError("websocket closed")

    result = await adapter.generate_step(request(tools=[WEATHER]), on_text_delta=broken)

    assert calls == ["Checking "]  # dropped after the first failure
    assert isinstance(result, ToolCallsStepResult) and result.content == "Checking the weather."


async def test_overloaded_error_inside_the_stream_is_retryable() -> None:
    adapter, _ = serve((200, wire.anthropic_stream_error()))

    async def on_delta(delta: str) -> None:
        pass

    with pytest.raises(LLMProviderError) as info:
        await adapter.generate_step(request(), on_text_delta=on_delta)

    assert info.value.retryable is True
    assert "overloaded_error" in str(info.value)
    assert info.value.status_code is None  # the HTTP status was 200


async def _on_delta(delta: str) -> None:
    pass


async def test_a_gateway_error_event_with_a_4xx_code_fails_once_with_its_message() -> None:
    adapter, rec = serve((200, wire.anthropic_stream_gateway_error(400, "Token limit reached")))

    result = await adapter.generate_step(request(), on_text_delta=_on_delta)

    assert isinstance(result, ErrorStepResult)
    assert result.error == "Anthropic stream error 400: Token limit reached"
    # message_start named the model before the error: the failed call's row carries it
    assert result.usage == LLMUsage(model=wire.ANTHROPIC_MODEL)
    assert len(rec.requests) == 1


@pytest.mark.parametrize("code", [429, "503", 529])
async def test_a_gateway_error_event_with_a_retryable_code_is_retried(code: object) -> None:
    adapter, _ = serve((200, wire.anthropic_stream_gateway_error(code, "Upstream busy")))

    with pytest.raises(LLMProviderError) as info:
        await adapter.generate_step(request(), on_text_delta=_on_delta)

    assert info.value.retryable is True and "Upstream busy" in str(info.value)
    assert info.value.status_code == int(str(code))


async def test_an_invalid_request_error_event_in_the_stream_is_not_retried() -> None:
    body = wire.anthropic_sse(
        [{"type": "error", "error": {"type": "invalid_request_error", "message": "Too long"}}]
    )
    adapter, _ = serve((200, body))

    result = await adapter.generate_step(request(), on_text_delta=_on_delta)

    assert isinstance(result, ErrorStepResult)
    assert result.error == "Anthropic stream error (invalid_request_error): Too long"
    assert result.usage is None  # no message_start: the provider named no model


# --- Construction ------------------------------------------------------------


async def test_adapter_is_lazy_and_picklable() -> None:
    adapter, _ = serve((200, wire.ANTHROPIC_TEXT))
    assert isinstance(adapter, LLMAdapter)
    assert adapter._client is None  # nothing built before the first call

    await adapter.generate_step(request())

    assert adapter._client is not None
    state = adapter.__getstate__()
    assert state["_client"] is None and state["_client_loop"] is None
    clone = pickle.loads(pickle.dumps(AnthropicAdapter("claude-haiku-4-5", api_key="k")))
    assert clone.model == "claude-haiku-4-5" and clone._client is None


def test_legacy_httpx_client_is_refused_with_a_clear_message() -> None:
    with pytest.raises(TypeError, match="httpx2"):
        AnthropicAdapter(http_client=httpx.AsyncClient())  # type: ignore[arg-type]


# --- Output modes and tool choice ----------------------------------------------

VERDICT_FORMAT = OutputFormat(
    name="Verdict",
    json_schema={
        "type": "object",
        "properties": {"label": {"type": "string"}, "note": {"type": "string"}},
        "required": ["label"],
    },
    prompt="## Output Requirement\nJSON only.",
)


async def test_native_output_sends_output_config_with_a_closed_schema() -> None:
    reply = wire.anthropic_message([{"type": "text", "text": '{"label": "good"}'}])
    adapter, rec = serve((200, reply))

    result = await adapter.generate_step(
        request(
            model="anthropic:claude-sonnet-4-6",
            messages=[Message(role="system", content="Judge."), Message(role="user", content="x")],
            output_format=VERDICT_FORMAT,
        )
    )

    assert rec.body["output_config"] == {
        "format": {
            "type": "json_schema",
            "schema": {
                "type": "object",
                "properties": {"label": {"type": "string"}, "note": {"type": "string"}},
                "required": ["label"],
                "additionalProperties": False,
            },
        }
    }
    assert rec.body["system"] == "Judge."
    assert ANTHROPIC_STRUCTURED_OUTPUTS_BETA in rec.requests[0].headers["anthropic-beta"]
    assert isinstance(result, TextStepResult) and result.content == '{"label": "good"}'


async def test_a_model_without_structured_outputs_gets_the_schema_in_the_system_prompt() -> None:
    reply = wire.anthropic_message([{"type": "text", "text": "{}"}])
    rec = wire.Recorder(httpx2, (200, reply))
    # the capability table's answer for a model before structured outputs (claude-sonnet-4)
    assert anthropic_capabilities("claude-sonnet-4-20250514").native_output is False
    adapter = AnthropicAdapter(
        api_key="k", http_client=rec.client(), capabilities=ModelCapabilities()
    )

    await adapter.generate_step(
        request(
            model="anthropic:claude-sonnet-4-6",
            messages=[Message(role="system", content="Judge."), Message(role="user", content="x")],
            output_format=VERDICT_FORMAT,
        )
    )

    assert "output_config" not in rec.body
    assert rec.body["system"] == "Judge.\n\n## Output Requirement\nJSON only."
    assert "anthropic-beta" not in rec.requests[0].headers


async def test_a_required_tool_call_is_forced_except_with_extended_thinking() -> None:
    adapter, rec = serve((200, wire.ANTHROPIC_FINISH))
    await adapter.generate_step(request(tools=[WEATHER], tool_choice="required"))
    assert rec.body["tool_choice"] == {"type": "any"}

    thinking = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    await adapter.generate_step(
        request(tools=[WEATHER], tool_choice="required", provider_options=thinking)
    )
    assert "tool_choice" not in rec.body, "the API refuses a forced tool with thinking"

    await adapter.generate_step(request(tools=[WEATHER]))
    assert "tool_choice" not in rec.body
