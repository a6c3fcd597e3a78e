"""Agent definitions: prompt, tools, schemas, model and the completion rules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, TypeAdapter

from helix_dbos.definitions.hooks import AgentHooks
from helix_dbos.definitions.tool import Tool
from helix_dbos.errors import AgentDefinitionError
from helix_dbos.orchestration.completion import (
    DEFAULT_MAX_TOKENS_CORRECTION,
    DEFAULT_NUDGE_MESSAGE,
    CompletionMode,
)
from helix_dbos.orchestration.types import FINISH_TOOL_NAME

SystemPrompt = str | Callable[[Any], str]


@dataclass(frozen=True)
class LLMConfig:
    """Which model to call and how. `model` is `provider:model` (or `mock`)."""

    model: str = "mock"
    temperature: float | None = None
    max_tokens: int | None = None
    strict_output: bool = False
    base_url: str | None = None
    provider_options: dict[str, Any] = field(default_factory=dict)

    @property
    def provider(self) -> str:
        return self.model.split(":", 1)[0]


@dataclass(frozen=True)
class TerminatingConfig:
    """Seed 004: named tools end the run with their output (see helix_dbos.toolkits)."""

    tool_ids: tuple[str, ...]
    consecutive_nudges: int = 1
    nudge_message: str = DEFAULT_NUDGE_MESSAGE
    max_invocations: int = 64


class Agent:
    """An agent definition. Immutable in spirit: register it once, before launch."""

    def __init__(
        self,
        name: str,
        *,
        system_prompt: SystemPrompt = "",
        tools: list[Tool] | None = None,
        output_schema: type[BaseModel] | None = None,
        state_schema: type[BaseModel] | None = None,
        llm: LLMConfig | None = None,
        max_steps: int = 20,
        hooks: AgentHooks | None = None,
        max_consecutive_nudges: int = 1,
        nudge_message: str | None = None,
        max_output_retries: int = 3,
        max_tokens_correction: str = DEFAULT_MAX_TOKENS_CORRECTION,
    ) -> None:
        if not name or not isinstance(name, str):
            raise AgentDefinitionError("An agent needs a non-empty string name")
        if max_steps < 1:
            raise AgentDefinitionError(f"Agent '{name}': max_steps must be at least 1")
        if max_consecutive_nudges < 0 or max_output_retries < 0:
            raise AgentDefinitionError(f"Agent '{name}': nudge and retry counts cannot be negative")
        self.name = name
        self.system_prompt = system_prompt
        self.tools: list[Tool] = list(tools or [])
        self.output_schema = output_schema
        self.state_schema = state_schema
        self.llm = llm or LLMConfig()
        self.max_steps = max_steps
        self.hooks = hooks or AgentHooks()
        self.max_consecutive_nudges = max_consecutive_nudges
        self.nudge_message = nudge_message
        self.max_output_retries = max_output_retries
        self.max_tokens_correction = max_tokens_correction
        self._check_tools()
        self._output_adapter = TypeAdapter(output_schema) if output_schema is not None else None

    def __repr__(self) -> str:
        return f"Agent({self.name!r})"

    def _check_tools(self) -> None:
        seen: set[str] = set()
        for t in self.tools:
            if not isinstance(t, Tool):
                raise AgentDefinitionError(
                    f"Agent '{self.name}': tools must be Tool objects (use @tool), got {t!r}"
                )
            if t.name == FINISH_TOOL_NAME:
                raise AgentDefinitionError(f"Agent '{self.name}': '{FINISH_TOOL_NAME}' is reserved")
            if t.name in seen:
                raise AgentDefinitionError(f"Agent '{self.name}': duplicate tool name '{t.name}'")
            seen.add(t.name)

    # --- derived views used by the runtime ---------------------------------

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    @property
    def finish_with_tools(self) -> list[Tool]:
        return [t for t in self.tools if t.finish_with]

    @property
    def completion(self) -> CompletionMode:
        """How this agent must finish: via `__finish__`, finish_with tools, or freely."""
        finishers = [t.name for t in self.finish_with_tools]
        if finishers:
            return CompletionMode(tool_names=tuple(finishers), inject_finish=False)
        if self.output_schema is not None:
            return CompletionMode(tool_names=(FINISH_TOOL_NAME,), inject_finish=True)
        return CompletionMode(tool_names=(), inject_finish=False)

    def finish_parameters(self) -> dict[str, Any]:
        """JSON schema of `__finish__`: the output schema."""
        assert self.output_schema is not None
        return self.output_schema.model_json_schema()

    def validate_output(self, value: Any) -> Any:
        """Validate against output_schema; returns JSON-ready data. Raises ValidationError."""
        if self._output_adapter is None:
            return value
        return self._output_adapter.dump_python(
            self._output_adapter.validate_python(value), mode="json"
        )

    def initial_state(self, state: Any = None) -> dict[str, Any]:
        """The state a new session starts with, validated against state_schema."""
        if isinstance(state, BaseModel):
            return state.model_dump(mode="json")
        if self.state_schema is not None:
            return self.state_schema.model_validate(state or {}).model_dump(mode="json")
        if state is None:
            return {}
        if not isinstance(state, dict):
            raise AgentDefinitionError(
                f"Agent '{self.name}': state must be a dict or a pydantic model"
            )
        return dict(state)

    def resolve_system_prompt(self, state: dict[str, Any]) -> str:
        if callable(self.system_prompt):
            view = self.state_schema.model_validate(state) if self.state_schema else dict(state)
            return self.system_prompt(view)
        return self.system_prompt
