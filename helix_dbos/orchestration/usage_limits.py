"""Usage limits over a run's tree (issue 50), pure rules.

A run with `UsageLimits` is checked before each of its model calls against what its
tree has used so far (the run's own LLM calls and those of every session below its
session since the run started: sub-agents, companions; and the tokens its ended remote
children reported). A run's descendants (its sub-agents, the companions' turns it
starts, theirs) check its limits too, before each of their own model calls: they are
handed down as `AncestorLimits`, so a child stops at its ancestor's limit instead of
spending until it ends. Kept apart from the per-model concurrency limits of `LLMConfig`
(docs/limits.md), which queue calls rather than end runs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from decimal import Decimal
from typing import Any

USAGE_LIMIT_STOP = "usage_limit"  # the run row's `stop_reason` when a limit ended it


@dataclass(frozen=True)
class UsageLimits:
    """At most this much over the run and its descendants; `None` is no limit.

    `requests` counts model calls; the token limits count what providers reported;
    `cost_usd` is the priced cost (`helix_dbos.llm.pricing`, unpriced models count 0).
    A run reaching a limit ends `failed` with `stop_reason="usage_limit"` before its
    next model call."""

    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost_usd: float | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"UsageLimits.{f.name} must be a number, not {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"UsageLimits.{f.name} must be a finite number >= 0")
            if f.name != "cost_usd" and not float(value).is_integer():
                raise ValueError(f"UsageLimits.{f.name} must be a whole number")
            object.__setattr__(self, f.name, float(value) if f.name == "cost_usd" else int(value))

    def to_json(self) -> dict[str, Any]:
        """The set limits only, as stored in the run's options."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UsageLimits:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"UsageLimits: unknown limit(s) {sorted(unknown)}")
        return cls(**data)


@dataclass(frozen=True)
class AncestorLimits:
    """An ancestor run's limits, handed down to every run below it (part of a child's
    workflow input): the child checks them against the ancestor's tree usage."""

    run_id: str
    agent_name: str
    limits: UsageLimits

    def message(self, reached: LimitBreach) -> str:
        """The child's error: the limit, the amounts, and whose limit it is."""
        whose = f"the limit of ancestor run {self.run_id}, agent {self.agent_name!r}"
        return f"{reached.message} ({whose})"


@dataclass(frozen=True)
class TreeUsage:
    """What a run's tree has used so far (its LLM calls' usage rows, and its ended
    remote children's reported tokens)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal = Decimal(0)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class LimitBreach:
    """The first limit the tree reached: its name, the limit and the amount used."""

    limit: str
    allowed: float
    used: float

    @property
    def message(self) -> str:
        return (
            f"Usage limit exceeded: {self.limit} limit {_shown(self.allowed)}, "
            f"used {_shown(self.used)}"
        )


def breach(limits: UsageLimits, usage: TreeUsage) -> LimitBreach | None:
    """The first limit the next model call would go past: a request limit is reached
    when as many calls were made; a token or cost limit when it is used up."""
    if limits.requests is not None and usage.requests >= limits.requests:
        return LimitBreach("requests", limits.requests, usage.requests)
    used: list[tuple[str, float | None, float]] = [
        ("input_tokens", limits.input_tokens, usage.input_tokens),
        ("output_tokens", limits.output_tokens, usage.output_tokens),
        ("total_tokens", limits.total_tokens, usage.total_tokens),
        ("cost_usd", limits.cost_usd, float(usage.cost_usd)),
    ]
    for name, allowed, amount in used:
        if allowed is not None and amount >= allowed:
            return LimitBreach(name, allowed, amount)
    return None


def _shown(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"
