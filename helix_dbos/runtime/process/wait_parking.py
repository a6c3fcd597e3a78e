"""Runs that wait long for a human let go of their coroutine; their answer brings them back.

A run parked in DBOS's `recv` keeps its whole coroutine stack, its step's reply and
rows, and DBOS's context: about 35 kB a run, for hours or days. The recent waits stay
in memory (an answer to them reaches its tool at once); a wait that outlasts
`park_after_seconds`, or the oldest once more than `max_in_memory` wait, is parked:
its workflow's task is cancelled, which to DBOS is a crash at the `recv` (nothing is
recorded, the workflow stays PENDING and owned by this executor), and a small watch
stays behind: a signal in DBOS's notification map under the wait's topic (woken by
LISTEN/NOTIFY, and by helix's shared re-check should a notification be lost) and a
timer at the wait's deadline. Either brings the workflow back here
(`dbos_internals.execute_again`: a new ownership token, then DBOS's own dispatch path), and it replays its recorded
steps up to the `recv`, which then returns the answer. Temporal's workers keep a
bounded cache of workflow executions and replay the evicted ones the same way.

Should this process die, a parked run is recovered like any other PENDING workflow.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from helix_dbos.log_events import RUN_PARKED, RUN_UNPARKED, log_event
from helix_dbos.runtime.dbos import dbos_internals
from helix_dbos.runtime.process.parked_span import PARKED_MESSAGE, mark_parked

logger = logging.getLogger(__name__)

# Waits kept in memory before the oldest park. A wait in memory holds about 35 kB; once
# parked, that memory goes back to Python's allocator but mostly not to the system (its
# arenas also hold longer-lived objects), so the process keeps the high-water mark of
# its waits in memory (figures: benchmarks/README.md, "At 1,000 waits"). An answer to a
# parked wait pays a claim and a replay, a few milliseconds.
DEFAULT_WAITS_IN_MEMORY = 100
# How often waits are checked for parking: a wait is parked within this of its due time.
SWEEP_SECONDS = 5.0
# A wait whose deadline is this close stays in memory: its timeout path runs in place.
NEAR_DEADLINE_SECONDS = 10.0
# A wait this young is never parked: a run resumed for its message must have had the
# time to take it (else it would be parked again before it could, and again).
MIN_AGE_SECONDS = 1.0


@dataclass(slots=True, eq=False)
class _InMemoryWait:
    """A run waiting in `recv` with its coroutine: what parking it needs."""

    workflow_id: str
    topic: str
    owner_xid: str
    deadline: float  # epoch seconds
    since: float  # monotonic
    task: asyncio.Task[object]
    parked: bool = False  # its task was cancelled to park it


@dataclass(slots=True, eq=False)
class _ParkedWait:
    """A parked run: its watch, until its message or deadline resumes it."""

    workflow_id: str
    topic: str
    owner_xid: str
    signal: _Wake
    timer: asyncio.TimerHandle | None = None
    settled: bool = False  # its cancelled task has ended
    wanted: bool = False  # woken before its task ended: resume once it has


class _Wake:
    """What DBOS's listener (and helix's re-check) calls `set()` on for a parked run."""

    __slots__ = ("_parking", "_workflow_id")

    def __init__(self, parking: WaitParking, workflow_id: str) -> None:
        self._parking = parking
        self._workflow_id = workflow_id

    def set(self) -> None:  # any thread
        self._parking.wake_threadsafe(self._workflow_id)

    def is_set(self) -> bool:
        return False


class WaitParking:
    """This process's waits for a human: the recent ones in memory, the rest parked."""

    def __init__(
        self, max_in_memory: int = DEFAULT_WAITS_IN_MEMORY, park_after_seconds: float = 60.0
    ) -> None:
        if max_in_memory < 0:
            raise ValueError("max_in_memory must be 0 or more")
        if park_after_seconds < 0:
            raise ValueError("park_after_seconds must be 0 or more")
        self.max_in_memory = max_in_memory
        self.park_after_seconds = park_after_seconds
        self._waits: OrderedDict[str, _InMemoryWait] = OrderedDict()  # oldest first
        self._parked: dict[str, _ParkedWait] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._cancelling = 0  # parked runs whose task has not ended yet
        self._to_check: list[_ParkedWait] = []  # parked runs to look for a message once
        self._checking = False
        self.parked_total = 0  # parked so far (for tests and benchmarks)
        self.resumed_total = 0  # brought back so far
        _quiet_dbos_about_parking(self)

    # --- what the waiting run calls --------------------------------------------------------

    @contextlib.contextmanager
    def waiting(
        self, topic: str, timeout_seconds: float, on_park: Callable[[], None] | None = None
    ) -> Iterator[None]:
        """Around a workflow's `recv` on `topic`: while it waits, the run may be parked.
        `on_park` lets go of what else the run kept in this process once it is parked."""
        wait = self._in_memory_wait(topic, timeout_seconds)
        if wait is None:
            yield
            return
        self._waits[wait.workflow_id] = wait
        try:
            self._make_room()
            self._arm_sweep()
            yield
        except asyncio.CancelledError:
            if wait.parked:  # DBOS ends the workflow's span next: parked, not failed
                mark_parked(wait.workflow_id)
                if on_park is not None:
                    on_park()
            raise
        finally:
            if self._waits.get(wait.workflow_id) is wait:
                del self._waits[wait.workflow_id]

    def _in_memory_wait(self, topic: str, timeout_seconds: float) -> _InMemoryWait | None:
        owner = dbos_internals.execution_owner()
        task = asyncio.current_task()
        if owner is None or task is None or not dbos_internals.is_workflow_task(task):
            return None  # not the workflow's own task: cancelling it would cancel more
        if timeout_seconds <= NEAR_DEADLINE_SECONDS:
            return None
        self._loop = asyncio.get_running_loop()
        workflow_id, owner_xid = owner
        return _InMemoryWait(
            workflow_id, topic, owner_xid, time.time() + timeout_seconds, time.monotonic(), task
        )

    # --- parking ----------------------------------------------------------------------

    @property
    def in_memory(self) -> int:
        return len(self._waits)

    @property
    def parked(self) -> int:
        return len(self._parked)

    def _make_room(self) -> None:
        """Park the oldest waits beyond `max_in_memory` (the young ones at a later sweep)."""
        young = time.monotonic() - MIN_AGE_SECONDS
        while len(self._waits) > self.max_in_memory:
            oldest = next(iter(self._waits.values()))
            if oldest.since > young:
                return
            self._park(oldest)

    def _arm_sweep(self) -> None:
        if self._sweeper is None and self._loop is not None:
            self._sweeper = self._loop.call_later(SWEEP_SECONDS, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        due = time.monotonic() - max(self.park_after_seconds, MIN_AGE_SECONDS)
        for wait in [w for w in self._waits.values() if w.since <= due]:
            self._park(wait)
        self._make_room()
        if self._waits:
            self._arm_sweep()

    def park_all(self) -> int:
        """Park every wait in memory now (tests, benchmarks, an operator's nudge)."""
        waits = list(self._waits.values())
        for wait in waits:
            self._park(wait)
        return len(waits)

    def _park(self, wait: _InMemoryWait) -> None:
        del self._waits[wait.workflow_id]
        try:
            self._park_now(wait)
        except Exception:  # DBOS shut down under it, say: the run stays in memory
            logger.warning("helix could not park run %s", wait.workflow_id, exc_info=True)

    def _park_now(self, wait: _InMemoryWait) -> None:
        if wait.task.done() or wait.deadline - time.time() <= NEAR_DEADLINE_SECONDS:
            return
        signal = _Wake(self, wait.workflow_id)
        # Watch first: a message from now on wakes the watch, one before it set the
        # recv's own event, which is checked next (that run is about to go on: leave it).
        if not dbos_internals.watch_messages(wait.workflow_id, wait.topic, signal):
            dbos_internals.unwatch_messages(wait.workflow_id, wait.topic, signal)
            return
        parked = _ParkedWait(wait.workflow_id, wait.topic, wait.owner_xid, signal)
        self._parked[wait.workflow_id] = parked
        assert self._loop is not None
        delay = max(0.0, wait.deadline - time.time())
        parked.timer = self._loop.call_later(delay, self._wake, wait.workflow_id)
        wait.task.add_done_callback(lambda _task: self._settled(parked))
        self._cancelling += 1
        wait.parked = True
        wait.task.cancel(PARKED_MESSAGE)  # DBOS's span of the `recv` ends with it
        self.parked_total += 1
        log_event(RUN_PARKED, workflow_id=wait.workflow_id)

    def _settled(self, parked: _ParkedWait) -> None:
        """The parked run's task has ended; a message that came meanwhile resumes it."""
        parked.settled = True
        self._cancelling -= 1
        if parked.wanted:
            self._resume(parked)
        else:
            # A message whose notification came before the watch, or that the recv's
            # own check saw but did not consume: looked for once, with the others
            # parked meanwhile (one query, not a thread each).
            self._to_check.append(parked)
            if not self._checking:
                self._checking = True
                assert self._loop is not None
                self._loop.create_task(self._check_parked())

    async def _check_parked(self) -> None:
        try:
            while self._to_check:
                batch, self._to_check = self._to_check, []
                keys = [(p.workflow_id, p.topic) for p in batch]
                try:
                    found = await asyncio.to_thread(dbos_internals.messages_waiting, keys)
                except Exception:  # the minute's re-check and the deadline timers remain
                    logger.warning(
                        "helix could not check %d parked runs", len(batch), exc_info=True
                    )
                    continue
                for p in batch:
                    if (p.workflow_id, p.topic) in found:
                        self._wake(p.workflow_id)
        finally:
            self._checking = False

    # --- waking -----------------------------------------------------------------------

    def wake_threadsafe(self, workflow_id: str) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to wake
                loop.call_soon_threadsafe(self._wake, workflow_id)

    def _wake(self, workflow_id: str) -> None:
        parked = self._parked.get(workflow_id)
        if parked is None or parked.wanted:
            return
        parked.wanted = True
        if parked.settled:
            self._resume(parked)

    def _resume(self, parked: _ParkedWait) -> None:
        """Once both woken and settled (whichever came last calls this, once)."""
        del self._parked[parked.workflow_id]
        if parked.timer is not None:
            parked.timer.cancel()
        dbos_internals.unwatch_messages(parked.workflow_id, parked.topic, parked.signal)
        assert self._loop is not None
        self._loop.create_task(self._execute_again(parked))

    async def _execute_again(self, parked: _ParkedWait) -> None:
        """Claim the parked workflow back and run it; while the database is away, try
        again (a restart, or another worker once this one's lease lapses, would recover
        it too: it stays PENDING and this executor's)."""
        pause, new_owner = 0.5, dbos_internals.new_owner_token()
        while True:
            try:
                resumed = await asyncio.to_thread(
                    dbos_internals.execute_again,
                    parked.workflow_id,
                    parked.owner_xid,
                    new_owner,
                )
                break
            except Exception:
                logger.warning(
                    "helix could not resume parked run %s yet", parked.workflow_id, exc_info=True
                )
                await asyncio.sleep(pause)
                pause = min(pause * 2, 30.0)
        if resumed:
            self.resumed_total += 1
            log_event(RUN_UNPARKED, workflow_id=parked.workflow_id)


class _ParkingCancels(logging.Filter):
    """DBOS warns of every cancelled workflow task ("Asyncio task cancelled for workflow
    or step"); a parked run's is no news. Dropped only while a park is under way."""

    def __init__(self, parking: WaitParking) -> None:
        super().__init__()
        self.parking = parking

    def filter(self, record: logging.LogRecord) -> bool:
        if self.parking._cancelling <= 0:
            return True
        return not str(record.msg).startswith("Asyncio task cancelled for workflow or step")


def _quiet_dbos_about_parking(parking: WaitParking) -> None:
    dbos_logger = logging.getLogger("dbos")
    for f in list(dbos_logger.filters):
        if isinstance(f, _ParkingCancels):
            dbos_logger.removeFilter(f)
    dbos_logger.addFilter(_ParkingCancels(parking))
