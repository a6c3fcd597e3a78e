"""What callers get back: a handle on a run and its final result."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, PrivateAttr

from helix_dbos.api.runs import PendingToolCall as PendingToolCall
from helix_dbos.api.runs import RunInfo as RunInfo
from helix_dbos.api.runs import SessionInfo as SessionInfo
from helix_dbos.api.runs import UsageSummary as UsageSummary
from helix_dbos.errors import GuardrailTripped, UsageLimitExceeded
from helix_dbos.orchestration.guardrails import GUARDRAIL_STOP
from helix_dbos.orchestration.terminating import response_text
from helix_dbos.orchestration.types import fill_field_defaults
from helix_dbos.orchestration.usage_limits import USAGE_LIMIT_STOP
from helix_dbos.store.run_bounds import RunOutcome

RunStatus = Literal["running", "waiting", "paused", "completed", "failed", "interrupted", "aborted"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "interrupted", "aborted"})
LIVE_STATUSES: frozenset[str] = frozenset({"running", "waiting", "paused"})


class AgentResult(BaseModel):
    status: RunStatus
    output: Any = None
    error: str | None = None
    session_id: str
    run_id: str
    step_count: int = 0
    usage: dict[str, int] = Field(default_factory=dict)
    # Terminating runs (seed 004): the terminating tool's output as a string, and the run's messages.
    response: str | None = None
    generated_messages: list[dict[str, Any]] | None = None
    # Why the loop stopped when it was not the model finishing: "stop_when" (the
    # agent's custom stop condition held after a step), "usage_limit" (a `UsageLimits`
    # was reached); None otherwise.
    stop_reason: str | None = None
    _terminating: bool = PrivateAttr(default=False)

    def __setstate__(self, state: dict[Any, Any]) -> None:
        """DBOS pickles a run's result; one pickled by an older helix lacks the fields
        added since: they get their defaults instead of an AttributeError on access."""
        fill_field_defaults(type(self), state)
        super().__setstate__(state)

    @property
    def terminating(self) -> bool:
        """The run ran in seed 004's autonomous mode (so the result has `response` and
        `generated_messages`)."""
        return self._terminating

    @terminating.setter
    def terminating(self, value: bool) -> None:
        self._terminating = value

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    def raise_for_stop(self) -> None:
        """Raise the typed error of a run a control ended: `UsageLimitExceeded` for
        `stop_reason="usage_limit"`, `GuardrailTripped` for `"guardrail"`; nothing
        otherwise."""
        if self.stop_reason == USAGE_LIMIT_STOP:
            raise UsageLimitExceeded(self.error or "Usage limit exceeded")
        if self.stop_reason == GUARDRAIL_STOP:
            raise GuardrailTripped(self.error or "A guardrail tripped")


class RunRowLike(Protocol):
    """The columns of a run's row a result is made of (`RunInfo`, the store's `RunRow`)."""

    @property
    def run_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def step_count(self) -> int: ...
    @property
    def output(self) -> Any: ...
    @property
    def error(self) -> str | None: ...


def row_result(run: RunRowLike, **extra: Any) -> AgentResult:
    """A result from a run's row (and `extra` fields): what its workflow returned."""
    fields = {
        "status": run.status,
        "output": run.output,
        "error": run.error,
        "session_id": run.session_id,
        "run_id": run.run_id,
        "step_count": run.step_count,
    }
    return AgentResult.model_validate(fields | extra)


def run_result(outcome: RunOutcome) -> AgentResult:
    """An ended run's result from its row, with its usage, stop reason and mode."""
    run = outcome.run
    completed_terminating = outcome.terminating and run.status == "completed"
    result = row_result(
        run,
        usage=outcome.usage,
        response=response_text(run.output) if completed_terminating else None,
        stop_reason=outcome.stop_reason,
    )
    result.terminating = outcome.terminating
    return result
