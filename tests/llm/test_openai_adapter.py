"""OpenAIAdapter through the real SDK, with an httpx MockTransport as the API."""

from __future__ import annotations

import json
import pickle
from typing import Any

import httpx
import pytest

from helix_dbos.llm.base import LLMAdapter, LLMProviderError
from helix_dbos.llm.capabilities import ModelCapabilities
from helix_dbos.llm.openai import PARSE_ERROR_KEY, RAW_ARGUMENTS_KEY, OpenAIAdapter
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
        "confidence": {"type": "number", "default": 0.5},
    },
    "required": ["answer"],
}


def request(**overrides: Any) -> LLMRequest:
    fields: dict[str, Any] = {
        "agent_name": "tester",
        "model": "openai:gpt-4o",
        "messages": [Message(role="user", content="What's the weather in Paris?")],
    }
    return LLMRequest(**(fields | overrides))


def serve(
    *responses: tuple[int, Any], **adapter_kwargs: Any
) -> tuple[OpenAIAdapter, wire.Recorder]:
    recorder = wire.Recorder(httpx, *responses)
    adapter = OpenAIAdapter(api_key="test-key", http_client=recorder.client(), **adapter_kwargs)
    return adapter, recorder


#: System, user, an assistant turn with two tool calls (one malformed), two results.
TOOL_TRANSCRIPT = [
    Message(role="system", content="You are a weather bot."),
    Message(role="user", content="Weather and time in Paris?"),
    Message(
        role="assistant",
        thinking=[ThinkingBlock(text="private reasoning")],
        tool_calls=[
            ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"}),
            ToolCall(
                id="call_2",
                name="get_time",
                arguments={RAW_ARGUMENTS_KEY: '{"tz": CET', PARSE_ERROR_KEY: "invalid JSON"},
            ),
        ],
    ),
    Message(role="tool", tool_call_id="call_1", tool_name="get_weather", content="18C"),
    Message(
        role="tool",
        tool_call_id="call_2",
        tool_name="get_time",
        content="bad args",
        is_error=True,
    ),
]


@pytest.fixture(autouse=True)
def _no_base_url_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


# --- Request conversion ------------------------------------------------------


async def test_sends_system_message_tool_calls_and_tool_results() -> None:
    adapter, rec = serve((200, wire.OPENAI_TEXT))
    await adapter.generate_step(request(messages=TOOL_TRANSCRIPT, tools=[WEATHER]))

    body = rec.body
    assert body["model"] == "gpt-4o"
    assert body["messages"] == [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather and time in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    # the model's own malformed string is replayed, not our wrapper
                    "function": {"name": "get_time", "arguments": '{"tz": CET'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "bad args"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER.parameters,
            },
        }
    ]
    assert "stream" not in body
    assert "max_completion_tokens" not in body and "max_tokens" not in body


async def test_request_keys_are_sent_in_a_stable_order() -> None:
    """The raw JSON keeps the builders' key order (json.loads preserves it)."""
    adapter, rec = serve((200, wire.OPENAI_TEXT))
    strict_weather = WEATHER.model_copy(update={"strict": True})

    await adapter.generate_step(
        request(messages=TOOL_TRANSCRIPT, tools=[strict_weather], max_tokens=10, temperature=0)
    )

    body = rec.body
    assert list(body) == ["model", "messages", "max_completion_tokens", "temperature", "tools"]
    assert [list(m) for m in body["messages"]] == [
        ["role", "content"],
        ["role", "content"],
        ["role", "content", "tool_calls"],
        ["role", "tool_call_id", "content"],
        ["role", "tool_call_id", "content"],
    ]
    assert list(body["messages"][2]["tool_calls"][0]) == ["id", "type", "function"]
    assert list(body["tools"][0]) == ["type", "function"]
    assert list(body["tools"][0]["function"]) == ["name", "parameters", "description", "strict"]


async def test_max_tokens_field_override_and_validation() -> None:
    adapter, rec = serve(
        (200, wire.OPENAI_TEXT),
        base_url="http://localhost:8000/v1",
        max_tokens_field="max_completion_tokens",
    )

    await adapter.generate_step(request(max_tokens=64))

    assert rec.body["max_completion_tokens"] == 64 and "max_tokens" not in rec.body
    with pytest.raises(ValueError, match="max_new_tokens"):
        OpenAIAdapter(max_tokens_field="max_new_tokens")  # type: ignore[arg-type]  # on purpose


async def test_reasoning_is_sent_back_only_when_asked() -> None:
    transcript = [
        Message(role="user", content="hi"),
        Message(role="assistant", content="hello", thinking=[ThinkingBlock(text="greet back")]),
        Message(role="user", content="again"),
    ]
    quiet, quiet_rec = serve((200, wire.OPENAI_TEXT))
    chatty, chatty_rec = serve((200, wire.OPENAI_TEXT), send_reasoning=True)

    await quiet.generate_step(request(messages=transcript))
    await chatty.generate_step(request(messages=transcript))

    assert "reasoning_content" not in quiet_rec.body["messages"][1]
    assert chatty_rec.body["messages"][1]["reasoning_content"] == "greet back"


async def test_max_tokens_temperature_and_provider_options() -> None:
    adapter, rec = serve((200, wire.OPENAI_TEXT))

    await adapter.generate_step(
        request(max_tokens=300, temperature=0.1, provider_options={"reasoning_effort": "low"})
    )

    assert rec.body["max_completion_tokens"] == 300
    assert rec.body["temperature"] == 0.1
    assert rec.body["reasoning_effort"] == "low"


async def test_compatible_server_base_url_uses_max_tokens_and_no_strict() -> None:
    adapter, rec = serve((200, wire.OPENAI_FINISH), base_url="http://localhost:8000/v1")
    finish = ToolSpec(name="__finish__", parameters=FINISH_SCHEMA)

    await adapter.generate_step(
        request(
            model="openai:Qwen/Qwen2.5-7B-Instruct",
            max_tokens=64,
            tools=[finish],
            strict_output=True,
        )
    )

    assert str(rec.requests[0].url) == "http://localhost:8000/v1/chat/completions"
    assert rec.body["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert rec.body["max_tokens"] == 64
    assert "strict" not in rec.body["tools"][0]["function"]


async def test_base_url_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://ollama:11434/v1")
    adapter, rec = serve((200, wire.OPENAI_TEXT))

    await adapter.generate_step(request(model="openai:llama3.1:8b"))

    assert str(rec.requests[0].url) == "http://ollama:11434/v1/chat/completions"
    assert rec.body["model"] == "llama3.1:8b"


# --- Strict tools ------------------------------------------------------------


async def test_strict_output_sends_a_strict_finish_function() -> None:
    adapter, rec = serve((200, wire.OPENAI_FINISH))
    finish = ToolSpec(name="__finish__", description="Final answer.", parameters=FINISH_SCHEMA)

    await adapter.generate_step(request(tools=[WEATHER, finish], strict_output=True))

    weather_fn, finish_fn = (t["function"] for t in rec.body["tools"])
    assert "strict" not in weather_fn
    assert finish_fn["strict"] is True
    assert finish_fn["parameters"] == {
        "type": "object",
        "properties": {
            "answer": {"type": "string"},
            "confidence": {"type": ["number", "null"]},
        },
        "required": ["answer", "confidence"],
        "additionalProperties": False,
    }


async def test_strict_finish_nulls_for_optional_fields_are_dropped() -> None:
    adapter, _ = serve((200, wire.OPENAI_FINISH))  # sends {"answer": "42", "confidence": null}
    finish = ToolSpec(name="__finish__", parameters=FINISH_SCHEMA)

    strict = await adapter.generate_step(request(tools=[finish], strict_output=True))

    assert isinstance(strict, ToolCallsStepResult)
    assert strict.tool_calls[0].arguments == {"answer": "42"}  # so the default applies


async def test_toolspec_strict_applies_without_strict_output() -> None:
    adapter, rec = serve((200, wire.OPENAI_TOOL_CALL))

    await adapter.generate_step(request(tools=[WEATHER.model_copy(update={"strict": True})]))

    function = rec.body["tools"][0]["function"]
    assert function["strict"] is True
    assert function["parameters"]["required"] == ["city", "unit"]
    assert function["parameters"]["properties"]["unit"] == {"type": ["string", "null"]}


async def test_400_under_strict_names_the_schema_feature() -> None:
    provider_message = (
        "Invalid schema for function '__finish__': In context=('properties', 'tags'), "
        "'patternProperties' is not permitted."
    )
    adapter, _ = serve(
        (
            400,
            wire.openai_error(
                provider_message, "invalid_request_error", param="tools[0].function.parameters"
            ),
        )
    )
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}}
        },
        "required": ["tags"],
    }

    result = await adapter.generate_step(
        request(tools=[ToolSpec(name="__finish__", parameters=schema)], strict_output=True)
    )

    assert isinstance(result, ErrorStepResult)
    assert provider_message in result.error and "400" in result.error
    assert (
        "strict mode rejected tool '__finish__': schema uses 'patternProperties' at $.properties.tags"
        in result.error
    )


async def test_400_under_strict_names_a_dict_field() -> None:
    adapter, _ = serve((400, wire.openai_error("Invalid schema", "invalid_request_error")))
    schema = {
        "type": "object",
        "properties": {"scores": {"type": "object", "additionalProperties": {"type": "integer"}}},
        "required": ["scores"],
    }

    result = await adapter.generate_step(
        request(tools=[ToolSpec(name="__finish__", parameters=schema)], strict_output=True)
    )

    assert isinstance(result, ErrorStepResult)
    assert (
        "'additionalProperties (free-form object such as dict[str, X])' at $.properties.scores"
        in result.error
    )


# --- Response parsing --------------------------------------------------------


async def test_text_reply_with_usage_mapping() -> None:
    adapter, _ = serve((200, wire.OPENAI_TEXT))

    result = await adapter.generate_step(request())

    assert result == TextStepResult(
        content="Paris is the capital of France.",
        should_stop=False,
        stop_reason="end_turn",
        usage=LLMUsage(
            model=wire.OPENAI_MODEL,
            input_tokens=1500,
            output_tokens=300,
            cache_read_tokens=1024,
            reasoning_tokens=192,
        ),
    )


async def test_tool_call() -> None:
    adapter, _ = serve((200, wire.OPENAI_TOOL_CALL))

    result = await adapter.generate_step(request(tools=[WEATHER]))

    assert isinstance(result, ToolCallsStepResult)
    assert result.tool_calls == [
        ToolCall(
            id="call_abc123", name="get_weather", arguments={"city": "Paris", "unit": "celsius"}
        )
    ]
    assert result.stop_reason == "tool_use"
    assert result.content is None


async def test_parallel_tool_calls_keep_their_order() -> None:
    adapter, _ = serve((200, wire.OPENAI_PARALLEL_TOOL_CALLS))

    result = await adapter.generate_step(request(tools=[WEATHER]))

    assert isinstance(result, ToolCallsStepResult)
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("call_1", "get_weather", {"city": "Paris"}),
        ("call_2", "get_time", {"tz": "Europe/Paris"}),
    ]


async def test_finish_call() -> None:
    adapter, _ = serve((200, wire.OPENAI_FINISH))

    result = await adapter.generate_step(request(tools=[ToolSpec(name="__finish__")]))

    assert isinstance(result, ToolCallsStepResult)
    assert result.tool_calls == [
        ToolCall(id="call_fin", name="__finish__", arguments={"answer": "42", "confidence": None})
    ]


async def test_malformed_arguments_are_kept_not_raised() -> None:
    adapter, _ = serve((200, wire.OPENAI_MALFORMED_ARGUMENTS))

    result = await adapter.generate_step(request(tools=[WEATHER]))

    assert isinstance(result, ToolCallsStepResult)
    (call,) = result.tool_calls
    assert call.id == "call_bad" and call.name == "get_weather"
    assert call.arguments[RAW_ARGUMENTS_KEY] == '{"city": "Par'
    assert call.arguments[PARSE_ERROR_KEY].startswith("invalid JSON")


async def test_reasoning_content_becomes_thinking() -> None:
    adapter, _ = serve((200, wire.OPENAI_REASONING_TOOL_CALL))

    result = await adapter.generate_step(request(tools=[WEATHER]))

    assert isinstance(result, ToolCallsStepResult)
    assert result.thinking == [
        ThinkingBlock(text="The user asks for weather, so call get_weather.")
    ]
    assert result.tool_calls[0].arguments == {"city": "Oslo"}
    assert result.usage is not None and result.usage.model == "deepseek-ai/DeepSeek-R1"


async def test_empty_reply_at_length_is_a_max_tokens_text_result() -> None:
    adapter, _ = serve((200, wire.OPENAI_LENGTH_EMPTY))

    result = await adapter.generate_step(request())

    assert isinstance(result, TextStepResult)
    assert result.content == "" and result.stop_reason == "max_tokens"


async def test_refusal_field_maps_to_refusal() -> None:
    adapter, _ = serve((200, wire.OPENAI_REFUSAL))

    result = await adapter.generate_step(request())

    assert isinstance(result, TextStepResult)
    assert result.stop_reason == "refusal"
    assert result.content == "I'm sorry, I can't help with that request."


async def test_content_filter_finish_reason() -> None:
    adapter, _ = serve((200, wire.openai_completion({"content": ""}, "content_filter")))
    result = await adapter.generate_step(request())
    assert isinstance(result, TextStepResult) and result.stop_reason == "content_filter"


# --- Errors ------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 408, 409, 500, 503])
async def test_retryable_status_raises_after_exactly_one_attempt(status: int) -> None:
    adapter, rec = serve(
        (
            status,
            wire.openai_error(
                "Rate limit reached for gpt-4o", "requests", code="rate_limit_exceeded"
            ),
        )
    )

    with pytest.raises(LLMProviderError) as info:
        await adapter.generate_step(request())

    assert info.value.retryable is True
    assert info.value.status_code == status
    assert "Rate limit reached for gpt-4o" in str(info.value)
    assert len(rec.requests) == 1  # the SDK did not retry on its own


async def test_timeout_is_retryable() -> None:
    def slow(req: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=req)

    adapter = OpenAIAdapter(
        api_key="k", http_client=httpx.AsyncClient(transport=httpx.MockTransport(slow))
    )

    with pytest.raises(LLMProviderError) as info:
        await adapter.generate_step(request())

    assert info.value.retryable is True and info.value.status_code is None


@pytest.mark.parametrize("status", [400, 401, 404])
async def test_other_4xx_become_an_error_result_with_the_provider_message(status: int) -> None:
    message = "Invalid 'messages[1].content': string too long."
    adapter, rec = serve(
        (status, wire.openai_error(message, "invalid_request_error", param="messages[1].content"))
    )

    result = await adapter.generate_step(request())

    assert isinstance(result, ErrorStepResult)
    assert message in result.error and str(status) in result.error
    assert "messages[1].content" in result.error
    assert result.should_stop is True and result.stop_reason == "error"
    assert len(rec.requests) == 1


# --- Streaming ---------------------------------------------------------------


async def _on_delta(delta: str) -> None:
    pass


async def test_an_error_event_with_a_4xx_code_in_a_200_stream_fails_once() -> None:
    """Recorded from a gateway: `{"error": {"code": 400, "message": ...}}`, no `type`."""
    adapter, rec = serve((200, wire.openai_stream_error_event(400, "Token limit reached")))

    result = await adapter.generate_step(request(), on_text_delta=_on_delta)

    assert isinstance(result, ErrorStepResult)
    assert result.error == "OpenAI stream error 400: Token limit reached"
    assert result.usage is not None and result.usage.model == wire.OPENAI_MODEL
    assert len(rec.requests) == 1


@pytest.mark.parametrize("code", [429, 502, "500"])
async def test_an_error_event_with_a_retryable_code_is_retried(code: object) -> None:
    adapter, _ = serve((200, wire.openai_stream_error_event(code, "Upstream error")))

    with pytest.raises(LLMProviderError) as info:
        await adapter.generate_step(request(), on_text_delta=_on_delta)

    assert info.value.retryable is True and "Upstream error" in str(info.value)
    assert info.value.status_code == int(str(code))


async def test_an_error_event_naming_neither_code_nor_type_is_retried() -> None:
    body = wire.openai_sse([{"error": {"message": "stream interrupted"}}])
    adapter, _ = serve((200, body))

    with pytest.raises(LLMProviderError) as info:
        await adapter.generate_step(request(), on_text_delta=_on_delta)

    assert info.value.retryable is True and info.value.status_code is None


async def test_an_error_event_with_a_request_error_code_is_not_retried() -> None:
    body = wire.openai_sse(
        [{"error": {"code": "context_length_exceeded", "message": "Too many tokens"}}]
    )
    adapter, _ = serve((200, body))

    result = await adapter.generate_step(request(), on_text_delta=_on_delta)

    assert isinstance(result, ErrorStepResult)
    assert result.error == "OpenAI stream error: Too many tokens"
    assert result.usage is None  # no chunk arrived: no model to name


async def test_streaming_forwards_text_deltas_and_returns_the_whole_step() -> None:
    adapter, rec = serve((200, wire.openai_stream_text_and_tool()))
    deltas: list[str] = []

    async def on_delta(delta: str) -> None:
        deltas.append(delta)

    result = await adapter.generate_step(request(tools=[WEATHER]), on_text_delta=on_delta)

    assert rec.body["stream"] is True
    assert rec.body["stream_options"] == {"include_usage": True}
    assert deltas == ["Checking", " the", " weather."]
    assert result == ToolCallsStepResult(
        content="Checking the weather.",
        tool_calls=[
            ToolCall(id="call_stream", name="get_weather", arguments={"city": "Paris", "days": 3})
        ],
        stop_reason="tool_use",
        usage=LLMUsage(
            model=wire.OPENAI_MODEL, input_tokens=82, output_tokens=17, cache_read_tokens=64
        ),
    )


async def test_streaming_assembles_interleaved_parallel_calls_and_reasoning() -> None:
    adapter, _ = serve((200, wire.openai_stream_parallel_with_reasoning()))
    deltas: list[str] = []

    async def on_delta(delta: str) -> None:
        deltas.append(delta)

    result = await adapter.generate_step(request(tools=[WEATHER]), on_text_delta=on_delta)

    assert deltas == []
    assert isinstance(result, ToolCallsStepResult)
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("call_a", "get_weather", {"city": "Rome"}),
        ("call_b", "get_time", {"tz": "UTC"}),
    ]
    assert result.thinking == [ThinkingBlock(text="Two lookups.")]
    assert result.usage == LLMUsage(model=wire.OPENAI_MODEL)  # this server sent no usage


async def test_streamed_malformed_arguments_are_kept() -> None:
    chunks = wire.openai_stream_malformed_tool_call()
    adapter, _ = serve((200, chunks))

    async def on_delta(delta: str) -> None:
        pass

    result = await adapter.generate_step(request(tools=[WEATHER]), on_text_delta=on_delta)

    assert isinstance(result, ToolCallsStepResult)
    assert result.tool_calls[0].arguments[RAW_ARGUMENTS_KEY] == "{'city': 'Paris'}"


# --- Construction ------------------------------------------------------------


async def test_adapter_is_lazy_and_picklable() -> None:
    adapter, _ = serve((200, wire.OPENAI_TEXT))
    assert isinstance(adapter, LLMAdapter)
    assert adapter._client is None

    await adapter.generate_step(request())

    assert adapter._client is not None
    assert adapter.__getstate__()["_client"] is None
    clone = pickle.loads(pickle.dumps(OpenAIAdapter("openai:gpt-4o-mini", api_key="k")))
    assert clone.model == "gpt-4o-mini" and clone._client is None


async def test_missing_api_key_is_an_error_result_not_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    adapter = OpenAIAdapter()

    result = await adapter.generate_step(request())

    assert isinstance(result, ErrorStepResult)
    assert "api_key" in result.error or "OPENAI_API_KEY" in result.error


# --- Output modes and tool choice ----------------------------------------------

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "Verdict",
    "properties": {
        "label": {"type": "string"},
        "note": {"type": "string", "default": "none"},
    },
    "required": ["label"],
}
VERDICT_FORMAT = OutputFormat(
    name="Verdict", json_schema=VERDICT_SCHEMA, prompt="## Output Requirement\nJSON only."
)


async def test_native_output_sends_a_strict_json_schema_and_undoes_its_nulls() -> None:
    reply = wire.openai_completion({"content": '{"label": "good", "note": null}'})
    adapter, rec = serve((200, reply))

    result = await adapter.generate_step(
        request(
            messages=[Message(role="system", content="Judge."), Message(role="user", content="x")],
            output_format=VERDICT_FORMAT,
        )
    )

    assert rec.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "Verdict",
            "schema": {
                "type": "object",
                "title": "Verdict",
                "properties": {
                    "label": {"type": "string"},
                    "note": {"type": ["string", "null"]},
                },
                "required": ["label", "note"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }
    assert rec.body["messages"][0] == {"role": "system", "content": "Judge."}
    assert isinstance(result, TextStepResult)
    assert json.loads(result.content) == {"label": "good"}, "the strict null means not given"


async def test_native_output_on_a_compatible_server_is_a_plain_json_schema() -> None:
    adapter, rec = serve(
        (200, wire.openai_completion({"content": "{}"})), base_url="http://localhost:11434/v1"
    )
    await adapter.generate_step(request(output_format=VERDICT_FORMAT))
    assert rec.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Verdict", "schema": VERDICT_SCHEMA},
    }


async def test_without_native_output_the_schema_goes_into_the_system_prompt() -> None:
    adapter, rec = serve(
        (200, wire.openai_completion({"content": "{}"})),
        capabilities=ModelCapabilities(native_output=False),
    )
    await adapter.generate_step(
        request(
            messages=[Message(role="system", content="Judge."), Message(role="user", content="x")],
            output_format=VERDICT_FORMAT,
        )
    )
    assert "response_format" not in rec.body
    assert rec.body["messages"][0] == {
        "role": "system",
        "content": "Judge.\n\n## Output Requirement\nJSON only.",
    }


async def test_a_required_tool_call_is_forced_where_the_server_allows_it() -> None:
    reply = (200, wire.OPENAI_FINISH)
    adapter, rec = serve(reply)
    await adapter.generate_step(request(tools=[WEATHER], tool_choice="required"))
    assert rec.body["tool_choice"] == "required"

    compatible, rec2 = serve(reply, base_url="http://localhost:8000/v1")
    await compatible.generate_step(request(tools=[WEATHER], tool_choice="required"))
    assert "tool_choice" not in rec2.body, "compatible servers get the nudge instead"

    forced, rec3 = serve(reply, base_url="http://localhost:8000/v1", forced_tool_choice=True)
    await forced.generate_step(request(tools=[WEATHER], tool_choice="required"))
    assert rec3.body["tool_choice"] == "required"

    auto, rec4 = serve(reply)
    await auto.generate_step(request(tools=[WEATHER]))
    assert "tool_choice" not in rec4.body
