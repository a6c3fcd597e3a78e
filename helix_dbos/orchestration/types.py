"""The values that flow between the LLM, the orchestration and the store.

Everything here is a plain pydantic model so it can be checkpointed by DBOS,
stored as JSON in Postgres and sent over HTTP without custom code.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from helix_dbos.orchestration.parts import Attachment

FINISH_TOOL_NAME = "__finish__"
SUBAGENT_PREFIX = "subagent__"

StopReason = Literal[
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop_sequence",
    "content_filter",
    "refusal",
    "error",
    "unknown",
]
Role = Literal["system", "user", "assistant", "tool"]
#: How an agent with an output schema returns its output: the `__finish__` tool, the
#: provider's JSON-schema output, or JSON written in the reply as the prompt asks.
OutputMode = Literal["tool", "native", "prompted"]
#: "required": the reply must call a tool (a completion tool is required to finish).
ToolChoice = Literal["auto", "required"]


def fill_field_defaults(model: type[BaseModel], state: dict[Any, Any]) -> None:
    """Give a pickled model's missing fields their defaults, in place, in field order.

    DBOS pickles step outputs and results: one pickled before a field was added lacks
    it, and helix leaves out the fields at their defaults (`_Model.__getstate__`);
    pydantic would raise AttributeError on access instead of using the default.
    """
    values = state.get("__dict__")
    if not isinstance(values, dict):
        return
    fields = model.model_fields
    if all(name in values for name in fields):
        return
    filled: dict[str, Any] = {}
    for name, info in fields.items():
        if name in values:
            filled[name] = values[name]
        elif not info.is_required():
            filled[name] = info.get_default(call_default_factory=True)
    filled.update((k, v) for k, v in values.items() if k not in filled)
    state["__dict__"] = filled


def at_plain_default(value: Any, default: Any) -> bool:
    """Whether `value` is a field's plain default (None, a bool, an int, a str, or an
    empty tuple), so a pickle may leave it out: loading gives back an equal value of
    the same type. Floats are kept (-0.0 equals 0.0)."""
    if value is default:
        return True
    kind = type(default)
    return kind in (int, str, tuple) and type(value) is kind and value == default


def _at_field_default(info: FieldInfo, value: Any) -> bool:
    factory = info.default_factory
    if factory is not None:  # an empty list or dict made by `list` or `dict`
        return factory in (list, dict) and type(value) is factory and not value
    return info.default is not PydanticUndefined and at_plain_default(value, info.default)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def __getstate__(self) -> dict[Any, Any]:
        """Pickled without the fields at their defaults (`fill_field_defaults` gives them
        back): every LLM step's checkpoint is one of these, and each default field
        pickled its name and value (a third of the model's reply, issue 48)."""
        state = super().__getstate__()
        fields = type(self).model_fields
        state["__dict__"] = {
            name: value
            for name, value in self.__dict__.items()
            if name not in fields or not _at_field_default(fields[name], value)
        }
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        fill_field_defaults(type(self), state)
        super().__setstate__(state)


class ToolCall(_Model):
    """A tool invocation requested by the model (seed 001 `ParsedToolCall`)."""

    id: str
    name: str
    arguments: Any = Field(default_factory=dict)


class SubAgentCall(_Model):
    id: str
    agent_type: str
    input: Any = Field(default_factory=dict)


class ThinkingBlock(_Model):
    """Reasoning content; kept verbatim because some providers require it back.

    `item_id` is set only for an OpenAI Responses reasoning item (then `text` is its
    summary and `signature` its encrypted content); other adapters skip such blocks.
    """

    text: str = ""
    signature: str | None = None
    redacted: bool = False
    item_id: str | None = None


class LLMUsage(_Model):
    """Token counts of one LLM call; every field a provider may report.

    One definition for every provider: `input_tokens` is all the input the model
    read, cached or not (OpenAI's `prompt_tokens`; Anthropic's `input_tokens` plus
    its cache reads and writes). `cache_read_tokens` and `cache_write_tokens` are
    the parts of it read from and written to the prompt cache, and
    `reasoning_tokens` the part of `output_tokens` spent on reasoning. `model` is
    the model the provider said answered, `None` when it named none. `fallback` is
    the `provider:model` name of the fallback model called (`LLMConfig(fallback=...)`)
    when the agent's own model could not answer: part of the step's checkpoint, so a
    replay keeps the fallback's answer and its provider.
    """

    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    fallback: str | None = None


class Message(_Model):
    """One transcript entry; the shape of a `helix.messages` row."""

    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    thinking: list[ThinkingBlock] = Field(default_factory=list)
    is_error: bool = False
    # Images and documents beside the text (orchestration/parts.py): stored references
    # in the transcript, resolved bytes only in a request on its way to an adapter.
    attachments: list[Attachment] = Field(default_factory=list)


class _NoItems(list):  # type: ignore[type-arg]
    """An empty list that refuses to grow, shared by every message a transcript read
    builds in place of the three empty lists each would hold (`tool_calls`, `thinking`,
    `attachments`).

    Why: a process keeps the transcripts it read (`HistoryCache`), and the garbage
    collector walks every list a long-lived object holds at each full collection, so
    those empty lists were 3 of the 7 objects a cached message cost it (issue 48).
    Changing it raises instead of changing every message; a copy, a pickle or a deep
    copy of it is a plain list."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a stored message's empty list is shared: assign a new list instead")

    append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __reduce__(self) -> tuple[type[list[Any]], tuple[()]]:
        return (list, ())

    def __copy__(self) -> list[Any]:
        return []

    def __deepcopy__(self, memo: Any) -> list[Any]:
        return []


#: The shared empty list of stored messages (`_NoItems`).
NO_ITEMS: list[Any] = _NoItems()
#: A message's list fields, which a stored message without items shares `NO_ITEMS` for.
MESSAGE_LIST_FIELDS = ("tool_calls", "thinking", "attachments")


# --- Step results (seed 001) -------------------------------------------------


class TextStepResult(_Model):
    type: Literal["text"] = "text"
    content: str = ""
    thinking: list[ThinkingBlock] = Field(default_factory=list)
    should_stop: bool = False
    stop_reason: StopReason | None = None
    usage: LLMUsage | None = None


class ToolCallsStepResult(_Model):
    type: Literal["tool_calls"] = "tool_calls"
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    sub_agent_calls: list[SubAgentCall] = Field(default_factory=list)
    thinking: list[ThinkingBlock] = Field(default_factory=list)
    stop_reason: StopReason | None = None
    usage: LLMUsage | None = None


class StructuredOutputStepResult(_Model):
    type: Literal["structured_output"] = "structured_output"
    output: Any = None
    stop_reason: StopReason | None = None
    usage: LLMUsage | None = None


class ErrorStepResult(_Model):
    type: Literal["error"] = "error"
    error: str
    should_stop: bool = True
    stop_reason: StopReason | None = "error"
    usage: LLMUsage | None = None


StepResult = Annotated[
    TextStepResult | ToolCallsStepResult | StructuredOutputStepResult | ErrorStepResult,
    Field(discriminator="type"),
]


# --- What the LLM adapter is asked -------------------------------------------


class ToolSpec(_Model):
    """A tool as offered to the model: name, description and JSON schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False


class OutputFormat(_Model):
    """The JSON schema the reply's text must match (`output_mode="native"`).

    Adapters send it as the provider's structured output where the model supports
    it (OpenAI `response_format`, Anthropic `output_config.format`); elsewhere they
    put `prompt` (the prompted mode's instructions) into the system prompt instead.
    """

    name: str
    json_schema: dict[str, Any]
    prompt: str


class LLMRequest(_Model):
    """Everything an adapter needs for one call; built fresh inside the LLM step."""

    agent_name: str
    model: str
    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    temperature: float | None = None
    max_tokens: int | None = None
    strict_output: bool = False
    provider_options: dict[str, Any] = Field(default_factory=dict)
    output_format: OutputFormat | None = None
    tool_choice: ToolChoice = "auto"
    #: Ask for prompt caching where the provider needs asking (Anthropic breakpoints).
    cache: bool = False

    @property
    def system(self) -> str | None:
        """The system prompt, when the first message carries one."""
        if self.messages and self.messages[0].role == "system":
            return self.messages[0].content
        return None
