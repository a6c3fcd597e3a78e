"""A schedule's firing becomes an ordinary run: `helix.scheduled_firing`, the DBOS
workflow every helix schedule fires (`definitions/schedule.py`).

Exactly once per firing:
- DBOS enqueues a firing under the workflow id `sched-<schedule>-<time>` on the
  schedule's agent's queue; every process's scheduler may try, one row wins, and one
  worker that serves the agent executes it (recovered, like any workflow, if it dies).
- The firing's ids are derived from that workflow id (`firing_ids`): its run, and for a
  schedule of its own sessions the session. The run is opened by the run-opening path's
  exactly-once transaction and started as a child workflow under `workflow_id(run_id)`,
  so a replayed firing finds what it did, and a second execution could only open the
  same run, which the database refuses.
- Appended to one session, the firing is a stored message (double texting, under a
  message id derived the same way) and the session queue starts its run: now if the
  session is idle, when its live run ends otherwise (`enqueue`, the default); `reject`
  skips a firing while a run is live; `steer` hands the input to the live run.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from dbos import DBOS

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.schedule import FIRING_WORKFLOW, FiringInfo, ScheduleSpec
from helix_dbos.errors import SessionAgentMismatchError
from helix_dbos.orchestration.double_texting import QueuedStrategy, queued_run_id
from helix_dbos.orchestration.types import Message
from helix_dbos.runtime.process.patches import SCHEDULED_FIRING
from helix_dbos.runtime.process.process_runtime import Runtime, logger
from helix_dbos.runtime.sessions.session_queue import SessionQueue
from helix_dbos.runtime.starts.run_starts import RunStarts
from helix_dbos.schedules.book import record_firing
from helix_dbos.store import repository as repo
from helix_dbos.store.features import queued_messages as queue_sql

_FIRING_NAMESPACE = uuid.UUID("6a0f3c2e-9b1d-4f7a-8e25-3c4d5b6a7f81")


def firing_ids(firing_id: str) -> tuple[str, str, str]:
    """A firing's (session id of its own session, message id, run id), from its DBOS
    workflow id: a replay, a second worker or a backfill derives the same ones."""
    key = uuid.uuid5(_FIRING_NAMESPACE, firing_id).hex
    message_id = f"msg_{key}"
    return f"ses_{key}", message_id, queued_run_id(message_id)


class ScheduleFirer:
    """Turns firings into runs, for the one `HelixDBOS` of this process."""

    def __init__(self, runtime: Runtime, starts: RunStarts, queue: SessionQueue) -> None:
        self.rt = runtime
        self.starts = starts
        self.queue = queue

    async def fire(self, firing_id: str, spec: ScheduleSpec, scheduled_at: datetime) -> FiringInfo:
        agent = self.starts.agent(spec.agent)
        own_session, message_id, run_id = firing_ids(firing_id)
        state = agent.initial_state(spec.state) if spec.state is not None else None
        firing = FiringInfo(
            firing_id=firing_id,
            schedule_name=spec.name,
            scheduled_at=scheduled_at,
            agent_name=agent.name,
            session_id=spec.session_id or own_session,
            run_id=run_id,
            outcome="started",
        )
        if spec.session_id is None:
            messages = [Message(role="user", content=spec.input)] if spec.input else []
            await self.starts.open_and_start(
                "new_session", agent, own_session, messages, state, run_id=run_id
            )
        else:
            firing = await self._append(agent, spec, state, firing, message_id)
        await self.rt.transaction("helix.schedule_firing", record_firing, firing)
        return firing

    async def _append(
        self,
        agent: Agent,
        spec: ScheduleSpec,
        state: dict[str, Any] | None,
        firing: FiringInfo,
        message_id: str,
    ) -> FiringInfo:
        """Store the firing's input as the session's next message (or skip it: `reject`
        on a busy session), then start the session's next run if it is idle."""
        stored = await self.rt.transaction(
            "helix.schedule_arrival", _arrive, spec, agent, state, message_id
        )
        if not stored:
            return firing.model_copy(update={"run_id": None, "outcome": "rejected"})
        handle = await self.queue.start_next(firing.session_id)
        started = handle is not None and handle.run_id == firing.run_id
        outcome = "started" if started else "queued"
        return firing.model_copy(update={"message_id": message_id, "outcome": outcome})


async def _arrive(
    conn: repo.SQLConnection,
    spec: ScheduleSpec,
    agent: Agent,
    state: dict[str, Any] | None,
    message_id: str,
) -> bool:
    """In one exactly-once transaction: create the session if it is new, then store the
    firing's message under the session's lock (so the live run's end sees it), unless
    the strategy is `reject` and a run is live. Returns whether it was stored."""
    assert spec.session_id is not None
    sid = spec.session_id
    await repo.insert_session(conn, sid, agent.name, state or agent.initial_state(None))
    found = await queue_sql.arrival(conn, sid)
    if found.agent_name != agent.name:
        raise SessionAgentMismatchError(sid, found.agent_name or "", agent.name)
    live = found.live_run_id is not None
    if spec.multitask_strategy == "reject" and live:
        return False
    strategy: QueuedStrategy = "steer" if spec.multitask_strategy == "steer" else "enqueue"
    await queue_sql.insert_message(
        conn,
        message_id=message_id,
        session_id=sid,
        agent_name=agent.name,
        strategy=strategy,
        content=spec.input,
        state=state,
        target_run_id=found.live_run_id,
        options={},
    )
    payload = {"message_id": message_id, "strategy": strategy, "content": spec.input}
    key = f"{message_id}:queued"
    await queue_sql.insert_event(
        conn, sid, found.live_run_id, agent.name, key, "message_queued", payload
    )
    return True


async def ensure_session(
    rt: Runtime, session_id: str, agent: Agent, state: dict[str, Any] | None
) -> None:
    """The session a schedule appends to, created now if new (idle, no run yet); another
    agent's session is refused before the schedule exists."""
    async with rt.engine.begin() as conn:
        await repo.insert_session(conn, session_id, agent.name, state or agent.initial_state(None))
        row = await repo.get_session(conn, session_id)
        if row is not None and row.agent_name != agent.name:
            raise SessionAgentMismatchError(session_id, row.agent_name, agent.name)


_firer: ScheduleFirer | None = None


def install_firer(runtime: Runtime, starts: RunStarts, queue: SessionQueue) -> ScheduleFirer:
    """The firer this process's firings use (set by `HelixDBOS`, like the runtime)."""
    global _firer
    _firer = ScheduleFirer(runtime, starts, queue)
    return _firer


@DBOS.workflow(name=FIRING_WORKFLOW)
async def scheduled_firing(scheduled_at: datetime, context: Any) -> dict[str, Any]:
    """One firing of a helix schedule (DBOS passes the firing time and the schedule's
    context, a `ScheduleSpec`); returns the firing's row."""
    await SCHEDULED_FIRING.applied()  # no patch yet: branch on it once there is one
    if _firer is None:
        raise RuntimeError("No HelixDBOS in this process to run a scheduled firing")
    spec = ScheduleSpec.model_validate(context)
    firing_id = DBOS.workflow_id
    assert firing_id is not None
    firing = await _firer.fire(firing_id, spec, scheduled_at)
    logger.info(
        "Schedule %s fired at %s: %s run %s of session %s",
        spec.name,
        scheduled_at.isoformat(),
        firing.outcome,
        firing.run_id,
        firing.session_id,
    )
    return firing.model_dump(mode="json")
