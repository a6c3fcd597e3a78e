"""The pure decisions of double texting (`orchestration/double_texting.py`): no database."""

from __future__ import annotations

import pytest

from helix_dbos.orchestration.double_texting import (
    STRATEGIES,
    Waiting,
    action_on_live_run,
    check_strategy,
    next_to_start,
    on_arrival,
    positions,
    queued_run_id,
    start_order,
)


def test_the_strategies_are_langgraphs_four_and_steer():
    assert STRATEGIES == ("reject", "enqueue", "interrupt", "rollback", "steer")
    for name in STRATEGIES:
        assert check_strategy(name) == name
    with pytest.raises(ValueError, match="reject, enqueue, interrupt, rollback, steer"):
        check_strategy("Enqueue")


@pytest.mark.parametrize(
    ("strategy", "live", "others", "expected"),
    [
        ("reject", False, False, "start"),
        ("reject", True, False, "reject"),
        ("reject", True, True, "reject"),
        ("reject", False, True, "start"),  # reject never waits in line
        ("enqueue", False, False, "start"),
        ("enqueue", True, False, "store"),
        ("enqueue", False, True, "store"),  # behind the messages about to start
        ("interrupt", True, False, "store"),
        ("rollback", True, False, "store"),
        ("steer", True, False, "store"),
        ("steer", False, False, "start"),
    ],
)
def test_what_an_arriving_message_does(strategy, live, others, expected):
    assert on_arrival(strategy, live=live, others_waiting=others) == expected


def test_interrupting_and_rolling_back_messages_start_first_then_storage_order():
    waiting = [
        Waiting("a", 1, "enqueue"),
        Waiting("b", 2, "steer"),
        Waiting("c", 3, "interrupt"),
        Waiting("d", 4, "enqueue"),
        Waiting("e", 5, "rollback"),
    ]
    assert [w.message_id for w in start_order(waiting)] == ["c", "e", "a", "b", "d"]
    assert next_to_start(waiting) == Waiting("c", 3, "interrupt")
    assert positions(waiting) == {"c": 1, "e": 2, "a": 3, "b": 4, "d": 5}
    assert next_to_start([]) is None
    # storage order, not arrival in the list
    shuffled = [Waiting("y", 9, "enqueue"), Waiting("x", 7, "enqueue")]
    assert next_to_start(shuffled) == Waiting("x", 7, "enqueue")


def test_what_a_stored_message_does_to_the_live_run():
    assert [action_on_live_run(s) for s in ("enqueue", "interrupt", "rollback", "steer")] == [
        "none",
        "interrupt",
        "abort",
        "none",
    ]


def test_a_messages_run_id_is_derived_from_it():
    assert queued_run_id("msg_abc") == "run_abc"
    assert queued_run_id("msg_abc") == queued_run_id("msg_abc")
    assert queued_run_id("msg_abc") != queued_run_id("msg_abd")
