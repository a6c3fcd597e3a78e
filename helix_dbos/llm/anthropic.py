"""Anthropic Messages API adapter.

One `generate_step` is one HTTP call: the SDK's own retries are off because
retries are DBOS step retries, so each attempt is checkpointed and visible.
Retryable failures are raised as `LLMProviderError(retryable=True)`; any other
4xx becomes an `ErrorStepResult` carrying the provider's message.

Conventions worth knowing:
- A redacted thinking block is kept as `ThinkingBlock(redacted=True)` with the
  opaque `data` in `text`, and sent back as `redacted_thinking`.
- `pause_turn` (only produced by server tools, which we do not use) maps to
  "unknown": the turn is incomplete, so it must not pass for a final answer.
  `model_context_window_exceeded` maps to "max_tokens".
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import anthropic
import httpx2
from anthropic.types import (
    CacheControlEphemeralParam,
    ContentBlockParam,
    DocumentBlockParam,
    ImageBlockParam,
    MessageParam,
    OutputConfigParam,
    RedactedThinkingBlockParam,
    TextBlockParam,
    ThinkingBlockParam,
    ToolChoiceAnyParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)

from helix_dbos.llm import sdk_adapter
from helix_dbos.llm.base import LLMProviderError, TextDeltaCallback
from helix_dbos.llm.capabilities import (
    ModelCapabilities,
    StrictSchemas,
    anthropic_capabilities,
    error_status,
    is_retryable_status,
    is_retryable_stream_error,
    make_anthropic_strict_schema,
)
from helix_dbos.llm.sdk_adapter import (
    SDKAdapter,
    safe_forward,
    strict_rejection,
)
from helix_dbos.orchestration.parts import (
    Attachment,
    DocumentUrl,
    ImageUrl,
    StoredBlob,
    base64_data,
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
    ToolSpec,
)

logger = logging.getLogger(__name__)

PROVIDER_PREFIX = "anthropic:"
DEFAULT_MAX_TOKENS = 4096

STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    "pause_turn": "unknown",
    "model_context_window_exceeded": "max_tokens",
}

_Role = Literal["user", "assistant"]


class _RequiredMessagesParams(TypedDict):
    model: str
    max_tokens: int
    messages: list[MessageParam]


class MessagesParams(_RequiredMessagesParams, total=False):
    """The keyword arguments for `messages.create` / `messages.stream` that we send."""

    system: str | list[TextBlockParam]
    tools: list[ToolParam]
    tool_choice: ToolChoiceAnyParam
    output_config: OutputConfigParam
    extra_headers: dict[str, str]
    extra_body: dict[str, Any]


class AnthropicAdapter(SDKAdapter[anthropic.AsyncAnthropic]):
    """`LLMAdapter` for Claude models through `anthropic.AsyncAnthropic`.

    Cheap to build (see `SDKAdapter`). `http_client` must be an `httpx2.AsyncClient`, the HTTP
    library of anthropic>=2 (tests pass one with `httpx2.MockTransport`).
    """

    provider_prefix = PROVIDER_PREFIX

    def _check_http_client(self, http_client: Any) -> None:
        if http_client is not None and not isinstance(http_client, httpx2.AsyncClient):
            raise TypeError(
                "AnthropicAdapter(http_client=...) needs an httpx2.AsyncClient "
                f"(anthropic>=2 uses httpx2), got {type(http_client).__name__}"
            )

    def __repr__(self) -> str:
        return f"AnthropicAdapter(model={self.model!r})"

    def configuration_problem(self) -> str | None:
        """Why a call would fail before it is made: no credentials (see SelfChecking)."""
        if self.api_key or os.environ.get("ANTHROPIC_API_KEY"):
            return None
        if os.environ.get("ANTHROPIC_AUTH_TOKEN"):
            return None
        return "ANTHROPIC_API_KEY is not set: export it, or pass AnthropicAdapter(api_key=...)"

    def _new_client(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=self.api_key or os.environ.get("ANTHROPIC_API_KEY"),
            base_url=self.base_url,  # None -> ANTHROPIC_BASE_URL or the default
            max_retries=self.max_retries,
            http_client=self.http_client,
            default_headers=self.default_headers,
            # `None` would mean "no timeout"; unset keeps the SDK's default.
            timeout=anthropic.not_given if self.timeout is None else self.timeout,
        )

    async def generate_step(
        self, request: LLMRequest, on_text_delta: TextDeltaCallback | None = None
    ) -> StepResult:
        model = self.model_name(request)
        caps = self.capabilities or anthropic_capabilities(model)
        params, strict_tools = build_params(request, model, caps)
        client = self._get_client()
        seen = _StreamSeen()
        try:
            if on_text_delta is None:
                message = await client.messages.create(**params)
            else:
                message = await _stream_message(client, params, on_text_delta, seen)
        except anthropic.APIStatusError as exc:
            return _status_error(exc, strict_tools, seen.model)
        except anthropic.APIConnectionError as exc:  # includes APITimeoutError
            raise LLMProviderError(f"Anthropic connection error: {exc}", retryable=True) from exc
        return parse_message(message)


# --- Request -----------------------------------------------------------------


def build_params(
    request: LLMRequest, model: str, caps: ModelCapabilities
) -> tuple[MessagesParams, StrictSchemas]:
    """Keyword arguments for `messages.create`, and the strict tools' schemas as sent."""
    system, messages = convert_messages(request.messages)
    native = request.output_format is not None and caps.native_output
    if request.output_format is not None and not native:  # the prompted mode instead
        prompt = request.output_format.prompt
        system = f"{system.rstrip()}\n\n{prompt}" if system else prompt
    params: MessagesParams = {
        "model": model,
        "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
        "messages": messages,
    }
    if system:
        params["system"] = system
    strict_tools: StrictSchemas = {}
    if request.tools:
        params["tools"] = sdk_adapter.convert_tools(
            request, caps, strict_tools, convert_tool, _sent_schema
        )
        if _may_force_tool(request, caps):
            params["tool_choice"] = {"type": "any"}
    if native and request.output_format is not None:
        schema = make_anthropic_strict_schema(request.output_format.json_schema)
        params["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    # anthropic>=2 has no `temperature` kwarg (newer models reject sampling
    # params), so it travels in the body like the provider options.
    options: dict[str, Any] = {}
    if request.temperature is not None:
        options["temperature"] = request.temperature
    options.update(request.provider_options)
    headers: dict[str, str] = dict(options.pop("extra_headers", None) or {})
    if (strict_tools or native) and caps.beta_headers:
        betas = [b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()]
        betas += [b for b in caps.beta_headers if b not in betas]
        headers["anthropic-beta"] = ",".join(betas)
    if headers:
        params["extra_headers"] = headers
    if options:
        params["extra_body"] = options
    if request.cache:
        add_cache_breakpoints(params)
    return params, strict_tools


# --- Prompt caching ----------------------------------------------------------------

#: Anthropic refuses a request with more than 4 `cache_control` breakpoints.
MAX_BREAKPOINTS = 4
#: Blocks the API refuses a `cache_control` on (they are cached as part of their turn).
_UNMARKABLE = ("thinking", "redacted_thinking")


def add_cache_breakpoints(params: MessagesParams) -> None:
    """Mark the prefix that every later step of the run re-sends, in place.

    The cache covers everything up to a breakpoint, in the API's order: tools, system,
    messages. One breakpoint on the system prompt (on the last tool when there is no
    system prompt) caches the tools and the prompt; one on the last block of the last
    message caches the whole history, which the next step reads back as it appends to
    it. Two breakpoints, within the API's limit of `MAX_BREAKPOINTS`.
    """
    system = params.get("system")
    if isinstance(system, str) and system:
        params["system"] = [{"type": "text", "text": system, "cache_control": _ephemeral()}]
    elif params.get("tools"):
        params["tools"][-1]["cache_control"] = _ephemeral()
    for message in reversed(params["messages"]):
        content: Any = message["content"]  # our turns are lists of block dicts
        markable = (
            []
            if isinstance(content, str)
            else [b for b in content if isinstance(b, dict) and b.get("type") not in _UNMARKABLE]
        )
        if markable:  # text, tool use or tool result: kinds that take a breakpoint
            markable[-1]["cache_control"] = _ephemeral()
            break


def _ephemeral() -> CacheControlEphemeralParam:
    return {"type": "ephemeral"}


def _may_force_tool(request: LLMRequest, caps: ModelCapabilities) -> bool:
    """A tool call is required and may be forced: not with extended thinking, which the
    API refuses with `tool_choice` "any" or "tool" (the runtime's nudge covers it)."""
    if request.tool_choice != "required" or not caps.forced_tool_choice:
        return False
    thinking = request.provider_options.get("thinking")
    return not (isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"))


def convert_tool(spec: ToolSpec, *, strict: bool) -> ToolParam:
    """A `ToolSpec` as an Anthropic tool; strict ones get a closed schema."""
    schema = make_anthropic_strict_schema(spec.parameters) if strict else spec.parameters
    tool: ToolParam = {"name": spec.name, "input_schema": schema}
    if spec.description:
        tool["description"] = spec.description
    if strict:
        tool["strict"] = True
    return tool


def _sent_schema(tool: ToolParam) -> dict[str, Any]:
    """The tool's `input_schema` as the plain dict `convert_tool` put there."""
    return dict(tool["input_schema"])


def convert_messages(messages: list[Message]) -> tuple[str | None, list[MessageParam]]:
    """Our transcript as (`system`, Anthropic `messages`).

    A leading system message becomes the `system` parameter (a later one, which
    the API has no place for, is sent as user text). Consecutive
    messages of the same Anthropic role are merged into one, which is what
    puts parallel tool results into a single user message.
    """
    system: str | None = None
    if messages and messages[0].role == "system":
        system, messages = messages[0].content, messages[1:]
    turns: list[tuple[_Role, list[ContentBlockParam]]] = []
    for message in messages:
        role: _Role = "assistant" if message.role == "assistant" else "user"
        blocks = _content_blocks(message)
        if not blocks:
            continue  # the API rejects empty turns
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    return system, [_message_param(role, blocks) for role, blocks in turns]


def _message_param(role: _Role, content: list[ContentBlockParam]) -> MessageParam:
    if role == "assistant":
        return {"role": "assistant", "content": content}
    return {"role": "user", "content": content}


def _content_blocks(message: Message) -> list[ContentBlockParam]:
    if message.role == "tool":
        return [_tool_result_block(message)]
    blocks: list[ContentBlockParam] = []
    if message.role == "assistant":
        blocks += [b for t in message.thinking if (b := _thinking_block(t)) is not None]
    else:  # images and documents first, then the text that asks about them
        blocks += [_part_block(a) for a in message.attachments]
    if message.content:
        text: TextBlockParam = {"type": "text", "text": message.content}
        blocks.append(text)
    if message.role == "assistant":
        blocks += [_tool_use_block(c) for c in message.tool_calls]
    return blocks


def _tool_result_block(message: Message) -> ToolResultBlockParam:
    # Typed Any on purpose: a tool message without an id (the runtime always
    # sets one) is sent as null, as before, and the provider's 400 names it.
    tool_use_id: Any = message.tool_call_id
    block: ToolResultBlockParam = {"type": "tool_result", "tool_use_id": tool_use_id}
    if message.attachments:
        text: list[TextBlockParam] = (
            [{"type": "text", "text": message.content}] if message.content else []
        )
        block["content"] = [*text, *(_part_block(a) for a in message.attachments)]
    elif message.content:
        block["content"] = message.content
    if message.is_error:
        block["is_error"] = True
    return block


def _part_block(part: Attachment) -> ImageBlockParam | DocumentBlockParam:
    """An image or a document block: base64 bytes, a URL the API fetches, or a `text/*`
    document as plain text."""
    if isinstance(part, StoredBlob):
        raise unresolved(part)
    if isinstance(part, ImageUrl):
        return {"type": "image", "source": {"type": "url", "url": part.url}}
    if isinstance(part, DocumentUrl):
        return _document({"type": "url", "url": part.url}, part.identifier)
    if part.is_image:
        media_type: Any = part.media_type  # the API names the image types it takes
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": base64_data(part)},
        }
    if is_text_document(part):
        source: Any = {"type": "text", "media_type": "text/plain", "data": text_of(part)}
        return _document(source, part.identifier)
    pdf: Any = {"type": "base64", "media_type": part.media_type, "data": base64_data(part)}
    return _document(pdf, part.identifier)


def _document(source: Any, title: str | None) -> DocumentBlockParam:
    block: DocumentBlockParam = {"type": "document", "source": source}
    if title:
        block["title"] = title
    return block


def _thinking_block(
    thinking: ThinkingBlock,
) -> ThinkingBlockParam | RedactedThinkingBlockParam | None:
    """The block to replay, or None for unsigned thinking or another provider's reasoning
    (an OpenAI Responses reasoning item)."""
    if thinking.item_id is not None:
        return None
    if thinking.redacted:
        return {"type": "redacted_thinking", "data": thinking.text}
    if thinking.signature:
        return {"type": "thinking", "thinking": thinking.text, "signature": thinking.signature}
    return None


def _tool_use_block(call: ToolCall) -> ToolUseBlockParam:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call)}


def _tool_input(call: ToolCall) -> dict[str, Any]:
    arguments = call.arguments
    return arguments if isinstance(arguments, dict) else {"value": arguments}


# --- Response ----------------------------------------------------------------


@dataclass
class _StreamSeen:
    """What a stream told before it failed: `message_start` names the model."""

    model: str | None = None


async def _stream_message(
    client: anthropic.AsyncAnthropic,
    params: MessagesParams,
    on_text_delta: TextDeltaCallback,
    seen: _StreamSeen,
) -> anthropic.types.Message:
    """Stream, forwarding text deltas; the SDK assembles the final message."""
    forward: TextDeltaCallback | None = on_text_delta
    async with client.messages.stream(**params) as stream:
        async for event in stream:
            if event.type == "message_start":
                seen.model = event.message.model
            if (
                forward is not None
                and event.type == "content_block_delta"
                and event.delta.type == "text_delta"
            ):
                forward = await safe_forward(forward, event.delta.text)
        return await stream.get_final_message()


def parse_message(message: anthropic.types.Message) -> StepResult:
    """An Anthropic `Message` as our `StepResult`."""
    text: list[str] = []
    thinking: list[ThinkingBlock] = []
    calls: list[ToolCall] = []
    for block in message.content:
        if block.type == "text":
            text.append(block.text)
        elif block.type == "thinking":
            thinking.append(ThinkingBlock(text=block.thinking, signature=block.signature))
        elif block.type == "redacted_thinking":
            thinking.append(ThinkingBlock(text=block.data, redacted=True))
        elif block.type == "tool_use":
            arguments = block.input if isinstance(block.input, dict) else {"value": block.input}
            calls.append(ToolCall(id=block.id, name=block.name, arguments=arguments))
    stop_reason = STOP_REASONS.get(message.stop_reason or "", "unknown")
    usage = parse_usage(message)
    content = "".join(text)
    if calls:
        return ToolCallsStepResult(
            content=content or None,
            tool_calls=calls,
            thinking=thinking,
            stop_reason=stop_reason,
            usage=usage,
        )
    return TextStepResult(
        content=content, thinking=thinking, should_stop=False, stop_reason=stop_reason, usage=usage
    )


def parse_usage(message: anthropic.types.Message) -> LLMUsage:
    """Usage in helix's one definition: `input_tokens` counts every input token,
    cached or not. Anthropic's own `input_tokens` counts only those after the last
    cache breakpoint, so its cache reads and writes are added back in."""
    usage = message.usage
    details = usage.output_tokens_details
    cache_read = usage.cache_read_input_tokens or 0
    cache_write = usage.cache_creation_input_tokens or 0
    return LLMUsage(
        model=message.model,
        input_tokens=(usage.input_tokens or 0) + cache_read + cache_write,
        output_tokens=usage.output_tokens or 0,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        reasoning_tokens=(details.thinking_tokens if details else 0) or 0,
    )


# --- Errors ------------------------------------------------------------------


def _status_error(
    exc: anthropic.APIStatusError, strict_tools: StrictSchemas, model: str | None = None
) -> ErrorStepResult:
    """Raise retryable failures for DBOS; turn the rest into an ErrorStepResult (whose
    usage names the `model` a stream reported before failing, if any)."""
    status = exc.status_code
    error_type: str | None = exc.type or _body_error(exc.body, "type")
    message = exc.api_message or _body_error(exc.body, "message") or str(exc)
    # Errors sent inside an SSE stream arrive with the stream's 200 status: they are
    # classified like HTTP errors by their `code` (a gateway's status) or `type`.
    in_stream = status < 400
    code = _body_error_field(exc.body, "code")
    if in_stream:
        stream_status = error_status(code)
        retryable = is_retryable_stream_error(error_type, code)
        label = "Anthropic stream error" + (f" {stream_status}" if stream_status else "")
    else:
        stream_status, retryable = None, is_retryable_status(status)
        label = f"Anthropic API error {status}"
    text = f"{label} ({error_type}): {message}" if error_type else f"{label}: {message}"
    if retryable:
        raise LLMProviderError(
            text, retryable=True, status_code=stream_status if in_stream else status
        ) from exc
    text = strict_rejection(text, strict_tools, status, "anthropic")
    usage = LLMUsage(model=model) if model else None
    return ErrorStepResult(error=text, should_stop=True, stop_reason="error", usage=usage)


def _body_error(body: object, key: str) -> str | None:
    value = _body_error_field(body, key)
    return value if isinstance(value, str) else None


def _body_error_field(body: object, key: str) -> object:
    error = body.get("error", body) if isinstance(body, dict) else None
    return error.get(key) if isinstance(error, dict) else None
