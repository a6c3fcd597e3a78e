"""Step outputs pickle without their fields at defaults, and load back equal (issue 48).

DBOS checkpoints each step's output as a pickle: helix's model reply (a dataclass holding
pydantic models) and a tool's `ToolOutcome`. Their fields at plain defaults are left out
of the pickle and given back when it is loaded, so a checkpoint is a third smaller. What
a load gives must be the very value pickled (same fields, same types, same order), and a
pickle written the old way, every field in it (an older build's checkpoint, a run in
flight across the upgrade), must load as before.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helix_dbos.orchestration import types as types_module
from helix_dbos.orchestration.types import (
    LLMUsage,
    Message,
    StructuredOutputStepResult,
    TextStepResult,
    ThinkingBlock,
    ToolCall,
    ToolCallsStepResult,
    at_plain_default,
)
from helix_dbos.runtime.steps.step_types import ModelReply, ToolOutcome

TEXT = st.text(max_size=8)
# Values of an `Any` field that sit near its default (None) and are not it.
NEAR_DEFAULTS = st.sampled_from([None, 0, False, "", 0.0, -0.0, [], {}, (), "None"])
USAGE = st.none() | st.builds(
    LLMUsage,
    model=st.none() | TEXT,
    input_tokens=st.integers(0, 3),
    output_tokens=st.integers(0, 3),
    cache_read_tokens=st.integers(0, 1),
    reasoning_tokens=st.integers(0, 1),
)
CALLS = st.lists(
    st.builds(ToolCall, id=TEXT, name=TEXT, arguments=st.dictionaries(TEXT, NEAR_DEFAULTS)),
    max_size=2,
)
THINKING = st.lists(st.builds(ThinkingBlock, text=TEXT, redacted=st.booleans()), max_size=1)
RESULTS = st.one_of(
    st.builds(
        ToolCallsStepResult,
        content=st.none() | TEXT,
        tool_calls=CALLS,
        thinking=THINKING,
        stop_reason=st.sampled_from([None, "tool_use"]),
        usage=USAGE,
    ),
    st.builds(TextStepResult, content=TEXT, should_stop=st.booleans(), usage=USAGE),
    st.builds(StructuredOutputStepResult, output=NEAR_DEFAULTS, usage=USAGE),
)
REPLIES = st.builds(
    ModelReply,
    result=RESULTS,
    state=st.dictionaries(TEXT, NEAR_DEFAULTS, max_size=2),
    state_changed=st.booleans(),
)
OUTCOMES = st.builds(
    ToolOutcome,
    success=st.booleans(),
    content=st.none() | TEXT,
    result=NEAR_DEFAULTS,
    error=st.none() | TEXT,
    state=st.none() | st.dictionaries(TEXT, NEAR_DEFAULTS, max_size=1),
    events=st.sampled_from([(), ({"k": 1},)]),
    duration_ms=st.none() | st.floats(-1, 1),
    usage_kind=st.sampled_from(["tool", "subagent"]),
    finish_output=NEAR_DEFAULTS,
    invalid_output=st.booleans(),
    tokens=USAGE,
)


def same(a: Any, b: Any) -> None:
    """Equal, and equal in every field's type and order (what `==` does not check)."""
    assert a == b
    assert repr(a) == repr(b)


def pickled_the_old_way(value: Any, monkeypatch: pytest.MonkeyPatch) -> bytes:
    """The pickle an older build wrote: every field in it."""
    with monkeypatch.context() as patch:
        patch.delattr(types_module._Model, "__getstate__")
        patch.delattr(ModelReply, "__getstate__")
        patch.delattr(ToolOutcome, "__getstate__")
        return pickle.dumps(value)


@settings(max_examples=150, deadline=None)
@given(value=REPLIES | OUTCOMES)
def test_a_step_output_loads_back_as_pickled(value: Any) -> None:
    same(pickle.loads(pickle.dumps(value)), value)


@settings(max_examples=50, deadline=None)
@given(value=REPLIES | OUTCOMES)
def test_an_older_builds_pickle_loads_as_before(value: Any) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        old = pickled_the_old_way(value, monkeypatch)
    same(pickle.loads(old), value)
    assert len(pickle.dumps(value)) <= len(old)


def test_a_typical_checkpoint_is_a_third_smaller(monkeypatch: pytest.MonkeyPatch) -> None:
    call = ToolCall(id="t0", name="ping", arguments={})
    usage = LLMUsage(model="m", input_tokens=10, output_tokens=3)
    reply = ModelReply(
        ToolCallsStepResult(tool_calls=[call], stop_reason="tool_use", usage=usage), {}
    )
    outcome = ToolOutcome.executed(
        result="pong", error=None, state=None, events=[], duration_ms=0.1
    )
    for value in (reply, outcome):
        new, old = pickle.dumps(value), pickled_the_old_way(value, monkeypatch)
        assert len(new) < 0.8 * len(old), (type(value).__name__, len(new), len(old))
        same(pickle.loads(new), value)
        same(pickle.loads(old), value)


def test_a_message_keeps_its_set_fields_and_its_field_order() -> None:
    message = Message(role="assistant", content=None, tool_calls=[], is_error=False)
    loaded = pickle.loads(pickle.dumps(message))
    same(loaded, message)
    assert loaded.model_fields_set == message.model_fields_set
    assert list(loaded.__dict__) == list(Message.model_fields)
    assert loaded.model_dump(exclude_unset=True) == message.model_dump(exclude_unset=True)


def test_only_values_that_load_back_identical_are_left_out() -> None:
    assert at_plain_default(None, None) and at_plain_default(False, False)
    assert at_plain_default("tool", "tool") and at_plain_default(0, 0)
    assert at_plain_default((), ())
    assert not at_plain_default(0, False)  # an int where the default is a bool
    assert not at_plain_default(False, 0)
    assert not at_plain_default(float("0"), 0.0)  # a float is kept unless the very object
    assert not at_plain_default(-0.0, 0.0)
    assert not at_plain_default([], ())
    assert not at_plain_default("", None)
