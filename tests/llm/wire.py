"""Provider wire formats for the adapter tests: documented JSON and SSE bodies.

Bodies follow the public API references (Anthropic Messages API and its
streaming events; OpenAI `chat.completion` / `chat.completion.chunk`).
`Recorder` is an `httpx`/`httpx2` MockTransport handler that serves queued
responses and keeps the JSON of every request the SDK sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from types import ModuleType
from typing import Any

# --- Transport ---------------------------------------------------------------


class Recorder:
    """Serves queued responses in order and records what was sent.

    `httpx_module` is `httpx2` for anthropic>=2 and `httpx` (or `httpx2`)
    for openai; both have the same `Response`/`MockTransport` API.
    """

    def __init__(self, httpx_module: ModuleType, *responses: tuple[int, Any]) -> None:
        self.httpx = httpx_module
        self.responses = list(responses)
        self.requests: list[Any] = []

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]

    @property
    def body(self) -> dict[str, Any]:
        """The JSON body of the only (or last) request."""
        return self.bodies[-1]

    def handle(self, request: Any) -> Any:
        self.requests.append(request)
        status, payload = self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]
        if isinstance(payload, bytes):  # an SSE body
            return self.httpx.Response(
                status, content=payload, headers={"content-type": "text/event-stream"}
            )
        return self.httpx.Response(status, json=payload)

    def client(self) -> Any:
        return self.httpx.AsyncClient(transport=self.httpx.MockTransport(self.handle))


def anthropic_sse(events: Iterable[dict[str, Any]]) -> bytes:
    """`event: <type>` / `data: <json>` frames, as Anthropic streams them."""
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def openai_sse(chunks: Iterable[dict[str, Any]]) -> bytes:
    """`data: <json>` frames ending with `data: [DONE]`, as OpenAI streams them."""
    frames = [f"data: {json.dumps(c)}\n\n" for c in chunks]
    return ("".join(frames) + "data: [DONE]\n\n").encode()


# --- Anthropic ---------------------------------------------------------------

ANTHROPIC_MODEL = "claude-sonnet-4-5-20250929"


def anthropic_message(
    content: list[dict[str, Any]],
    stop_reason: str | None = "end_turn",
    *,
    input_tokens: int = 25,
    output_tokens: int = 12,
    cache_read: int | None = None,
    cache_write: int | None = None,
) -> dict[str, Any]:
    """A `message` object as returned by POST /v1/messages."""
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": ANTHROPIC_MODEL,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": cache_write,
            "cache_read_input_tokens": cache_read,
        },
    }


ANTHROPIC_TEXT = anthropic_message(
    [{"type": "text", "text": "Paris is the capital of France."}],
    input_tokens=40,
    output_tokens=9,
    cache_read=1200,
    cache_write=300,
)

ANTHROPIC_TOOL_USE = anthropic_message(
    [
        {"type": "text", "text": "I'll look up the weather."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "get_weather",
            "input": {"city": "Paris", "unit": "celsius"},
        },
    ],
    "tool_use",
)

ANTHROPIC_PARALLEL_TOOL_USE = anthropic_message(
    [
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_02", "name": "get_time", "input": {"tz": "Europe/Paris"}},
    ],
    "tool_use",
)

ANTHROPIC_FINISH = anthropic_message(
    [
        {
            "type": "tool_use",
            "id": "toolu_fin",
            "name": "__finish__",
            "input": {"answer": "42", "confidence": 0.9},
        }
    ],
    "tool_use",
)

ANTHROPIC_THINKING_TOOL_USE = anthropic_message(
    [
        {
            "type": "thinking",
            "thinking": "The user wants the weather; I should call the tool.",
            "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
        },
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"},
        {"type": "tool_use", "id": "toolu_th", "name": "get_weather", "input": {"city": "Oslo"}},
    ],
    "tool_use",
)

ANTHROPIC_MAX_TOKENS_EMPTY = anthropic_message([], "max_tokens", output_tokens=1024)

ANTHROPIC_REFUSAL = anthropic_message([], "refusal", output_tokens=0)


def anthropic_error(error_type: str, message: str) -> dict[str, Any]:
    """An error body, e.g. `anthropic_error("invalid_request_error", "...")`."""
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }


def anthropic_stream_thinking_text_tool() -> bytes:
    """Thinking, then text in two deltas, then a tool_use whose input arrives in pieces."""
    message_start = {
        "type": "message_start",
        "message": {
            **anthropic_message([], None, input_tokens=472, output_tokens=2, cache_read=64),
            "stop_reason": None,
        },
    }
    return anthropic_sse(
        [
            message_start,
            {"type": "ping"},
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "Need the weather "},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "in Paris."},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIMsig"},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "Checking "},
            },
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "the weather."},
            },
            {"type": "content_block_stop", "index": 1},
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_stream",
                    "name": "get_weather",
                    "input": {},
                },
            },
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": ""},
            },
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": '{"city": "Pa'},
            },
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": 'ris", "days": 3}'},
            },
            {"type": "content_block_stop", "index": 2},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 89},
            },
            {"type": "message_stop"},
        ]
    )


def anthropic_stream_error() -> bytes:
    """A stream that starts and then reports `overloaded_error` (HTTP status stays 200)."""
    return anthropic_sse(
        [
            {
                "type": "message_start",
                "message": {**anthropic_message([], None), "stop_reason": None},
            },
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ]
    )


def anthropic_stream_tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> bytes:
    """One tool_use block whose input arrives as two JSON deltas."""
    text = json.dumps(arguments)
    half = len(text) // 2
    return anthropic_sse(
        [
            {
                "type": "message_start",
                "message": {**anthropic_message([], None, input_tokens=310), "stop_reason": None},
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": text[:half]},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": text[half:]},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 40},
            },
            {"type": "message_stop"},
        ]
    )


def anthropic_stream_gateway_error(
    code: object = 400, message: str = "Token limit reached"
) -> bytes:
    """A stream that starts, then reports an error event the way gateways in front of
    Claude send it: a `code` (an HTTP status) and no `type`."""
    return anthropic_sse(
        [
            {
                "type": "message_start",
                "message": {**anthropic_message([], None), "stop_reason": None},
            },
            {"type": "error", "error": {"code": code, "message": message}},
        ]
    )


# --- OpenAI ------------------------------------------------------------------

OPENAI_MODEL = "gpt-4o-2024-08-06"


def openai_completion(
    message: dict[str, Any],
    finish_reason: str = "stop",
    *,
    usage: dict[str, Any] | None = None,
    model: str = OPENAI_MODEL,
) -> dict[str, Any]:
    """A `chat.completion` object as returned by POST /v1/chat/completions."""
    return {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": 1741569952,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "refusal": None, "annotations": [], **message},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage
        or {
            "prompt_tokens": 19,
            "completion_tokens": 10,
            "total_tokens": 29,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_fc9f1d7035",
    }


def openai_tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


OPENAI_TEXT = openai_completion(
    {"content": "Paris is the capital of France."},
    usage={
        "prompt_tokens": 1500,
        "completion_tokens": 300,
        "total_tokens": 1800,
        "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 192, "audio_tokens": 0},
    },
)

OPENAI_TOOL_CALL = openai_completion(
    {
        "content": None,
        "tool_calls": [
            openai_tool_call("call_abc123", "get_weather", '{"city": "Paris", "unit": "celsius"}')
        ],
    },
    "tool_calls",
)

OPENAI_PARALLEL_TOOL_CALLS = openai_completion(
    {
        "content": None,
        "tool_calls": [
            openai_tool_call("call_1", "get_weather", '{"city": "Paris"}'),
            openai_tool_call("call_2", "get_time", '{"tz": "Europe/Paris"}'),
        ],
    },
    "tool_calls",
)

OPENAI_FINISH = openai_completion(
    {
        "content": None,
        "tool_calls": [
            openai_tool_call("call_fin", "__finish__", '{"answer": "42", "confidence": null}')
        ],
    },
    "tool_calls",
)

OPENAI_MALFORMED_ARGUMENTS = openai_completion(
    {
        "content": None,
        "tool_calls": [openai_tool_call("call_bad", "get_weather", '{"city": "Par')],
    },
    "tool_calls",
)

# vLLM / DeepSeek style: reasoning text next to the answer.
OPENAI_REASONING_TOOL_CALL = openai_completion(
    {
        "content": None,
        "reasoning_content": "The user asks for weather, so call get_weather.",
        "tool_calls": [openai_tool_call("chatcmpl-tool-9f1", "get_weather", '{"city": "Oslo"}')],
    },
    "tool_calls",
    model="deepseek-ai/DeepSeek-R1",
)

OPENAI_LENGTH_EMPTY = openai_completion({"content": ""}, "length")

OPENAI_REFUSAL = openai_completion(
    {"content": None, "refusal": "I'm sorry, I can't help with that request."}
)


def openai_error(
    message: str, error_type: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": 1694268190,
        "model": OPENAI_MODEL,
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def openai_stream_text_and_tool() -> bytes:
    """Text in three deltas, then a tool call whose arguments arrive in pieces, then usage."""
    call_start = {
        "index": 0,
        "id": "call_stream",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    return openai_sse(
        [
            _chunk({"role": "assistant", "content": "", "refusal": None}),
            _chunk({"content": "Checking"}),
            _chunk({"content": " the"}),
            _chunk({"content": " weather."}),
            _chunk({"tool_calls": [call_start]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city"'}}]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ': "Paris", '}}]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"days": 3}'}}]}),
            _chunk({}, "tool_calls"),
            {
                **_chunk({}),
                "choices": [],
                "usage": {
                    "prompt_tokens": 82,
                    "completion_tokens": 17,
                    "total_tokens": 99,
                    "prompt_tokens_details": {"cached_tokens": 64},
                    "completion_tokens_details": {"reasoning_tokens": 0},
                },
            },
        ]
    )


def openai_stream_parallel_with_reasoning() -> bytes:
    """vLLM-style `reasoning_content` deltas, then two interleaved tool calls."""
    return openai_sse(
        [
            _chunk({"role": "assistant", "content": None, "reasoning_content": "Two "}),
            _chunk({"reasoning_content": "lookups."}),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"ci'},
                        },
                        {
                            "index": 1,
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "get_time", "arguments": '{"tz": '},
                        },
                    ]
                }
            ),
            _chunk({"tool_calls": [{"index": 1, "function": {"arguments": '"UTC"}'}}]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Rome"}'}}]}),
            _chunk({}, "tool_calls"),
        ]
    )


def openai_stream_malformed_tool_call() -> bytes:
    """One chunk with a whole tool call whose arguments use Python quotes (not JSON)."""
    call = {
        "index": 0,
        "id": "call_x",
        "type": "function",
        "function": {"name": "get_weather", "arguments": "{'city': 'Paris'}"},
    }
    return openai_sse([_chunk({"tool_calls": [call]}, "tool_calls")])


def openai_stream_error_event(code: object = 400, message: str = "Token limit reached") -> bytes:
    """Recorded from an OpenAI-compatible gateway (OpenRouter): a 200 stream whose first
    chunks arrive, then an error object with a numeric `code` and no `type`."""
    frames = [
        f"data: {json.dumps(_chunk({'role': 'assistant', 'content': 'The answer'}))}\n\n",
        f"data: {json.dumps({'error': {'code': code, 'message': message}})}\n\n",
    ]
    return "".join(frames).encode()


# --- OpenAI Responses API ------------------------------------------------------

RESPONSES_MODEL = "o4-mini-2025-04-16"


def openai_response(
    output: list[dict[str, Any]],
    *,
    status: str = "completed",
    incomplete_reason: str | None = None,
    usage: dict[str, Any] | None = None,
    model: str = RESPONSES_MODEL,
) -> dict[str, Any]:
    """A `response` object as returned by POST /v1/responses."""
    return {
        "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
        "object": "response",
        "created_at": 1741476542,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
        "instructions": None,
        "max_output_tokens": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage
        or {
            "input_tokens": 1200,
            "input_tokens_details": {"cached_tokens": 1024},
            "output_tokens": 300,
            "output_tokens_details": {"reasoning_tokens": 256},
            "total_tokens": 1500,
        },
        "user": None,
        "metadata": {},
    }


def responses_reasoning(item_id: str, summary: str, encrypted: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": summary}] if summary else [],
        "encrypted_content": encrypted,
    }


def responses_function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def responses_message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_67ccd3acc8d48190a77525dc6de64b4104becb25c3d8a74b",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


RESPONSES_REASONING_TOOL_CALL = openai_response(
    [
        responses_reasoning("rs_1", "The user wants the weather: call the tool.", "gAAAAB-enc-1"),
        responses_function_call("call_w1", "get_weather", '{"city": "Paris"}'),
    ]
)


def responses_sse(events: Iterable[dict[str, Any]]) -> bytes:
    """`event: <type>` / `data: <json>` frames, as the Responses API streams them."""
    frames = []
    for n, event in enumerate(events):
        frames.append(
            f"event: {event['type']}\ndata: {json.dumps({**event, 'sequence_number': n})}\n\n"
        )
    return "".join(frames).encode()


def responses_stream(final: dict[str, Any], deltas: Iterable[str] = ()) -> bytes:
    """created, the text deltas, then `response.completed` (or the final status's event)."""
    started = {**final, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": started}]
    events += [
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": delta,
            "logprobs": [],
        }
        for delta in deltas
    ]
    last = {"completed": "response.completed", "incomplete": "response.incomplete"}
    events.append({"type": last.get(final["status"], "response.failed"), "response": final})
    return responses_sse(events)


def responses_stream_error(code: str | None, message: str) -> bytes:
    """A stream that starts, then sends an `error` event (the HTTP status stays 200)."""
    started = {**openai_response([]), "status": "in_progress", "usage": None}
    return responses_sse(
        [
            {"type": "response.created", "response": started},
            {"type": "error", "code": code, "message": message, "param": None},
        ]
    )
