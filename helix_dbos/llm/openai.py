"""OpenAI Chat Completions adapter (also for vLLM, Ollama and other compatible servers).

One `generate_step` is one HTTP call: the SDK's own retries are off because
retries are DBOS step retries. Retryable failures are raised as
`LLMProviderError(retryable=True)`; any other 4xx becomes an `ErrorStepResult`.

Conventions worth knowing:
- Tool arguments that are not a JSON object do not fail the step: they come
  back as `{"__raw_arguments__": ..., "__parse_error__": ...}` so the runtime
  can answer the call with a tool error and let the model try again; the raw
  string is what is replayed to the model on the next turn.
- Reasoning text returned by compatible servers (`reasoning_content` from
  vLLM/DeepSeek, `reasoning` from Ollama/OpenRouter) is kept as thinking but
  only sent back when the adapter is built with `send_reasoning=True`.
- `tool` messages carry no error flag on this API; `is_error` is not sent.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypedDict, cast

import openai
from openai.types import CompletionUsage
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionAssistantMessageParam,
    ChatCompletionContentPartParam,
    ChatCompletionMessageParam,
    ChatCompletionMessageToolCallParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionToolChoiceOptionParam,
    ChatCompletionToolMessageParam,
    ChatCompletionToolParam,
    ChatCompletionUserMessageParam,
)
from openai.types.shared_params import FunctionDefinition
from openai.types.shared_params.response_format_json_schema import (
    JSONSchema,
    ResponseFormatJSONSchema,
)

from helix_dbos.llm import sdk_adapter
from helix_dbos.llm.base import LLMProviderError, TextDeltaCallback
from helix_dbos.llm.capabilities import (
    MAX_TOKENS_FIELDS,
    MaxTokensField,
    ModelCapabilities,
    StrictSchemas,
    drop_strict_nulls,
    error_status,
    is_retryable_status,
    is_retryable_stream_error,
    make_openai_strict_schema,
    openai_capabilities,
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
    OutputFormat,
    StepResult,
    StopReason,
    TextStepResult,
    ThinkingBlock,
    ToolCall,
    ToolCallsStepResult,
    ToolSpec,
)

if TYPE_CHECKING:
    import httpx
    import httpx2

logger = logging.getLogger(__name__)

PROVIDER_PREFIX = "openai:"
RAW_ARGUMENTS_KEY = "__raw_arguments__"
PARSE_ERROR_KEY = "__parse_error__"
_OPENAI_HOST = "api.openai.com"
# Compatible servers usually need no key, but the SDK refuses to start without one.
_PLACEHOLDER_API_KEY = "not-needed"

FINISH_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filter",
}


class _RequiredChatCompletionParams(TypedDict):
    model: str
    messages: list[ChatCompletionMessageParam]


class ChatCompletionParams(_RequiredChatCompletionParams, total=False):
    """The keyword arguments for `chat.completions.create` that we send."""

    max_tokens: int
    max_completion_tokens: int
    temperature: float
    tools: list[ChatCompletionToolParam]
    tool_choice: ChatCompletionToolChoiceOptionParam
    response_format: ResponseFormatJSONSchema
    extra_headers: dict[str, str]
    extra_body: dict[str, Any]


class AssistantMessageParam(ChatCompletionAssistantMessageParam, total=False):
    """An assistant message with the reasoning field vLLM and DeepSeek read back."""

    reasoning_content: str


class OpenAIAdapter(SDKAdapter[openai.AsyncOpenAI]):
    """`LLMAdapter` for the Chat Completions API through `openai.AsyncOpenAI`.

    Cheap to build (see `SDKAdapter`). With a `base_url` other than api.openai.com (kwarg or
    OPENAI_BASE_URL) the server is treated as OpenAI-compatible: no `strict`
    and `max_tokens` instead of `max_completion_tokens`, and no forced
    `tool_choice`, unless `strict_tools` / `max_tokens_field` /
    `forced_tool_choice` say otherwise.
    """

    provider_prefix = PROVIDER_PREFIX

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: httpx.AsyncClient | httpx2.AsyncClient | None = None,
        max_retries: int = 0,
        timeout: float | None = None,
        default_headers: dict[str, str] | None = None,
        strict_tools: bool | None = None,
        max_tokens_field: MaxTokensField | None = None,
        send_reasoning: bool = False,
        capabilities: ModelCapabilities | None = None,
        forced_tool_choice: bool | None = None,
    ) -> None:
        if max_tokens_field is not None and max_tokens_field not in MAX_TOKENS_FIELDS:
            raise ValueError(
                f"OpenAIAdapter(max_tokens_field={max_tokens_field!r}): "
                f"expected one of {', '.join(MAX_TOKENS_FIELDS)}"
            )
        super().__init__(
            model,
            api_key=api_key,
            base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None,
            http_client=http_client,
            max_retries=max_retries,
            timeout=timeout,
            default_headers=default_headers,
            capabilities=capabilities,
        )
        self.strict_tools = strict_tools
        self.max_tokens_field = max_tokens_field
        self.send_reasoning = send_reasoning
        self.forced_tool_choice = forced_tool_choice

    def __repr__(self) -> str:
        return f"OpenAIAdapter(model={self.model!r}, base_url={self.base_url!r})"

    def configuration_problem(self) -> str | None:
        """Why a call would fail before it is made: no key for api.openai.com (a
        compatible server needs none; see SelfChecking)."""
        if self.api_key or os.environ.get("OPENAI_API_KEY") or self.compatible_server:
            return None
        return (
            "OPENAI_API_KEY is not set: export it, pass OpenAIAdapter(api_key=...), or set "
            "LLMConfig(base_url=...) for an OpenAI-compatible server"
        )

    @property
    def compatible_server(self) -> bool:
        """True when talking to something other than api.openai.com."""
        return self.base_url is not None and _OPENAI_HOST not in self.base_url

    def model_capabilities(self, model: str) -> ModelCapabilities:
        caps = self.capabilities or openai_capabilities(
            model, compatible_server=self.compatible_server
        )
        return replace(
            caps,
            strict_tools=caps.strict_tools if self.strict_tools is None else self.strict_tools,
            max_tokens_field=self.max_tokens_field or caps.max_tokens_field,
            forced_tool_choice=(
                caps.forced_tool_choice
                if self.forced_tool_choice is None
                else self.forced_tool_choice
            ),
        )

    def _new_client(self) -> openai.AsyncOpenAI:
        api_key = self.api_key or os.environ.get("OPENAI_API_KEY")
        if api_key is None and self.compatible_server:
            api_key = _PLACEHOLDER_API_KEY
        return openai.AsyncOpenAI(
            api_key=api_key,
            base_url=self.base_url,
            max_retries=self.max_retries,
            # The signature names httpx2 only, but the SDK also takes a legacy
            # httpx.AsyncClient (openai._httpx2.is_legacy_httpx_async_client).
            http_client=cast("httpx2.AsyncClient | None", self.http_client),
            default_headers=self.default_headers,
            # `None` would mean "no timeout"; unset keeps the SDK's default.
            timeout=openai.not_given if self.timeout is None else self.timeout,
        )

    async def generate_step(
        self, request: LLMRequest, on_text_delta: TextDeltaCallback | None = None
    ) -> StepResult:
        model = self.model_name(request)
        caps = self.model_capabilities(model)
        params, strict_tools = build_params(
            request, model, caps, send_reasoning=self.send_reasoning
        )
        try:
            client = self._get_client()
        except openai.OpenAIError as exc:  # e.g. no API key: a config error, not transient
            return ErrorStepResult(error=f"OpenAI client configuration error: {exc}")
        draft = _Draft()
        try:
            if on_text_delta is None:
                completion = await client.chat.completions.create(**params)
                draft = draft_from_completion(completion)
            else:
                await _stream_draft(client, params, on_text_delta, draft)
        except openai.APIStatusError as exc:
            return status_error(exc, strict_tools)
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            raise LLMProviderError(f"OpenAI connection error: {exc}", retryable=True) from exc
        except openai.APIError as exc:  # an error event inside a 200 stream
            return _stream_error(exc, draft)
        originals = {s.name: s.parameters for s in request.tools if s.name in strict_tools}
        result = draft.to_step_result(strict_schemas=originals)
        if request.output_format is not None and "response_format" in params and caps.strict_tools:
            return undo_strict_nulls(result, request.output_format.json_schema)
        return result


# --- Request -----------------------------------------------------------------


def build_params(
    request: LLMRequest, model: str, caps: ModelCapabilities, *, send_reasoning: bool = False
) -> tuple[ChatCompletionParams, StrictSchemas]:
    """Keyword arguments for `chat.completions.create`, and the strict tools' schemas."""
    messages = convert_messages(request.messages, send_reasoning=send_reasoning)
    if request.output_format is not None and not caps.native_output:
        messages = _with_output_prompt(messages, request.output_format.prompt)
    params: ChatCompletionParams = {"model": model, "messages": messages}
    if request.max_tokens is not None:
        if caps.max_tokens_field == "max_completion_tokens":
            params["max_completion_tokens"] = request.max_tokens
        else:
            params["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        params["temperature"] = request.temperature
    strict_tools: StrictSchemas = {}
    if request.tools:
        params["tools"] = sdk_adapter.convert_tools(
            request, caps, strict_tools, convert_tool, _sent_schema
        )
        if request.tool_choice == "required" and caps.forced_tool_choice:
            params["tool_choice"] = "required"
    if request.output_format is not None and caps.native_output:
        params["response_format"] = response_format(request.output_format, caps)
    headers, body = extra_options(request)
    if headers is not None:
        params["extra_headers"] = headers
    if body:
        params["extra_body"] = body
    return params, strict_tools


def extra_options(request: LLMRequest) -> tuple[Any, dict[str, Any]]:
    """The request's provider options as the SDK's `extra_headers` (None: not given)
    and `extra_body`."""
    options = dict(request.provider_options)
    return options.pop("extra_headers", None), options


def response_format(output: OutputFormat, caps: ModelCapabilities) -> ResponseFormatJSONSchema:
    """`output_mode="native"`: a strict `json_schema` where strict mode is supported (the
    schema made compliant), a plain one on compatible servers."""
    strict = caps.strict_tools
    schema = make_openai_strict_schema(output.json_schema) if strict else output.json_schema
    json_schema: JSONSchema = {"name": output.name, "schema": schema}
    if strict:
        json_schema["strict"] = True
    return {"type": "json_schema", "json_schema": json_schema}


def _with_output_prompt(
    messages: list[ChatCompletionMessageParam], prompt: str
) -> list[ChatCompletionMessageParam]:
    """No native output on this model: the schema goes into the system prompt instead."""
    first = messages[0] if messages else None
    if first is not None and first["role"] == "system" and isinstance(first["content"], str):
        system: ChatCompletionSystemMessageParam = {
            "role": "system",
            "content": f"{first['content'].rstrip()}\n\n{prompt}" if first["content"] else prompt,
        }
        return [system, *messages[1:]]
    added: ChatCompletionSystemMessageParam = {"role": "system", "content": prompt}
    return [added, *messages]


def undo_strict_nulls(result: StepResult, schema: dict[str, Any]) -> StepResult:
    """A strict `json_schema` made optional properties nullable: drop the nulls the model
    sent for "not given", so defaults apply when the output is validated."""
    if not isinstance(result, TextStepResult):
        return result
    try:
        value = json.loads(result.content)
    except json.JSONDecodeError:
        return result  # the runtime's validation reports it to the model
    content = json.dumps(drop_strict_nulls(value, schema))
    return result.model_copy(update={"content": content})


def convert_tool(spec: ToolSpec, *, strict: bool) -> ChatCompletionToolParam:
    """A `ToolSpec` as an OpenAI function tool; strict ones get a strict schema."""
    parameters = make_openai_strict_schema(spec.parameters) if strict else spec.parameters
    function: FunctionDefinition = {"name": spec.name, "parameters": parameters}
    if spec.description:
        function["description"] = spec.description
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def _sent_schema(tool: ChatCompletionToolParam) -> dict[str, Any]:
    """The function's `parameters` as the plain dict `convert_tool` put there."""
    return dict(tool["function"].get("parameters", {}))


def convert_messages(
    messages: list[Message], *, send_reasoning: bool = False
) -> list[ChatCompletionMessageParam]:
    """Our transcript as Chat Completions messages (system stays a message).

    A tool message carries text only on this API: the images and documents a tool
    returned follow the step's tool messages in one user message that names their call.
    """
    out: list[ChatCompletionMessageParam] = []
    returned: list[ChatCompletionContentPartParam] = []  # the tools' parts, not yet sent
    for message in messages:
        if message.role != "tool" and returned:
            out.append({"role": "user", "content": returned})
            returned = []
        if message.role == "tool":
            out.append(_tool_message(message))
            if message.attachments:
                label = f"Content returned by tool call {message.tool_call_id}:"
                returned.append({"type": "text", "text": label})
                returned += [_content_part(a) for a in message.attachments]
        elif message.role == "assistant":
            out.append(_assistant_message(message, send_reasoning=send_reasoning))
        elif message.role == "system":
            system: ChatCompletionSystemMessageParam = {
                "role": "system",
                "content": message.content or "",
            }
            out.append(system)
        else:
            out.append(_user_message(message))
    if returned:
        out.append({"role": "user", "content": returned})
    return out


def _user_message(message: Message) -> ChatCompletionUserMessageParam:
    if not message.attachments:
        return {"role": "user", "content": message.content or ""}
    parts: list[ChatCompletionContentPartParam] = []
    if message.content:
        parts.append({"type": "text", "text": message.content})
    parts += [_content_part(a) for a in message.attachments]
    return {"role": "user", "content": parts}


def _content_part(part: Attachment) -> ChatCompletionContentPartParam:
    """An image as `image_url` (a data URL for bytes), a PDF as a `file` part with
    `file_data`, a `text/*` document as text. A document URL has no part on this API:
    `execute()` refuses it (llm/content_support.py)."""
    if isinstance(part, StoredBlob):
        raise unresolved(part)
    if isinstance(part, DocumentUrl):
        raise ValueError("OpenAI Chat Completions takes no document URL; send its bytes")
    if isinstance(part, ImageUrl):
        return {"type": "image_url", "image_url": {"url": part.url}}
    if part.is_image:
        return {"type": "image_url", "image_url": {"url": data_url(part)}}
    if is_text_document(part):
        return {"type": "text", "text": text_of(part)}
    name = part.identifier or f"{part.sha256[:12]}.pdf"
    return {"type": "file", "file": {"filename": name, "file_data": data_url(part)}}


def _tool_message(message: Message) -> ChatCompletionToolMessageParam:
    # Typed Any on purpose: a tool message without an id (the runtime always
    # sets one) is sent as null, as before, and the provider's 400 names it.
    tool_call_id: Any = message.tool_call_id
    return {"role": "tool", "tool_call_id": tool_call_id, "content": message.content or ""}


def _assistant_message(message: Message, *, send_reasoning: bool) -> AssistantMessageParam:
    # Content may only be null next to tool calls.
    content = message.content or (None if message.tool_calls else "")
    item: AssistantMessageParam = {"role": "assistant", "content": content}
    if message.tool_calls:
        item["tool_calls"] = [_tool_call_param(call) for call in message.tool_calls]
    reasoning = "".join(t.text for t in message.thinking if not t.redacted and not t.item_id)
    if send_reasoning and reasoning:
        item["reasoning_content"] = reasoning
    return item


def _tool_call_param(call: ToolCall) -> ChatCompletionMessageToolCallParam:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments_json(call.arguments)},
    }


def arguments_json(arguments: Any) -> str:
    """Replay what the model sent: the raw string when it was not valid JSON."""
    raw = arguments.get(RAW_ARGUMENTS_KEY) if isinstance(arguments, dict) else None
    if isinstance(raw, str):
        return raw
    return json.dumps(arguments if arguments is not None else {})


def parse_arguments(raw: str | None) -> dict[str, Any]:
    """Tool arguments as a dict; never raises on what the model produced."""
    if not raw or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {RAW_ARGUMENTS_KEY: raw, PARSE_ERROR_KEY: f"invalid JSON: {exc}"}
    if not isinstance(value, dict):
        return {RAW_ARGUMENTS_KEY: raw, PARSE_ERROR_KEY: "arguments must be a JSON object"}
    return value


# --- Response ----------------------------------------------------------------


@dataclass
class _ToolCallDraft:
    id: str | None = None
    name: str = ""
    arguments: str = ""


@dataclass
class _Draft:
    """One assistant reply, from a whole completion or assembled from chunks."""

    model: str | None = None
    text: str = ""
    reasoning: str = ""
    refusal: str = ""
    finish_reason: str | None = None
    tool_calls: dict[int, _ToolCallDraft] = field(default_factory=dict)
    usage: CompletionUsage | None = None

    def to_step_result(self, strict_schemas: StrictSchemas | None = None) -> StepResult:
        """`strict_schemas` (tool name -> schema before the strict rewrite) undo its nulls."""
        strict_schemas = strict_schemas or {}
        calls = []
        for i, d in sorted(self.tool_calls.items()):
            arguments = parse_arguments(d.arguments)
            if d.name in strict_schemas and RAW_ARGUMENTS_KEY not in arguments:
                arguments = drop_strict_nulls(arguments, strict_schemas[d.name])
            calls.append(ToolCall(id=d.id or f"call_{i}", name=d.name, arguments=arguments))
        thinking = [ThinkingBlock(text=self.reasoning)] if self.reasoning else []
        usage = parse_usage(self.usage, self.model)
        if self.refusal:
            return TextStepResult(
                content=self.refusal, thinking=thinking, stop_reason="refusal", usage=usage
            )
        stop_reason = FINISH_REASONS.get(self.finish_reason or "", "unknown")
        if calls:
            if stop_reason == "end_turn":  # some compatible servers say "stop" here
                stop_reason = "tool_use"
            return ToolCallsStepResult(
                content=self.text or None,
                tool_calls=calls,
                thinking=thinking,
                stop_reason=stop_reason,
                usage=usage,
            )
        return TextStepResult(
            content=self.text,
            thinking=thinking,
            should_stop=False,
            stop_reason=stop_reason,
            usage=usage,
        )


def _reasoning_of(obj: object) -> str | None:
    """`reasoning_content` (vLLM, DeepSeek) or `reasoning` (Ollama, OpenRouter)."""
    value = getattr(obj, "reasoning_content", None) or getattr(obj, "reasoning", None)
    return value if isinstance(value, str) else None


def draft_from_completion(completion: ChatCompletion) -> _Draft:
    draft = _Draft(model=completion.model, usage=completion.usage)
    if not completion.choices:
        return draft
    choice = completion.choices[0]
    message = choice.message
    draft.text = message.content or ""
    draft.reasoning = _reasoning_of(message) or ""
    draft.refusal = message.refusal or ""
    draft.finish_reason = choice.finish_reason
    for i, call in enumerate(message.tool_calls or []):
        if call.type == "function":
            draft.tool_calls[i] = _ToolCallDraft(
                call.id, call.function.name, call.function.arguments
            )
    return draft


async def _stream_draft(
    client: openai.AsyncOpenAI,
    params: ChatCompletionParams,
    on_text_delta: TextDeltaCallback,
    draft: _Draft,
) -> None:
    """Stream chunks into `draft`, forwarding text deltas (what arrived before an error
    event stays in `draft`: its model names the failed call)."""
    forward: TextDeltaCallback | None = on_text_delta
    stream = await client.chat.completions.create(
        **params, stream=True, stream_options={"include_usage": True}
    )
    async with stream:
        async for chunk in stream:
            draft.model = chunk.model or draft.model
            if chunk.usage is not None:
                draft.usage = chunk.usage
            for choice in chunk.choices:
                if choice.index != 0:
                    continue
                delta = choice.delta
                if delta.content:
                    draft.text += delta.content
                    if forward is not None:
                        forward = await safe_forward(forward, delta.content)
                draft.reasoning += _reasoning_of(delta) or ""
                draft.refusal += delta.refusal or ""
                for part in delta.tool_calls or []:
                    call = draft.tool_calls.setdefault(part.index, _ToolCallDraft())
                    call.id = part.id or call.id
                    if part.function is not None:
                        call.name += part.function.name or ""
                        call.arguments += part.function.arguments or ""
                if choice.finish_reason:
                    draft.finish_reason = choice.finish_reason


def parse_usage(usage: CompletionUsage | None, model: str | None) -> LLMUsage:
    if usage is None:
        return LLMUsage(model=model)
    # getattr: compatible servers may send details of another shape, which
    # the SDK keeps as they are.
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    completion_details = getattr(usage, "completion_tokens_details", None)
    return LLMUsage(
        model=model,
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        cache_read_tokens=(getattr(prompt_details, "cached_tokens", None) or 0),
        reasoning_tokens=(getattr(completion_details, "reasoning_tokens", None) or 0),
    )


# --- Errors ------------------------------------------------------------------


def status_error(exc: openai.APIStatusError, strict_tools: StrictSchemas) -> ErrorStepResult:
    """Raise retryable failures for DBOS; turn the rest into an ErrorStepResult."""
    status = exc.status_code
    text = f"OpenAI API error {status}: {error_message(exc)}"
    if is_retryable_status(status):
        raise LLMProviderError(text, retryable=True, status_code=status) from exc
    text = strict_rejection(text, strict_tools, status, "openai")
    return ErrorStepResult(error=text, should_stop=True, stop_reason="error")


def _stream_error(exc: openai.APIError, draft: _Draft) -> ErrorStepResult:
    """An error event inside a 200 stream, classified like an HTTP error: a 4xx `code`
    or a request-blaming `type` fails the run once; anything else is retried."""
    code = exc.body.get("code") if isinstance(exc.body, dict) else None
    status = error_status(code)
    label = f"OpenAI stream error {status}" if status is not None else "OpenAI stream error"
    text = f"{label}: {error_message(exc)}"
    if is_retryable_stream_error(exc.type, code):
        raise LLMProviderError(text, retryable=True, status_code=status) from exc
    # The chunks before the error name the model that failed; no chunk, no name.
    usage = parse_usage(draft.usage, draft.model) if draft.model else None
    return ErrorStepResult(error=text, should_stop=True, stop_reason="error", usage=usage)


def error_message(exc: openai.APIError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            message = str(error["message"])
            param = error.get("param")
            return f"{message} (param: {param})" if param else message
    return exc.message
