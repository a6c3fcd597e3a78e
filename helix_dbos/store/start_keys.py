"""SQL of keyed starts (`POST /start` with an `idempotency_key`, migration 0015).

A key is reserved with the session and the turn its run will have before the run opens;
the run is then found by (session, turn), so a start cut short after the run opened is
answered with that run, and one cut short before is simply started again.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text

from helix_dbos.store.repository import SQLConnection


@dataclass(frozen=True)
class StartKey:
    key: str
    session_id: str
    agent_name: str
    turn: int
    run_id: str | None


@dataclass(frozen=True)
class KeyedRun:
    run_id: str
    workflow_id: str


async def find(conn: SQLConnection, key: str) -> StartKey | None:
    row = (
        await conn.execute(
            text(
                "SELECT idempotency_key, session_id, agent_name, turn, run_id "
                "FROM helix.start_keys WHERE idempotency_key = :key"
            ),
            {"key": key},
        )
    ).first()
    return StartKey(*row) if row is not None else None


async def reserve(conn: SQLConnection, key: str, session_id: str, agent_name: str) -> StartKey:
    """Reserve `key` for the session's next turn (its turn count + 1, 1 for a new one)."""
    row = (
        await conn.execute(
            text(
                "INSERT INTO helix.start_keys (idempotency_key, session_id, agent_name, turn) "
                "SELECT :key, :sid, :agent, COALESCE((SELECT turn_count FROM helix.sessions "
                "WHERE session_id = :sid), 0) + 1 "
                "RETURNING idempotency_key, session_id, agent_name, turn, run_id"
            ),
            {"key": key, "sid": session_id, "agent": agent_name},
        )
    ).one()
    return StartKey(*row)


async def keyed_run(conn: SQLConnection, reserved: StartKey) -> KeyedRun | None:
    """The run the key started: its session's run of the reserved turn."""
    row = (
        await conn.execute(
            text(
                "SELECT run_id, workflow_id FROM helix.runs "
                "WHERE session_id = :sid AND turn = :turn AND agent_name = :agent"
            ),
            {"sid": reserved.session_id, "turn": reserved.turn, "agent": reserved.agent_name},
        )
    ).first()
    return KeyedRun(*row) if row is not None else None


async def record_run(conn: SQLConnection, key: str, run_id: str) -> None:
    await conn.execute(
        text("UPDATE helix.start_keys SET run_id = :rid WHERE idempotency_key = :key"),
        {"key": key, "rid": run_id},
    )


async def release(conn: SQLConnection, key: str) -> None:
    """Forget a reservation whose start failed (nothing opened), so a retry starts anew."""
    await conn.execute(
        text("DELETE FROM helix.start_keys WHERE idempotency_key = :key AND run_id IS NULL"),
        {"key": key},
    )


async def lock(conn: SQLConnection, key: str) -> None:
    """A session-level advisory lock on the key: one keyed start at a time, any process."""
    await conn.execute(
        text("SELECT pg_advisory_lock(hashtextextended('helix.start:' || :key, 0))"),
        {"key": key},
    )


async def lock_in_transaction(conn: SQLConnection, key: str) -> None:
    """The same lock, released when `conn`'s transaction ends (behind a pooler)."""
    await conn.execute(
        text("SELECT pg_advisory_xact_lock(hashtextextended('helix.start:' || :key, 0))"),
        {"key": key},
    )


async def unlock(conn: SQLConnection, key: str) -> None:
    await conn.execute(
        text("SELECT pg_advisory_unlock(hashtextextended('helix.start:' || :key, 0))"),
        {"key": key},
    )
