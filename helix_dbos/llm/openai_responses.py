"""OpenAI Responses API adapter (`openai-responses:` models).

OpenAI serves its reasoning models best through the Responses API: their
reasoning items can be handed back on the next turn, so the model keeps its
chain of thought across tool calls. Helix keeps the history in PostgreSQL, so
requests are stateless (`store: false`) and reasoning items come back
encrypted (`include: ["reasoning.encrypted_content"]`, for reasoning models):
each is stored as a `ThinkingBlock` (summary as `text`, encrypted content as
`signature`, item id as `item_id`) on the assistant message and replayed, in
order, before that turn's function calls. Other adapters skip such blocks.

Same semantics as the Chat Completions adapter: one HTTP call per step with SDK
retries off (DBOS retries), usage in helix's one definition (input tokens
include cached ones), streaming text deltas, retryable errors raised and others
returned as an `ErrorStepResult`, strict tools and native output with the
schema made compliant and its nulls undone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

import openai
from openai.types.responses import (
    EasyInputMessageParam,
    FunctionToolParam,
    Response,
    ResponseFunctionToolCallParam,
    ResponseIncludable,
    ResponseInputParam,
    ResponseReasoningItemParam,
    ResponseTextConfigParam,
    ResponseUsage,
)
from openai.types.responses.response_input_param import FunctionCallOutput
from openai.types.shared_params import Reasoning

from helix_dbos.llm.base import LLMProviderError, TextDeltaCallback
from helix_dbos.llm.capabilities import (
    ModelCapabilities,
    StrictSchemas,
    drop_strict_nulls,
    error_status,
    is_openai_reasoning_model,
    is_retryable_stream_error,
    make_openai_strict_schema,
)
from helix_dbos.llm.openai import (
    RAW_ARGUMENTS_KEY,
    OpenAIAdapter,
    arguments_json,
    extra_options,
    parse_arguments,
    status_error,
    undo_strict_nulls,
)
from helix_dbos.llm.sdk_adapter import safe_forward, wants_strict
from helix_dbos.orchestration.parts import (
    Attachment,
    DocumentUrl,
    ImageUrl,
    StoredBlob,
    data_url,
    is_text_document,
    text_of,
    unresolved,
)
from helix_dbos.orchestration.types import (
    ErrorStepResult,
    LLMRequest,
    LLMUsage,
    Message,
    StepResult,
    StopReason,
    TextStepResult,
    ThinkingBlock,
    ToolCall,
    ToolCallsStepResult,
)

logger = logging.getLogger(__name__)

PROVIDER_PREFIX = "openai-responses:"

INCOMPLETE_REASONS: dict[str, StopReason] = {
    "max_output_tokens": "max_tokens",
    "content_filter": "content_filter",
}


class _RequiredResponseParams(TypedDict):
    model: str
    input: ResponseInputParam
    store: bool


class ResponseParams(_RequiredResponseParams, total=False):
    """The keyword arguments for `responses.create` that we send."""

    instructions: str
    max_output_tokens: int
    temperature: float
    tools: list[FunctionToolParam]
    tool_choice: Literal["none", "auto", "required"]
    text: ResponseTextConfigParam
    include: list[ResponseIncludable]
    reasoning: Reasoning
    extra_headers: dict[str, str]
    extra_body: dict[str, Any]


class OpenAIResponsesAdapter(OpenAIAdapter):
    """`LLMAdapter` for the Responses API; built like `OpenAIAdapter` (same client,
    capabilities and options), `send_reasoning` aside: reasoning items always go back."""

    def __repr__(self) -> str:
        return f"OpenAIResponsesAdapter(model={self.model!r}, base_url={self.base_url!r})"

    def model_name(self, request: LLMRequest) -> str:
        model = self.model or request.model.removeprefix(PROVIDER_PREFIX)
        return model.removeprefix("openai:")

    async def generate_step(
        self, request: LLMRequest, on_text_delta: TextDeltaCallback | None = None
    ) -> StepResult:
        model = self.model_name(request)
        caps = self.model_capabilities(model)
        params, strict_tools = build_params(request, model, caps)
        try:
            client = self._get_client()
        except openai.OpenAIError as exc:  # e.g. no API key: a config error, not transient
            return ErrorStepResult(error=f"OpenAI client configuration error: {exc}")
        seen = _StreamSeen()
        try:
            if on_text_delta is None:
                response = await client.responses.create(**params)
            else:
                response = await _stream_response(client, params, on_text_delta, seen)
        except openai.APIStatusError as exc:
            return status_error(exc, strict_tools)
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            raise LLMProviderError(f"OpenAI connection error: {exc}", retryable=True) from exc
        except _StreamError as exc:
            return _stream_error(exc, seen.model)
        originals = {s.name: s.parameters for s in request.tools if s.name in strict_tools}
        result = parse_response(response, strict_schemas=originals)
        output = request.output_format
        if output is not None and "text" in params and caps.strict_tools:
            return undo_strict_nulls(result, output.json_schema)
        return result


# --- Request -----------------------------------------------------------------


def build_params(
    request: LLMRequest, model: str, caps: ModelCapabilities
) -> tuple[ResponseParams, StrictSchemas]:
    """Keyword arguments for `responses.create`, and the strict tools' schemas."""
    instructions, items = convert_messages(request.messages)
    output = request.output_format
    if output is not None and not caps.native_output:  # the prompted mode instead
        instructions = (
            f"{instructions.rstrip()}\n\n{output.prompt}" if instructions else output.prompt
        )
    params: ResponseParams = {"model": model, "input": items, "store": False}
    if instructions:
        params["instructions"] = instructions
    if request.max_tokens is not None:
        params["max_output_tokens"] = request.max_tokens
    if request.temperature is not None:
        params["temperature"] = request.temperature
    strict_tools: StrictSchemas = {}
    if request.tools:
        params["tools"] = [_tool(spec, request, caps, strict_tools) for spec in request.tools]
        if request.tool_choice == "required" and caps.forced_tool_choice:
            params["tool_choice"] = "required"
    if output is not None and caps.native_output:
        strict = caps.strict_tools
        schema = make_openai_strict_schema(output.json_schema) if strict else output.json_schema
        params["text"] = {
            "format": {
                "type": "json_schema",
                "name": output.name,
                "schema": schema,
                "strict": strict,
            }
        }
    if is_openai_reasoning_model(model):
        # Stateless requests: reasoning comes back encrypted so the next turn can carry it.
        params["include"] = ["reasoning.encrypted_content"]
    headers, body = extra_options(request)
    if headers is not None:
        params["extra_headers"] = headers
    if body:
        params["extra_body"] = body
    return params, strict_tools


def _tool(
    spec: Any, request: LLMRequest, caps: ModelCapabilities, strict_tools: StrictSchemas
) -> FunctionToolParam:
    """A function tool; `strict` is always sent, since this API defaults it to true."""
    strict = caps.strict_tools and wants_strict(spec, request)
    parameters = make_openai_strict_schema(spec.parameters) if strict else spec.parameters
    if strict:
        strict_tools[spec.name] = parameters
    tool: FunctionToolParam = {
        "type": "function",
        "name": spec.name,
        "parameters": parameters,
        "strict": strict,
    }
    if spec.description:
        tool["description"] = spec.description
    return tool


def convert_messages(messages: list[Message]) -> tuple[str, ResponseInputParam]:
    """Our transcript as (`instructions`, input items): a leading system message is the
    instructions; an assistant turn is its reasoning items, its text, its function calls."""
    instructions = ""
    if messages and messages[0].role == "system":
        instructions, messages = messages[0].content or "", messages[1:]
    items: ResponseInputParam = []
    for message in messages:
        if message.role == "tool":
            result: FunctionCallOutput = {
                "type": "function_call_output",
                "call_id": message.tool_call_id or "",
                "output": _tool_output(message),
            }
            items.append(result)
        elif message.role == "assistant":
            items += _assistant_items(message)
        else:
            role: Literal["system", "user"] = "system" if message.role == "system" else "user"
            content: Any = _input_content(message) if message.attachments else None
            text: EasyInputMessageParam = {
                "role": role,
                "content": content or message.content or "",
            }
            items.append(text)
    return instructions, items


def _input_content(message: Message) -> list[Any]:
    """A message's text and parts as `input_text`, `input_image` and `input_file` items."""
    parts: list[Any] = [{"type": "input_text", "text": message.content}] if message.content else []
    return parts + [_input_part(a) for a in message.attachments]


def _tool_output(message: Message) -> Any:
    """A function call's output: its text, or a list with the parts it returned."""
    if not message.attachments:
        return message.content or ""
    return _input_content(message)


def _input_part(part: Attachment) -> dict[str, Any]:
    """An image as `input_image` (a data URL for bytes), a PDF as `input_file` with
    `file_data` or `file_url`, a `text/*` document as `input_text`."""
    if isinstance(part, StoredBlob):
        raise unresolved(part)
    if isinstance(part, ImageUrl):
        return {"type": "input_image", "image_url": part.url, "detail": "auto"}
    if isinstance(part, DocumentUrl):
        return {"type": "input_file", "file_url": part.url}
    if part.is_image:
        return {"type": "input_image", "image_url": data_url(part), "detail": "auto"}
    if is_text_document(part):
        return {"type": "input_text", "text": text_of(part)}
    name = part.identifier or f"{part.sha256[:12]}.pdf"
    return {"type": "input_file", "filename": name, "file_data": data_url(part)}


def _assistant_items(message: Message) -> ResponseInputParam:
    items: ResponseInputParam = [
        _reasoning_item(t) for t in message.thinking if t.item_id and t.signature
    ]
    if message.content:
        text: EasyInputMessageParam = {"role": "assistant", "content": message.content}
        items.append(text)
    for call in message.tool_calls:
        function_call: ResponseFunctionToolCallParam = {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": arguments_json(call.arguments),
        }
        items.append(function_call)
    return items


def _reasoning_item(thinking: ThinkingBlock) -> ResponseReasoningItemParam:
    """A reasoning item as returned (stateless requests need its encrypted content)."""
    assert thinking.item_id is not None
    summary: list[Any] = [{"type": "summary_text", "text": thinking.text}] if thinking.text else []
    return {
        "type": "reasoning",
        "id": thinking.item_id,
        "summary": summary,
        "encrypted_content": thinking.signature,
    }


# --- Response ----------------------------------------------------------------


def parse_response(response: Response, strict_schemas: StrictSchemas | None = None) -> StepResult:
    """A Responses API `Response` as our `StepResult`."""
    strict_schemas = strict_schemas or {}
    usage = parse_usage(response.usage, response.model)
    if response.status == "failed":
        error = response.error
        message = error.message if error is not None else "the response failed"
        code = error.code if error is not None else None
        text = (
            f"OpenAI response failed ({code}): {message}"
            if code
            else f"OpenAI response failed: {message}"
        )
        if is_retryable_stream_error(None, code):
            raise LLMProviderError(text, retryable=True)
        return ErrorStepResult(error=text, usage=LLMUsage(model=response.model))
    reply = _Reply()
    for item in response.output:
        reply.add(item, strict_schemas)
    stop_reason: StopReason = "tool_use" if reply.calls else "end_turn"
    if response.status == "incomplete":
        details = response.incomplete_details
        reason = details.reason if details is not None else None
        stop_reason = INCOMPLETE_REASONS.get(reason or "", "unknown")
    if reply.refusal:
        return TextStepResult(
            content=reply.refusal, thinking=reply.thinking, stop_reason="refusal", usage=usage
        )
    content = "".join(reply.text)
    if reply.calls:
        return ToolCallsStepResult(
            content=content or None,
            tool_calls=reply.calls,
            thinking=reply.thinking,
            stop_reason=stop_reason,
            usage=usage,
        )
    return TextStepResult(
        content=content, thinking=reply.thinking, stop_reason=stop_reason, usage=usage
    )


@dataclass
class _Reply:
    text: list[str] = field(default_factory=list)
    refusal: str = ""
    thinking: list[ThinkingBlock] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def add(self, item: Any, strict_schemas: StrictSchemas) -> None:
        if item.type == "reasoning":
            summary = "\n\n".join(part.text for part in item.summary)
            self.thinking.append(
                ThinkingBlock(text=summary, signature=item.encrypted_content, item_id=item.id)
            )
        elif item.type == "message":
            for part in item.content:
                if part.type == "output_text":
                    self.text.append(part.text)
                elif part.type == "refusal":
                    self.refusal += part.refusal
        elif item.type == "function_call":
            arguments = parse_arguments(item.arguments)
            if item.name in strict_schemas and RAW_ARGUMENTS_KEY not in arguments:
                arguments = drop_strict_nulls(arguments, strict_schemas[item.name])
            self.calls.append(ToolCall(id=item.call_id, name=item.name, arguments=arguments))


def parse_usage(usage: ResponseUsage | None, model: str | None) -> LLMUsage:
    """Input tokens include cached ones here too (helix's one definition)."""
    if usage is None:
        return LLMUsage(model=model)
    input_details = getattr(usage, "input_tokens_details", None)
    output_details = getattr(usage, "output_tokens_details", None)
    return LLMUsage(
        model=model,
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_read_tokens=getattr(input_details, "cached_tokens", None) or 0,
        cache_write_tokens=getattr(input_details, "cache_write_tokens", None) or 0,
        reasoning_tokens=getattr(output_details, "reasoning_tokens", None) or 0,
    )


# --- Streaming ---------------------------------------------------------------


@dataclass
class _StreamSeen:
    """What a stream told before it failed: `response.created` names the model."""

    model: str | None = None


class _StreamError(Exception):
    """An `error` event inside a 200 stream."""

    def __init__(self, message: str, code: str | None) -> None:
        super().__init__(message)
        self.code = code


async def _stream_response(
    client: openai.AsyncOpenAI,
    params: ResponseParams,
    on_text_delta: TextDeltaCallback,
    seen: _StreamSeen,
) -> Response:
    """Stream events, forwarding text deltas; the final event carries the whole response."""
    forward: TextDeltaCallback | None = on_text_delta
    final: Response | None = None
    stream = await client.responses.create(**params, stream=True)
    async with stream:
        async for event in stream:
            kind = event.type
            if kind == "response.created":
                seen.model = event.response.model
            elif kind == "response.output_text.delta" and forward is not None:
                forward = await safe_forward(forward, event.delta)
            elif kind in ("response.completed", "response.incomplete", "response.failed"):
                final = event.response
            elif kind == "error":
                raise _StreamError(event.message, event.code)
    if final is None:
        raise LLMProviderError("OpenAI stream ended without a response", retryable=True)
    return final


def _stream_error(exc: _StreamError, model: str | None) -> ErrorStepResult:
    """Classified like an HTTP error: a 4xx or request-blaming `code` fails the run."""
    status = error_status(exc.code)
    label = f"OpenAI stream error {status}" if status is not None else "OpenAI stream error"
    text = f"{label}: {exc}"
    if is_retryable_stream_error(None, exc.code):
        raise LLMProviderError(text, retryable=True, status_code=status) from exc
    usage = LLMUsage(model=model) if model else None
    return ErrorStepResult(error=text, usage=usage)
