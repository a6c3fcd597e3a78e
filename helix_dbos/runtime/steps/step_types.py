"""The typed values that pass between the agent loop and its durable steps.

DBOS checkpoints (pickles) every step's output, and replays it on recovery, so
each value here stays small: no history, no agent definition, only what the
loop needs to decide the next move.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, NamedTuple

from helix_dbos.definitions.agent import TerminatingConfig
from helix_dbos.definitions.request_tools import ClientToolSpec
from helix_dbos.orchestration.messages import to_json_text
from helix_dbos.orchestration.parts import DocumentUrl, ImageUrl, StoredBlob, attachment_names
from helix_dbos.orchestration.types import LLMUsage, StepResult, ToolCall, at_plain_default
from helix_dbos.orchestration.usage_limits import AncestorLimits, UsageLimits
from helix_dbos.store.repository import ToolCallKind

GateKind = ToolCallKind
UsageKind = Literal["tool", "client_tool_wait_ms", "human_input_wait_ms", "subagent"]
FinalStatus = Literal["completed", "failed", "interrupted", "aborted"]


def compact_state(value: Any) -> dict[str, Any]:
    """A dataclass step output's pickled state without its fields at plain defaults:
    when it is loaded, the class's attributes give them back (issue 48: every tool
    step's checkpoint is a `ToolOutcome`, two thirds of whose fields are mostly at
    their defaults)."""
    values = value.__dict__
    return {
        f.name: values[f.name]
        for f in fields(value)
        if f.default is MISSING or not at_plain_default(values[f.name], f.default)
    }


@dataclass(frozen=True)
class RunOptions:
    """Per-run settings, a workflow input: a run's terminating config (seed 004)
    overrides the agent's; `client_tools` are declared by the caller for this run only
    (`definitions/request_tools.py`)."""

    terminating: TerminatingConfig | None = None
    # Who the run is for (docs/limits.md): its share of a limited model's calls.
    tenant: str | None = None
    client_tools: tuple[ClientToolSpec, ...] = ()
    # `execute(usage_limits=...)`: checked before each model call, over the run's tree
    # (orchestration/usage_limits.py); the agent's own limits are checked too.
    usage_limits: UsageLimits | None = None
    # A child's: its ancestors' limits, nearest first, checked before each of its model
    # calls against each ancestor's tree. The workflow input is pickled: one pickled
    # before this field existed reads the class default, `()`, "no inherited limits".
    ancestor_limits: tuple[AncestorLimits, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The shape stored in `helix.runs.options` (`tenant` is also a column of its own)."""
        shape: dict[str, Any] = (
            {"terminating": self.terminating.to_dict()} if self.terminating else {}
        )
        if self.tenant is not None:
            shape["tenant"] = self.tenant
        if self.client_tools:
            shape["client_tools"] = [t.name for t in self.client_tools]
        if self.usage_limits is not None:
            shape["usage_limits"] = self.usage_limits.to_json()
        return shape


# --- the LLM step ---------------------------------------------------------------


@dataclass(frozen=True)
class ModelReply:
    """The LLM step's output: the model's parsed step, and the session state it saw
    (`state_changed`: as the step's hooks left it, to be committed with the step)."""

    result: StepResult
    state: dict[str, Any]
    state_changed: bool = False

    def __getstate__(self) -> dict[str, Any]:
        return compact_state(self)


@dataclass(frozen=True)
class InterruptRequested:
    """The LLM step found an interrupt waiting and did not call the model."""


@dataclass(frozen=True)
class RunNotOpened:
    """The LLM step found no row for its run: a workflow started alongside the open of
    its run (see `HelixDBOS._open_while_starting`) whose open never committed, because
    the process died in between or the open failed. Nothing to do, nothing to write."""


@dataclass(frozen=True)
class RunEnded:
    """The LLM step found its run ended already (its final write committed before the
    workflow's last checkpoint, and the process died in between; or an abort): the
    model is not asked, and the run's result is its row."""


@dataclass(frozen=True)
class SummaryDue:
    """The LLM step found the model's input over its budget and the agent's history
    policy summarising (`Summarize`): it asked the model nothing. The workflow takes the
    `helix.summary` step for the session's first `covers_through` messages, then the LLM
    step again (docs/context.md). Only agents that summarise ever take this path."""

    covers_through: int


@dataclass(frozen=True)
class UsageLimitReached:
    """The LLM step found the run's tree at a usage limit and did not call the model
    (issue 50): the run fails with `error`, `stop_reason="usage_limit"`."""

    error: str


LLMStepOutput = (
    ModelReply | InterruptRequested | RunNotOpened | RunEnded | SummaryDue | UsageLimitReached
)


# --- gates and tool outcomes -------------------------------------------------------


@dataclass(frozen=True)
class GateDecision:
    """The `helix.gate` step's output: which calls of a batch wait for a human, and why."""

    kinds: dict[str, GateKind] = field(default_factory=dict)

    def __contains__(self, call_id: object) -> bool:
        return call_id in self.kinds

    def __bool__(self) -> bool:
        return bool(self.kinds)

    def kind_of(self, call: ToolCall) -> GateKind:
        return self.kinds[call.id]


@dataclass(frozen=True)
class ToolOutcome:
    """What one tool call came to; a tool step's checkpointed output.

    `content` is the tool message's text (JSON for values); `result` is the
    JSON-ready value (a terminating tool's output). `duration_ms` is `None` for a
    call that never ran, which then records no usage row.
    """

    success: bool
    content: str | None
    result: Any = None
    error: str | None = None
    state: dict[str, Any] | None = None  # the session state after the tool, if it changed
    events: tuple[dict[str, Any], ...] = ()  # custom events the tool emitted
    duration_ms: float | None = None
    usage_kind: UsageKind = "tool"
    finish_output: Any = None  # a finish_with tool's (transformed) output
    transform_error: str | None = None  # its transform raised: the run fails
    # A finish_with tool's output did not match the agent's output_schema: `error` says
    # how, and the call counts as an invalid output (bounded retries, seed 000).
    invalid_output: bool = False
    tokens: LLMUsage | None = None  # a sub-agent's tokens, its own sub-agents' included
    # Images and documents the tool returned, as references (their bytes are in
    # helix.blobs before this outcome is checkpointed): docs/content-parts.md.
    attachments: tuple[StoredBlob | ImageUrl | DocumentUrl, ...] = ()

    def __getstate__(self) -> dict[str, Any]:
        return compact_state(self)

    @classmethod
    def executed(
        cls,
        *,
        result: Any,
        error: str | None,
        state: dict[str, Any] | None,
        events: list[dict[str, Any]],
        duration_ms: float,
        finish_output: Any = None,
        transform_error: str | None = None,
        invalid_output: bool = False,
        attachments: Sequence[StoredBlob | ImageUrl | DocumentUrl] = (),
    ) -> ToolOutcome:
        """A call that ran: `result` is its JSON-ready value, `error` why it failed;
        `attachments` the parts it returned (then a `None` result reads as their names)."""
        content = to_json_text(result) if error is None else None
        if attachments and error is None and result is None:
            content = attachment_names(attachments)
        return cls(
            success=error is None,
            content=content,
            attachments=tuple(attachments) if error is None else (),
            result=result,
            error=error,
            state=state,
            events=tuple(events),
            duration_ms=duration_ms,
            finish_output=finish_output,
            transform_error=transform_error,
            invalid_output=invalid_output,
        )

    @classmethod
    def not_executed(cls, reason: str) -> ToolOutcome:
        """A call that did not run (denied, timed out, after a winning finish_with tool)."""
        return cls(success=False, content=None, error=reason)

    @classmethod
    def answered(
        cls, kind: GateKind, content: str | None, error: str | None, wait_ms: float
    ) -> ToolOutcome:
        """A client tool's result or a human's input, handed in from outside."""
        return cls(
            success=error is None,
            content=content,
            result=content,
            error=error,
            duration_ms=wait_ms,
            usage_kind="client_tool_wait_ms" if kind == "client" else "human_input_wait_ms",
        )


class ChunkRecord(NamedTuple):
    """One `helix.stream_chunks` row before insert; `key` makes a replay a no-op."""

    key: str
    type: str
    data: Any
