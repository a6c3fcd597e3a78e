"""Agent definitions: prompt, tools, schemas, model and the completion rules."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, TypeAdapter

from helix_dbos.definitions.companions import CompanionMode, OnParentEnd, companion_tools
from helix_dbos.definitions.handoffs import Handoff, handoff_tools
from helix_dbos.definitions.hooks import AgentHooks
from helix_dbos.definitions.tool import Tool, named_tool
from helix_dbos.errors import AgentDefinitionError
from helix_dbos.orchestration.completion import (
    DEFAULT_MAX_TOKENS_CORRECTION,
    DEFAULT_NUDGE_MESSAGE,
    CompletionMode,
)
from helix_dbos.orchestration.double_texting import (
    DEFAULT_STRATEGY,
    MultitaskStrategy,
    check_strategy,
)
from helix_dbos.orchestration.guardrails import Guardrail, guardrail_name, runs_in_parallel
from helix_dbos.orchestration.history.policy import HistoryPolicy
from helix_dbos.orchestration.types import FINISH_TOOL_NAME, OutputMode, StepResult
from helix_dbos.orchestration.usage_limits import UsageLimits

SystemPrompt = str | Callable[[Any], str]
#: `stop_when(step_result, state) -> bool`, evaluated after each step (seed 001 stopWhen);
#: `state` is the state_schema model when the agent has one, else a dict.
StopCondition = Callable[[StepResult, Any], bool]


@dataclass(frozen=True)
class LLMConfig:
    """Which model to call and how. `model` is `provider:model` (or `mock`)."""

    model: str = "mock"
    temperature: float | None = None
    max_tokens: int | None = None
    strict_output: bool = False
    base_url: str | None = None
    provider_options: dict[str, Any] = field(default_factory=dict)
    # Rate limits, 5xx and lost connections retry the LLM step with backoff (DBOS step
    # retries): at most `max_attempts` calls, `retry_interval_seconds` apart at first.
    max_attempts: int = 6
    retry_interval_seconds: float = 1.0
    retry_backoff: float = 2.0
    # Fleet-wide limits on this model's calls (docs/limits.md): at most `max_concurrent`
    # at once and `rate_limit=(n, seconds)` started per period, across every worker.
    max_concurrent: int | None = None
    rate_limit: tuple[int, float] | None = None
    # Anthropic prompt caching (docs/providers.md): `cache_control` breakpoints on the
    # system prompt and tools and on the last message. OpenAI caches on its own.
    cache: bool = True
    # Models tried in order, inside the same LLM step, once this model's attempts are
    # spent on provider errors (rate limits, 5xx, overloaded, lost connections).
    fallback: tuple[str, ...] | list[str] = ()

    def __post_init__(self) -> None:
        given: object = self.fallback  # a single name is taken for a list of one
        fallback = (given,) if isinstance(given, str) else tuple(self.fallback)
        for name in fallback:
            if not isinstance(name, str) or (name != "mock" and ":" not in name.strip(":")):
                raise AgentDefinitionError(
                    f"LLMConfig: fallback models are 'provider:model' names such as "
                    f"'openai:gpt-4o', not {name!r}"
                )
        if self.model in fallback or len(set(fallback)) != len(fallback):
            raise AgentDefinitionError(
                f"LLMConfig: fallback {list(fallback)} repeats a model (or the primary "
                f"{self.model!r}): each model is tried once"
            )
        object.__setattr__(self, "fallback", fallback)
        if self.max_attempts < 1 or self.retry_interval_seconds < 0 or self.retry_backoff < 1:
            raise AgentDefinitionError(
                "LLMConfig: max_attempts must be >= 1, retry_interval_seconds >= 0 "
                "and retry_backoff >= 1"
            )
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise AgentDefinitionError("LLMConfig: max_concurrent must be at least 1")
        if self.rate_limit is not None:
            if len(self.rate_limit) != 2 or self.rate_limit[0] < 1 or self.rate_limit[1] <= 0:
                raise AgentDefinitionError(
                    f"LLMConfig: rate_limit is (calls, seconds) with calls >= 1 and seconds "
                    f"> 0, not {self.rate_limit!r}"
                )
            object.__setattr__(
                self, "rate_limit", (int(self.rate_limit[0]), float(self.rate_limit[1]))
            )

    @property
    def limited(self) -> bool:
        """Whether this model's calls take a slot on its fleet-wide queue first."""
        return self.max_concurrent is not None or self.rate_limit is not None

    @property
    def provider(self) -> str:
        return self.model.split(":", 1)[0]


@dataclass(frozen=True)
class TerminatingConfig:
    """Seed 004: the named tools end the run with their output.

    A text-only reply gets `nudge_message` (at most `consecutive_nudges` in a
    row, the count reset by any tool call), then the run fails with "Max
    consecutive nudges exceeded"; more than `max_invocations` LLM calls fail it
    with "Max invocations exceeded".
    """

    tool_ids: tuple[str, ...] | list[str]
    consecutive_nudges: int = 1
    nudge_message: str = DEFAULT_NUDGE_MESSAGE
    max_invocations: int = 64

    def __post_init__(self) -> None:
        if not self.tool_ids:
            raise AgentDefinitionError("terminating_config needs at least one tool id")
        if self.consecutive_nudges < 0 or self.max_invocations < 1:
            raise AgentDefinitionError("consecutive_nudges must be >= 0 and max_invocations >= 1")
        object.__setattr__(self, "tool_ids", tuple(self.tool_ids))

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_ids": list(self.tool_ids),
            "consecutive_nudges": self.consecutive_nudges,
            "nudge_message": self.nudge_message,
            "max_invocations": self.max_invocations,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TerminatingConfig:
        return cls(**data)


def _resolve_tool(item: Tool | str) -> Tool:
    """Tools are objects; built-ins may also be named (`"__complete__"`)."""
    return named_tool(item) if isinstance(item, str) else item


@dataclass(frozen=True)
class PersistentAgent:
    """A persistent sub-agent (seed 002): the parent drives it with the `companion__*`
    tools; `blocking`: the parent waits for its answer, `non_blocking`: the parent works
    on and hears of its completion in a later model input.

    `on_parent_end`: what a child still running when the parent's run ends does (a
    non-blocking one's turn can outlive it): `keep_running` (the default: it finishes,
    and the parent's next run hears of it) or `stop` (its run is aborted, as
    `companion__terminateChild` would). Interrupt and abort of the parent's session reach
    it either way."""

    agent: Agent
    mode: CompanionMode = "blocking"
    on_parent_end: OnParentEnd = "keep_running"

    def __post_init__(self) -> None:
        if self.mode not in ("blocking", "non_blocking"):
            raise AgentDefinitionError(
                f"PersistentAgent '{self.agent.name}': mode must be 'blocking' or 'non_blocking'"
            )
        if self.on_parent_end not in ("keep_running", "stop"):
            raise AgentDefinitionError(
                f"PersistentAgent '{self.agent.name}': on_parent_end must be 'keep_running' "
                "or 'stop'"
            )


class Agent:
    """An agent definition. Immutable in spirit: register it once, before launch."""

    def __init__(
        self,
        name: str,
        *,
        system_prompt: SystemPrompt = "",
        tools: list[Tool | str] | None = None,
        output_schema: type[BaseModel] | None = None,
        state_schema: type[BaseModel] | None = None,
        llm: LLMConfig | None = None,
        max_steps: int = 20,
        hooks: AgentHooks | None = None,
        max_consecutive_nudges: int = 1,
        nudge_message: str | None = None,
        max_output_retries: int = 3,
        max_tokens_correction: str = DEFAULT_MAX_TOKENS_CORRECTION,
        terminating: TerminatingConfig | None = None,
        input_schema: type[BaseModel] | None = None,
        output_mode: OutputMode = "tool",
        stop_when: StopCondition | None = None,
        persistent_agents: list[PersistentAgent] | None = None,
        multitask_strategy: MultitaskStrategy = DEFAULT_STRATEGY,
        history: HistoryPolicy | None = None,
        usage_limits: UsageLimits | None = None,
        input_guardrails: list[Guardrail] | None = None,
        output_guardrails: list[Guardrail] | None = None,
        handoffs: list[Agent | Handoff] | None = None,
    ) -> None:
        if not name or not isinstance(name, str):
            raise AgentDefinitionError("An agent needs a non-empty string name")
        if max_steps < 1:
            raise AgentDefinitionError(f"Agent '{name}': max_steps must be at least 1")
        if max_consecutive_nudges < 0 or max_output_retries < 0:
            raise AgentDefinitionError(f"Agent '{name}': nudge and retry counts cannot be negative")
        self.name = name
        self.system_prompt = system_prompt
        self.tools: list[Tool] = [_resolve_tool(t) for t in tools or []]
        self.persistent_agents = list(persistent_agents or [])
        modes = {p.agent.name: p.mode for p in self.persistent_agents}
        if len(modes) != len(self.persistent_agents):
            raise AgentDefinitionError(f"Agent '{name}': a persistent agent is listed twice")
        self.tools += companion_tools(modes)
        # `transfer_to_<name>` tools: the run goes on with that agent (definitions/handoffs.py).
        self.tools += handoff_tools(name, list(handoffs or []))
        self.output_schema = output_schema
        self.state_schema = state_schema
        self.llm = llm or LLMConfig()
        self.max_steps = max_steps
        self.hooks = hooks or AgentHooks()
        self.max_consecutive_nudges = max_consecutive_nudges
        self.nudge_message = nudge_message
        self.max_output_retries = max_output_retries
        self.max_tokens_correction = max_tokens_correction
        self.terminating = terminating
        # What a parent passes when it delegates to this agent (`sub_agent_tool`);
        # without one, a sub-agent call takes `{"message": "..."}`.
        self.input_schema = input_schema
        self.output_mode: OutputMode = output_mode
        self.stop_when = stop_when
        # Checked before each model call over the run's tree (docs/agent-controls.md).
        if usage_limits is not None and not isinstance(usage_limits, UsageLimits):
            raise AgentDefinitionError(f"Agent '{name}': usage_limits must be UsageLimits")
        self.usage_limits = usage_limits
        # Checks of the run's input (before its first model call) and of its final
        # output (before it completes): a tripwire fails the run (docs/agent-controls.md).
        self.input_guardrails = _guardrails(name, "input", input_guardrails)
        self.output_guardrails = _guardrails(name, "output", output_guardrails)
        # What a message sent while a run of this agent is live does (double texting);
        # `execute(multitask_strategy=...)` overrides it per call.
        try:
            self.multitask_strategy = check_strategy(multitask_strategy)
        except ValueError as exc:
            raise AgentDefinitionError(f"Agent '{name}': {exc}") from None
        # What part of the transcript the model is shown (docs/context.md); the default
        # keeps the input under the model's known window by dropping the oldest turns.
        self.history = history if history is not None else HistoryPolicy()
        self._finish_schema: dict[str, Any] | None = None  # built once, on first use
        self._check_tools()
        self._check_output_mode()
        if terminating is not None:
            self.check_terminating(terminating)
        if (
            any(getattr(t, "builtin", False) for t in self.tools)
            and not self.completion.requires_tool
            and terminating is None
        ):
            raise AgentDefinitionError(
                f"Agent '{name}' uses the built-in tools but has no way to finish: include '__complete__' "
                "(or a finish_with tool, an output_schema or a terminating config)"
            )
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

    def _check_output_mode(self) -> None:
        if self.output_mode not in ("tool", "native", "prompted"):
            raise AgentDefinitionError(
                f"Agent '{self.name}': output_mode must be 'tool', 'native' or 'prompted', "
                f"not {self.output_mode!r}"
            )
        if self.output_mode == "tool":
            return
        if self.output_schema is None:
            raise AgentDefinitionError(
                f"Agent '{self.name}': output_mode={self.output_mode!r} needs an output_schema"
            )
        if self.finish_with_tools:
            raise AgentDefinitionError(
                f"Agent '{self.name}': output_mode={self.output_mode!r} completes with the reply "
                "itself, finish_with tools complete with a tool: use output_mode='tool'"
            )

    # --- derived views used by the runtime ---------------------------------

    def persistent_agent(self, name: str) -> PersistentAgent | None:
        return next((p for p in self.persistent_agents if p.agent.name == name), None)

    @property
    def guards_tools(self) -> bool:
        """Whether any of its tools has guardrails (their checks are steps of their own)."""
        return any(t.guardrails for t in self.tools)

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    @property
    def finish_with_tools(self) -> list[Tool]:
        return [t for t in self.tools if t.finish_with]

    def check_terminating(self, terminating: TerminatingConfig) -> None:
        """Every terminating tool id must name one of this agent's tools."""
        names = {t.name for t in self.tools}
        missing = [tool_id for tool_id in terminating.tool_ids if tool_id not in names]
        if missing:
            raise AgentDefinitionError(
                f"Agent '{self.name}' has no tool {', '.join(repr(m) for m in missing)} "
                f"named in terminating_config (its tools: {', '.join(sorted(names)) or 'none'})"
            )

    def completion_for(self, terminating: TerminatingConfig | None) -> CompletionMode:
        """The completion rules of a run: terminating tools override the agent's own."""
        if terminating is not None:
            return CompletionMode(
                tool_names=tuple(terminating.tool_ids), inject_finish=False, announce=False
            )
        return self.completion

    @property
    def completion(self) -> CompletionMode:
        """How this agent must finish: via `__finish__`, finish_with tools, or freely."""
        finishers = [t.name for t in self.finish_with_tools]
        if finishers:
            return CompletionMode(tool_names=tuple(finishers), inject_finish=False)
        if self.output_schema is not None and self.output_mode != "tool":
            schema_text = json.dumps(self.finish_parameters(), separators=(",", ":"))
            return CompletionMode(
                tool_names=(),
                inject_finish=False,
                output_mode=self.output_mode,
                schema_text=schema_text,
            )
        if self.output_schema is not None:
            return CompletionMode(tool_names=(FINISH_TOOL_NAME,), inject_finish=True)
        return CompletionMode(tool_names=(), inject_finish=False)

    def finish_parameters(self) -> dict[str, Any]:
        """JSON schema of `__finish__`: the output schema (built once)."""
        assert self.output_schema is not None
        if self._finish_schema is None:
            self._finish_schema = self.output_schema.model_json_schema()
        return self._finish_schema

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

    def state_view(self, state: dict[str, Any]) -> Any:
        """The state as user code sees it: the state_schema model, or a copy of the dict."""
        return self.state_schema.model_validate(state) if self.state_schema else dict(state)

    def resolve_system_prompt(self, state: dict[str, Any]) -> str:
        if callable(self.system_prompt):
            view = self.state_schema.model_validate(state) if self.state_schema else dict(state)
            return self.system_prompt(view)
        return self.system_prompt

    def on_model(self, model: str) -> Agent:
        """This agent as its fallback `model` is called (`LLMConfig(fallback=...)`): that
        model's adapter, without the primary's `base_url` and fallbacks."""
        clone = copy.copy(self)
        clone.llm = dataclasses.replace(self.llm, model=model, base_url=None, fallback=())
        return clone


def _guardrails(agent: str, kind: str, guardrails: list[Guardrail] | None) -> list[Guardrail]:
    """Callables with distinct names: a check's step is named after its guardrail."""
    checked = list(guardrails or [])
    names = [guardrail_name(g) for g in checked]
    if not all(callable(g) for g in checked) or len(set(names)) != len(names):
        raise AgentDefinitionError(
            f"Agent '{agent}': {kind}_guardrails must be callables with distinct names"
        )
    if kind == "output" and any(runs_in_parallel(g) for g in checked):
        raise AgentDefinitionError(
            f"Agent '{agent}': only input guardrails run in parallel (run_in_parallel=True)"
        )
    return checked
