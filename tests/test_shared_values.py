"""Runs of one agent share one frozen Limits / CompletionMode (issue 34: memory a
waiting run holds)."""

from __future__ import annotations

from dataclasses import dataclass

from helix_dbos import Agent
from helix_dbos.runtime.loop import shared_values
from helix_dbos.runtime.loop.reply_plan import step_limits
from helix_dbos.runtime.loop.shared_values import shared


def test_equal_limits_of_two_runs_are_one_object() -> None:
    agent = Agent("shared_a", system_prompt="hi", max_steps=7)
    mode = shared(agent.completion_for(None))
    first = shared(step_limits(agent, None, mode))
    second = shared(step_limits(agent, None, shared(agent.completion_for(None))))
    assert first is second
    assert first.max_steps == 7
    other = shared(step_limits(Agent("shared_b", system_prompt="hi", max_steps=8), None, mode))
    assert other is not first and other.max_steps == 8


@dataclass(frozen=True)
class _A:
    x: int


@dataclass(frozen=True)
class _B:
    x: int

    def __eq__(self, other: object) -> bool:  # equal to an _A of the same x
        return getattr(other, "x", None) == self.x

    def __hash__(self) -> int:
        return hash(self.x)


def test_an_equal_value_of_another_class_is_not_substituted() -> None:
    a = shared(_A(41))
    b = shared(_B(41))
    assert type(b) is _B and a is not b


def test_past_the_cap_each_value_is_its_own(monkeypatch) -> None:
    monkeypatch.setattr(shared_values, "_KEPT", {})
    monkeypatch.setattr(shared_values, "_KEPT_MAX", 1)
    kept = shared(_A(1))
    assert shared(_A(1)) is kept
    fresh = _A(2)
    assert shared(fresh) is fresh and shared(_A(2)) is not fresh
