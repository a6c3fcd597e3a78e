"""Guardrails with tripwires (issue 50), pure values.

A guardrail is a function (sync or async) of a run's input or of its final output that
returns a `GuardrailResult`; a tripwire ends the run `failed` with
`stop_reason="guardrail"`. Each check is a durable step, so a check that passed is never
run again after a crash (`runtime/loop/guardrail_steps.py`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

GUARDRAIL_STOP = "guardrail"  # the run row's `stop_reason` when a tripwire ended it
GuardrailKind = Literal["input", "output", "tool"]
#: `guardrail(value) -> GuardrailResult`: the run's input text, its final output, or a
#: tool call's arguments (a dict).
Guardrail = Callable[[Any], "GuardrailResult | Awaitable[GuardrailResult]"]


@dataclass(frozen=True)
class GuardrailResult:
    """What a guardrail says: `tripwire` ends the run; `reason` is recorded with it;
    `info` (JSON-able) is kept in the check's step output, for the caller to inspect."""

    tripwire: bool
    reason: str = ""
    info: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tripwire, bool):
            raise TypeError("GuardrailResult.tripwire must be a bool")
        if not isinstance(self.reason, str):
            raise TypeError("GuardrailResult.reason must be a str")
        if self.info is not None:
            json.dumps(self.info)  # TypeError/ValueError: not JSON-able


@dataclass(frozen=True)
class GuardrailCheck:
    """One check's checkpointed outcome: which guardrail, and what it said."""

    kind: GuardrailKind
    name: str  # the guardrail's; for a tool's, "<tool>.<guardrail>"
    tripwire: bool
    reason: str = ""
    info: dict[str, Any] | None = None

    @property
    def message(self) -> str:
        return f"Guardrail '{self.name}' ({self.kind}) tripped: {self.reason or 'no reason given'}"


def guardrail_name(guardrail: Callable[..., Any]) -> str:
    return str(getattr(guardrail, "__name__", None) or type(guardrail).__name__)


class InputGuardrail:
    """An input guardrail with options. `run_in_parallel` (the OpenAI Agents SDK's name)
    starts its check alongside the run's first model call instead of before it; the
    model's reply is acted on (tools, final write) only once every such check passed."""

    __name__: str

    def __init__(self, guardrail: Guardrail, *, run_in_parallel: bool = False) -> None:
        if not callable(guardrail):
            raise TypeError("input_guardrail() takes a callable")
        self.guardrail = guardrail
        self.run_in_parallel = run_in_parallel
        self.__name__ = guardrail_name(guardrail)
        self.__doc__ = getattr(guardrail, "__doc__", None)

    def __call__(self, value: Any) -> GuardrailResult | Awaitable[GuardrailResult]:
        return self.guardrail(value)


def input_guardrail(guardrail: Guardrail | None = None, *, run_in_parallel: bool = False) -> Any:
    """`input_guardrail(fn, run_in_parallel=True)`, or as a decorator
    `@input_guardrail(run_in_parallel=True)`: the guardrail, with its options."""
    if guardrail is None:
        return lambda fn: InputGuardrail(fn, run_in_parallel=run_in_parallel)
    return InputGuardrail(guardrail, run_in_parallel=run_in_parallel)


def runs_in_parallel(guardrail: Guardrail) -> bool:
    """Whether an input guardrail's check runs alongside the first model call."""
    return isinstance(guardrail, InputGuardrail) and guardrail.run_in_parallel
