"""Double texting at run time: store a message sent to a busy session, act on the live
run, and start the next stored message's run (`orchestration/double_texting.py` says
what, this module does it).

Exactly once, in order:
- A message is stored under the session's row lock, which the live run's final write
  also takes: a run that ends after the message was stored sees it, and a message
  stored after the run ended sees no live run.
- The run a message starts has an id derived from the message's (`queued_run_id`); the
  open marks the message `started` in the same transaction (`take_queued`), so two
  starters (the ending run's workflow and an API caller) open it once.
- The ending run's workflow starts the next message's run (`after_run`): inside the
  workflow, the pick is a step and the open and start are the run-opening path's own
  exactly-once transaction and child start, so a crash there is replayed, not redone.
- `sweep` (with `reconcile_runs`) sends the interrupt or abort a killed sender did not,
  and starts the next run of an idle session with messages waiting.
- A steer message is taken by the live run's LLM step before its model call
  (`runtime/sessions/steering.py`), in one statement that marks it and appends it: at the step boundary
  the step policy (`orchestration/next_step.py`) opens with `Continue`, where the same
  read also finds a pending interrupt.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from dbos import DBOS
from pydantic import BaseModel

from helix_dbos.errors import (
    AgentAlreadyRunningError,
    QueuedMessageNotFoundError,
    QueuedMessageTakenError,
    SessionAgentMismatchError,
    SessionNotFoundError,
)
from helix_dbos.orchestration.double_texting import (
    MultitaskStrategy,
    QueuedStrategy,
    action_on_live_run,
    next_to_start,
    on_arrival,
    positions,
    queued_run_id,
)
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.process.process_runtime import Runtime, logger
from helix_dbos.runtime.sessions.handle import RunHandle, RunReader
from helix_dbos.runtime.sessions.run_opening import workflow_id
from helix_dbos.runtime.steps.results import AgentResult
from helix_dbos.runtime.waits.run_versions import refuse_unserved
from helix_dbos.store import repository as repo
from helix_dbos.store.features import queued_messages as store
from helix_dbos.store.features.queued_messages import QueuedMessage

WAIT_FIRST_SECONDS = 0.02
WAIT_MAX_SECONDS = 0.5


class QueuedMessageInfo(BaseModel):
    """A stored message, as `helix-dbos queue`, the inbox and the API show it."""

    message_id: str
    session_id: str
    strategy: QueuedStrategy
    content: str | None
    status: str
    position: int | None = None  # 1 = the next run; None once taken or cancelled
    run_id: str | None = None  # the run it started, or was steered into
    step: int | None = None  # steered: the step whose model input took it
    target_run_id: str | None = None  # the run that was live when it arrived
    created_at: datetime | None = None
    taken_at: datetime | None = None


def describe(messages: list[QueuedMessage]) -> list[QueuedMessageInfo]:
    """Rows as `QueuedMessageInfo`, each waiting one with its place in line."""
    places = positions([m.waiting for m in messages if m.status == "queued"])
    return [
        QueuedMessageInfo(
            message_id=m.message_id,
            session_id=m.session_id,
            strategy=m.strategy,
            content=m.content,
            status=m.status,
            position=places.get(m.message_id),
            run_id=m.run_id,
            step=m.step,
            target_run_id=m.target_run_id,
            created_at=m.created_at,
            taken_at=m.taken_at,
        )
        for m in messages
    ]


# The one run-opening path, for a stored message's run (`RunStarts.start_queued`).
StartRun = Callable[[QueuedMessage], Awaitable[RunHandle]]
# Interrupt or abort a session's tree only while `run_id` is its live run (`RunControl`).
ActOnRun = Callable[[str, str, str | None], Awaitable[None]]


class QueuedRunHandle(RunHandle):
    """A handle on a stored message: `result()` waits for the run it starts (or the run
    it was steered into); a message cancelled before it started gives `aborted`."""

    def __init__(
        self, helix: RunReader, queue: SessionQueue, session_id: str, message_id: str
    ) -> None:
        run_id = queued_run_id(message_id)
        super().__init__(helix, session_id, run_id, workflow_id(run_id))
        self.message_id = message_id
        self._queue = queue

    def __repr__(self) -> str:
        return f"QueuedRunHandle(session_id={self.session_id!r}, message_id={self.message_id!r})"

    async def started(self) -> RunHandle | None:
        """Wait until the message is in a run: a plain handle on that run (its own, or
        the live run it was steered into); None if it was cancelled first."""
        message = await self._queue.wait_taken(self.message_id)
        if message.status == "cancelled" or message.run_id is None:
            return None
        self.run_id, self.workflow_id = message.run_id, workflow_id(message.run_id)
        return RunHandle(self._helix, self.session_id, self.run_id, self.workflow_id)

    async def result(self) -> AgentResult:
        handle = await self.started()
        if handle is None:
            return AgentResult(
                status="aborted",
                error="The message was cancelled before its run started",
                session_id=self.session_id,
                run_id=self.run_id,
            )
        return await handle.result()


class SessionQueue:
    """Stored messages of every session, for one `HelixDBOS`."""

    def __init__(
        self,
        runtime: Runtime,
        reader: RunReader,
        *,
        start_run: StartRun,
        interrupt_run: ActOnRun,
        abort_run: ActOnRun,
    ) -> None:
        self._rt = runtime
        self._reader = reader
        self._start_run = start_run
        self._interrupt_run = interrupt_run
        self._abort_run = abort_run

    async def submit(
        self,
        agent_name: str,
        session_id: str,
        content: str | None,
        state: dict[str, Any] | None,
        strategy: MultitaskStrategy,
        message_id: str,
        options: dict[str, Any],
    ) -> QueuedRunHandle | None:
        """Store the message if the session is busy (or has messages waiting) and act
        on its live run; None when it should start a run at once instead."""
        if strategy == "reject":
            return None

        async def tx() -> tuple[QueuedMessage, str | None] | None:
            async with self._rt.engine.begin() as conn:
                found = await store.arrival(conn, session_id)
                if not found.exists:
                    return None
                if found.agent_name != agent_name:
                    raise SessionAgentMismatchError(session_id, found.agent_name or "", agent_name)
                live = found.live_run_id is not None
                if on_arrival(strategy, live=live, others_waiting=found.others_waiting) != "store":
                    return None
                # Stored behind a run no worker will resume, it would wait forever (a
                # rollback aborts that run, which works whatever its version).
                target, workflow = found.live_run_id, found.live_workflow_id
                if target and workflow and action_on_live_run(strategy) != "abort":
                    await refuse_unserved(conn, target, workflow, self._rt.serves_version)
                stored = await store.insert_message(
                    conn,
                    message_id=message_id,
                    session_id=session_id,
                    agent_name=agent_name,
                    strategy=strategy,
                    content=content,
                    state=state,
                    target_run_id=found.live_run_id,
                    options=options,
                )
                payload = {"message_id": message_id, "strategy": strategy, "content": content}
                await store.insert_event(
                    conn,
                    session_id,
                    found.live_run_id,
                    agent_name,
                    f"{message_id}:queued",
                    "message_queued",
                    payload,
                )
                return stored, found.live_workflow_id

        outcome = await on_target_loop(tx)
        if outcome is None:
            return None
        stored, _ = outcome
        await self._act_on_target(stored)
        await self.start_next(session_id)  # the live run may have ended meanwhile
        return self.handle(session_id, message_id)

    def handle(self, session_id: str, message_id: str) -> QueuedRunHandle:
        """A handle on a stored message of the session."""
        return QueuedRunHandle(self._reader, self, session_id, message_id)

    async def _act_on_target(self, message: QueuedMessage) -> None:
        """Interrupt or abort the run that was live when the message arrived."""
        action = action_on_live_run(message.strategy)
        if action == "none" or message.target_run_id is None:
            return
        reason = f"a new message ({message.message_id}, {message.strategy})"
        if action == "interrupt":

            async def mark() -> None:
                async with self._rt.engine.begin() as conn:
                    await store.insert_event(
                        conn,
                        message.session_id,
                        message.target_run_id,
                        message.agent_name,
                        f"{message.target_run_id}:interrupted_by:{message.message_id}",
                        "run_interrupted_by_message",
                        {"message_id": message.message_id},
                    )

            await on_target_loop(mark)
        # Only the run that was live when the message arrived: one that has ended meanwhile
        # is left alone, and so is the run started after it (the message's own, even).
        target = message.target_run_id
        if action == "interrupt":
            await self._interrupt_run(message.session_id, target, reason)
        else:
            await self._abort_run(message.session_id, target, reason)

    async def start_next(self, session_id: str) -> RunHandle | None:
        """Start the run of the session's next waiting message, if the session is idle.

        In a workflow the pick is a step, so a replay opens the same message; the open
        itself refuses a message taken or cancelled meanwhile (then the next is picked)
        and a session with a live run (whose end starts the next one)."""
        for _ in range(64):  # each turn, one message was taken by someone else
            message = await self._pick(session_id)
            if message is None:
                return None
            try:
                return await self._start_run(message)
            except AgentAlreadyRunningError:
                return None
            except QueuedMessageTakenError:
                continue
        return None

    async def _pick(self, session_id: str) -> QueuedMessage | None:
        async def pick() -> QueuedMessage | None:
            waiting = await self._rt.read(store.session_messages, session_id, waiting_only=True)
            chosen = next_to_start([m.waiting for m in waiting])
            return next((m for m in waiting if chosen and m.message_id == chosen.message_id), None)

        if DBOS.workflow_id is not None:
            return await DBOS.run_step_async({"name": "helix.queued_next"}, pick)
        return await on_target_loop(pick)

    async def after_run(self, session_id: str) -> None:
        """At the end of a run's workflow: start the next stored message's run. Never
        fails the ended run: a missed start is the sweep's."""
        try:
            if await self._rt.read(store.has_waiting, session_id):
                await self.start_next(session_id)
        except Exception as exc:
            logger.warning("helix could not start the next message of %s: %s", session_id, exc)

    async def sweep(self) -> list[str]:
        """Finish what a killed sender or starter left: the interrupt or abort of a stored
        `interrupt`/`rollback` message, and the next run of an idle session with messages
        waiting. Returns the sessions whose next run it started."""
        targets = await on_target_loop(lambda: self._rt.read(store.live_targets))
        for target in targets:
            message = await on_target_loop(
                functools.partial(self._rt.read, store.get_message, target.message_id)
            )
            if message is not None:
                await self._act_on_target(message)
        started: list[str] = []
        for session_id in await on_target_loop(
            lambda: self._rt.read(store.idle_sessions_with_waiting)
        ):
            try:
                if await self.start_next(session_id) is not None:
                    started.append(session_id)
            except Exception as exc:
                logger.warning("helix could not start the next message of %s: %s", session_id, exc)
        return started

    async def wait_taken(self, message_id: str) -> QueuedMessage:
        """Wait until the message has started a run, been steered into one, or been
        cancelled."""
        pause = WAIT_FIRST_SECONDS
        while True:
            message = await on_target_loop(lambda: self._rt.read(store.get_message, message_id))
            if message is None:
                raise QueuedMessageNotFoundError(message_id)
            if message.status != "queued":
                return message
            await asyncio.sleep(pause)
            pause = min(pause * 2, WAIT_MAX_SECONDS)

    async def list(self, session_id: str) -> list[QueuedMessageInfo]:
        rows = await on_target_loop(lambda: self._rt.read(store.session_messages, session_id))
        return describe(rows)

    async def cancel(self, session_id: str, message_id: str) -> QueuedMessageInfo:
        """Cancel a waiting message; `QueuedMessageTakenError` if its run started (or it
        was steered) first."""

        async def tx() -> QueuedMessage | None:
            async with self._rt.engine.begin() as conn:
                status = await store.cancel_message(conn, session_id, message_id)
                if status is None:
                    if await repo.get_session(conn, session_id) is None:
                        raise SessionNotFoundError(session_id)
                    raise QueuedMessageNotFoundError(message_id)
                if status != "cancelled":
                    raise QueuedMessageTakenError(message_id, status)
                return await store.get_message(conn, message_id)

        row = await on_target_loop(tx)
        assert row is not None
        return describe([row])[0]


AfterRun = Callable[[str], Awaitable[None]]

__all__ = [
    "QueuedMessageInfo",
    "QueuedRunHandle",
    "SessionQueue",
]
