"""SQL of `helix.queued_messages`: messages sent while their session had a live run.

Every change of a message's status is guarded by its current status, so a replayed or
concurrent write (the ending run and an API caller both starting the next message, a
cancel racing a start) changes it once. See `orchestration/double_texting.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from helix_dbos.errors import QueuedMessageTakenError
from helix_dbos.orchestration.double_texting import (
    QueuedStatus,
    QueuedStrategy,
    Waiting,
)
from helix_dbos.store import rollback
from helix_dbos.store.repository import Executor, _json, _sql, insert_chunks
from helix_dbos.store.storable import storable_text

_LIVE = "('running', 'waiting', 'paused')"
_COLUMNS = (
    "message_id, seq, session_id, agent_name, strategy, content, state, target_run_id, "
    "status, run_id, step, created_at, taken_at, options"
)


@dataclass(frozen=True)
class QueuedMessage:
    """One row of `helix.queued_messages`."""

    message_id: str
    seq: int
    session_id: str
    agent_name: str
    strategy: QueuedStrategy
    content: str | None
    state: dict[str, Any] | None
    target_run_id: str | None
    status: QueuedStatus
    run_id: str | None
    step: int | None
    created_at: datetime
    taken_at: datetime | None
    options: dict[str, Any]  # its run's options (`RunOptions.to_json()`)

    @property
    def waiting(self) -> Waiting:
        return Waiting(self.message_id, self.seq, self.strategy)


def _row(row: Any) -> QueuedMessage:
    return QueuedMessage(*row)


@dataclass(frozen=True)
class Arrival:
    """What a message arriving on a session finds, under the session's row lock."""

    exists: bool
    agent_name: str | None
    live_run_id: str | None
    live_workflow_id: str | None
    others_waiting: bool


async def arrival(conn: Executor, session_id: str) -> Arrival:
    """Lock the session's row (until the caller's transaction ends) and read whether it
    has a live run and messages waiting. The lock orders this message against the live
    run's end, which updates the same row: a run that ends after it sees the message."""
    row = (
        await conn.execute(
            _sql(
                "SELECT s.agent_name, r.run_id, r.workflow_id, EXISTS (SELECT 1 FROM "
                "helix.queued_messages q WHERE q.session_id = s.session_id "
                "AND q.status = 'queued') FROM (SELECT session_id, agent_name FROM "
                "helix.sessions WHERE session_id = :sid FOR UPDATE) s "
                f"LEFT JOIN helix.runs r ON r.session_id = s.session_id AND r.status IN {_LIVE}"
            ),
            {"sid": session_id},
        )
    ).first()
    if row is None:
        return Arrival(False, None, None, None, False)
    return Arrival(True, row[0], row[1], row[2], bool(row[3]))


async def insert_message(
    conn: Executor,
    *,
    message_id: str,
    session_id: str,
    agent_name: str,
    strategy: QueuedStrategy,
    content: str | None,
    state: dict[str, Any] | None,
    target_run_id: str | None,
    options: dict[str, Any],
) -> QueuedMessage:
    """Store a message as waiting, with a `message_queued` chunk (on the live run's
    stream, if one is live); keyed by its id, so a replay stores it once."""
    row = (
        await conn.execute(
            _sql(
                "INSERT INTO helix.queued_messages (message_id, session_id, agent_name, "
                "strategy, content, state, target_run_id, options) VALUES (:mid, :sid, "
                ":agent, :strategy, :content, CAST(:state AS jsonb), :target, "
                "CAST(:options AS jsonb)) "
                f"ON CONFLICT (message_id) DO UPDATE SET message_id = EXCLUDED.message_id "
                f"RETURNING {_COLUMNS}"
            ),
            {
                "mid": message_id,
                "sid": session_id,
                "agent": agent_name,
                "strategy": strategy,
                "content": storable_text(content) if content is not None else None,
                "state": _json(state),
                "target": target_run_id,
                "options": _json(options),
            },
        )
    ).one()
    return _row(row)


async def get_message(conn: Executor, message_id: str) -> QueuedMessage | None:
    row = (
        await conn.execute(
            _sql(f"SELECT {_COLUMNS} FROM helix.queued_messages WHERE message_id = :mid"),
            {"mid": message_id},
        )
    ).first()
    return _row(row) if row else None


async def session_messages(
    conn: Executor, session_id: str, *, waiting_only: bool = False
) -> list[QueuedMessage]:
    """A session's stored messages in storage order (only the waiting ones, if asked)."""
    where = " AND status = 'queued'" if waiting_only else ""
    rows = await conn.execute(
        _sql(
            f"SELECT {_COLUMNS} FROM helix.queued_messages WHERE session_id = :sid{where} "
            "ORDER BY seq"
        ),
        {"sid": session_id},
    )
    return [_row(r) for r in rows]


async def has_waiting(conn: Executor, session_id: str) -> bool:
    row = await conn.execute(
        _sql(
            "SELECT EXISTS (SELECT 1 FROM helix.queued_messages WHERE session_id = :sid "
            "AND status = 'queued')"
        ),
        {"sid": session_id},
    )
    return bool(row.scalar())


async def take_for_run(conn: Executor, message_id: str, run_id: str) -> QueuedMessage | None:
    """Mark a waiting message as the start of `run_id`; None if it is not waiting
    (cancelled, or started by someone else first)."""
    row = (
        await conn.execute(
            _sql(
                "UPDATE helix.queued_messages SET status = 'started', run_id = :rid, "
                "taken_at = now() WHERE message_id = :mid AND status = 'queued' "
                f"RETURNING {_COLUMNS}"
            ),
            {"mid": message_id, "rid": run_id},
        )
    ).first()
    return _row(row) if row else None


async def cancel_message(conn: Executor, session_id: str, message_id: str) -> QueuedStatus | None:
    """Cancel a waiting message; returns its status after (`cancelled`, or what it was
    when it had been taken already), None if the session has no such message."""
    row = (
        await conn.execute(
            _sql(
                "WITH c AS (UPDATE helix.queued_messages SET status = 'cancelled', "
                "taken_at = now() WHERE message_id = :mid AND session_id = :sid "
                "AND status = 'queued' RETURNING status) "
                "SELECT COALESCE((SELECT status FROM c), (SELECT status FROM "
                "helix.queued_messages WHERE message_id = :mid AND session_id = :sid)), "
                "pg_notify('helix_chunks', :sid)"
            ),
            {"mid": message_id, "sid": session_id},
        )
    ).one()
    return cast("QueuedStatus | None", row[0])


# Steering: the waiting steer messages become user messages of the live run, in storage
# order, at the end of the transcript, with a `message_steered` chunk each; one
# statement, so a message is taken once or not at all.
_TAKE_STEERED = _sql(
    "WITH q AS (SELECT message_id FROM helix.queued_messages WHERE session_id = :sid "
    "AND status = 'queued' AND strategy = 'steer' ORDER BY seq FOR UPDATE), "
    "t AS (UPDATE helix.queued_messages x SET status = 'steered', run_id = :rid, "
    "step = :step, taken_at = now() FROM q WHERE x.message_id = q.message_id "
    "AND x.status = 'queued' RETURNING x.message_id, x.seq, x.content), "
    "o AS (SELECT t.*, row_number() OVER (ORDER BY t.seq) AS ord, count(*) OVER () AS n "
    "FROM t), "
    "s AS (UPDATE helix.sessions SET message_seq = GREATEST(message_seq, "
    "(SELECT COALESCE(max(seq), 0) FROM helix.messages WHERE session_id = :sid)) "
    "+ (SELECT count(*) FROM t), chunk_seq = chunk_seq + (SELECT count(*) FROM t) "
    "WHERE session_id = :sid AND EXISTS (SELECT 1 FROM t) "
    "RETURNING message_seq - (SELECT count(*) FROM t) AS msg_base, "
    "chunk_seq - (SELECT count(*) FROM t) AS chunk_base), "
    "m AS (INSERT INTO helix.messages (session_id, seq, run_id, role, content) "
    "SELECT :sid, s.msg_base + o.ord, :rid, 'user', o.content FROM s, o RETURNING 1), "
    "c AS (INSERT INTO helix.stream_chunks (session_id, seq, chunk_key, run_id, agent_name, "
    "step, type, payload) SELECT :sid, s.chunk_base + o.ord, o.message_id || :suffix, "
    ":rid, :agent, :step, 'message_steered', jsonb_build_object('message_id', o.message_id, "
    "'content', o.content, 'step', :step) FROM s, o ON CONFLICT (chunk_key) DO NOTHING "
    "RETURNING 1) "
    "SELECT (SELECT count(*) FROM m), CASE WHEN EXISTS (SELECT 1 FROM t) "
    "THEN pg_notify('helix_chunks', :sid) END"
)


async def take_steered(
    conn: Executor, *, session_id: str, run_id: str, agent_name: str, step: int
) -> int:
    """Take every waiting steer message of the session into the live run's transcript,
    for the model input of `step`; returns how many were taken."""
    row = (
        await conn.execute(
            _TAKE_STEERED,
            {
                "sid": session_id,
                "rid": run_id,
                "agent": agent_name,
                "step": step,
                "suffix": ":steered",
            },
        )
    ).one()
    return int(row[0])


async def idle_sessions_with_waiting(conn: Executor) -> list[str]:
    """Sessions with messages waiting and no live run: their next run is due (its starter
    was killed, or the run ended without starting it, an abort for example)."""
    rows = await conn.execute(
        _sql(
            "SELECT DISTINCT q.session_id FROM helix.queued_messages q WHERE q.status = 'queued' "
            "AND NOT EXISTS (SELECT 1 FROM helix.runs r WHERE r.session_id = q.session_id "
            f"AND r.status IN {_LIVE})"
        )
    )
    return [str(sid) for (sid,) in rows]


@dataclass(frozen=True)
class LiveTarget:
    """A waiting interrupting or rolling-back message whose target run is still live."""

    message_id: str
    session_id: str
    strategy: QueuedStrategy
    run_id: str


async def live_targets(conn: Executor) -> list[LiveTarget]:
    """Waiting `interrupt`/`rollback` messages whose target run is still live: the
    interrupt or abort that should follow their storing (its sender killed before)."""
    rows = await conn.execute(
        _sql(
            "SELECT q.message_id, q.session_id, q.strategy, q.target_run_id "
            "FROM helix.queued_messages q JOIN helix.runs r ON r.run_id = q.target_run_id "
            f"WHERE q.status = 'queued' AND q.strategy IN ('interrupt', 'rollback') "
            f"AND r.status IN {_LIVE} ORDER BY q.seq"
        )
    )
    return [LiveTarget(str(a), str(b), cast("QueuedStrategy", c), str(d)) for a, b, c, d in rows]


async def started_by(conn: Executor, run_id: str) -> QueuedMessage | None:
    """The stored message that started `run_id`, if one did."""
    row = (
        await conn.execute(
            _sql(
                f"SELECT {_COLUMNS} FROM helix.queued_messages WHERE run_id = :rid "
                "AND status = 'started'"
            ),
            {"rid": run_id},
        )
    ).first()
    return _row(row) if row else None


async def insert_event(
    conn: Executor, session_id: str, run_id: str | None, agent_name: str, key: str, kind: str,
    payload: dict[str, Any],
) -> None:  # fmt: skip
    """One keyed chunk on the session's stream (`message_queued`, ...)."""
    await insert_chunks(conn, session_id, run_id, agent_name, None, [(key, kind, payload)])


@dataclass(frozen=True)
class QueuedStart:
    """What the run-opening transaction does for a run a stored message starts."""

    message_id: str
    rollback_run_id: str | None  # a `rollback` message: the run it removes first


async def take_queued(conn: Executor, start: QueuedStart, run_id: str) -> None:
    """In the transaction that opens `run_id`: mark the message started (or raise
    `QueuedMessageTakenError`, rolling the open back), and for a `rollback` message
    remove the rolled-back run from the visible history first."""
    taken = await take_for_run(conn, start.message_id, run_id)
    if taken is None:
        raise QueuedMessageTakenError(start.message_id)
    if start.rollback_run_id is None:
        return
    rolled = await rollback.roll_back_run(conn, start.rollback_run_id, start.message_id)
    if rolled.done:
        payload = {
            "message_id": start.message_id,
            "messages": rolled.messages,
            "usage_rows": rolled.usage_rows,
        }
        await insert_event(
            conn,
            taken.session_id,
            start.rollback_run_id,
            taken.agent_name,
            f"{start.rollback_run_id}:rolled_back",
            "run_rolled_back",
            payload,
        )
