"""Double texting: what happens to a message sent while its session has a live run.

The five strategies (LangGraph's `multitask_strategy`, plus Restate's steering):

- `reject` (the default): refused, nothing stored (`AgentAlreadyRunningError`, 409).
- `enqueue`: stored as queued; it starts the session's next run when the live one ends.
- `interrupt`: stored as queued, the live run is interrupted (it ends `interrupted` at
  its next step boundary, its messages kept), then the message starts the next run.
- `rollback`: stored as queued, the live run is aborted, and the run that the message
  opens first removes the aborted run's messages, usage and state changes from the
  session's visible history (kept in audit tables), as if it had never started.
- `steer`: stored as queued; the live run takes it into its transcript at its next step
  boundary, before its next model call. A steer message the run did not take (it ended
  first) runs like an enqueued one.

A message is stored only when the session has a live run or other messages waiting:
otherwise it starts a run at once, as `reject` does. Stored messages are rows of
`helix.queued_messages`; which one starts next is decided here, without I/O:
interrupting and rolling-back messages first (they were sent to replace the live run),
then the others in storage order.

Durability (see `runtime/sessions/session_queue.py`): the run a message starts has an id derived
from the message's, so opening it twice is impossible and starting its workflow twice
is a no-op; the workflow whose run ends starts the next message's run, and a sweep
starts the run of any message left waiting on an idle session (its starter killed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

MultitaskStrategy = Literal["reject", "enqueue", "interrupt", "rollback", "steer"]
QueuedStrategy = Literal["enqueue", "interrupt", "rollback", "steer"]
QueuedStatus = Literal["queued", "started", "steered", "cancelled"]

STRATEGIES: tuple[str, ...] = get_args(MultitaskStrategy)
DEFAULT_STRATEGY: MultitaskStrategy = "reject"
_REPLACING = ("interrupt", "rollback")  # sent to replace the live run: they go first


def check_strategy(value: str) -> MultitaskStrategy:
    """The strategy named `value`, or a ValueError naming the valid ones."""
    if value not in STRATEGIES:
        raise ValueError(
            f"Unknown multitask_strategy {value!r}; use one of: {', '.join(STRATEGIES)}"
        )
    return value  # type: ignore[return-value]


@dataclass(frozen=True)
class Waiting:
    """A stored message still waiting (`status = 'queued'`), as the decisions see it."""

    message_id: str
    seq: int
    strategy: QueuedStrategy


def start_order(waiting: Sequence[Waiting]) -> list[Waiting]:
    """The order in which waiting messages start runs: interrupting and rolling-back
    messages first, then the rest, each group in storage order."""
    return sorted(waiting, key=lambda w: (w.strategy not in _REPLACING, w.seq))


def next_to_start(waiting: Sequence[Waiting]) -> Waiting | None:
    """The message whose run starts when the session has no live run, if any."""
    ordered = start_order(waiting)
    return ordered[0] if ordered else None


def positions(waiting: Sequence[Waiting]) -> dict[str, int]:
    """Each waiting message's place in line, 1 = the next run."""
    return {w.message_id: i for i, w in enumerate(start_order(waiting), start=1)}


Arrival = Literal["start", "reject", "store"]


def on_arrival(strategy: MultitaskStrategy, *, live: bool, others_waiting: bool) -> Arrival:
    """What a new message does: start a run now, be refused, or be stored.

    With messages already waiting, a new one waits behind them even on an idle session
    (they are about to start), so runs follow storage order."""
    if not live and not others_waiting:
        return "start"
    if strategy == "reject":
        return "reject" if live else "start"
    return "store"


Action = Literal["none", "interrupt", "abort"]


def action_on_live_run(strategy: QueuedStrategy) -> Action:
    """What a stored message does to the run that was live when it arrived."""
    if strategy == "interrupt":
        return "interrupt"
    if strategy == "rollback":
        return "abort"
    return "none"


def queued_run_id(message_id: str) -> str:
    """The id of the run a stored message starts: derived, so it is opened once."""
    return "run_" + message_id.removeprefix("msg_")


__all__ = [
    "DEFAULT_STRATEGY",
    "STRATEGIES",
    "MultitaskStrategy",
    "QueuedStatus",
    "QueuedStrategy",
    "Waiting",
    "action_on_live_run",
    "check_strategy",
    "next_to_start",
    "on_arrival",
    "positions",
    "queued_run_id",
    "start_order",
]
