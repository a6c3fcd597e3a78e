"""SQL over `helix.handoffs`: which agent handed a run to which (migration 0025)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from helix_dbos.store.repository import SQLConnection, _sql


@dataclass(frozen=True)
class HandoffRow:
    """One handoff taken: at `step` of `run_id`, the call `tool_call_id`."""

    session_id: str
    run_id: str
    step: int
    tool_call_id: str
    from_agent: str
    to_agent: str
    created_at: datetime | None = None


async def record(conn: SQLConnection, row: HandoffRow) -> None:
    """The body of `helix.handoff`; the key makes a second insert of it a no-op."""
    await conn.execute(
        _sql(
            "INSERT INTO helix.handoffs (run_id, tool_call_id, session_id, step, from_agent, "
            "to_agent) VALUES (:run, :call, :sid, :step, :src, :dst) "
            "ON CONFLICT (run_id, tool_call_id) DO NOTHING"
        ),
        {
            "run": row.run_id,
            "call": row.tool_call_id,
            "sid": row.session_id,
            "step": row.step,
            "src": row.from_agent,
            "dst": row.to_agent,
        },
    )


async def current_agent(conn: SQLConnection, session_id: str) -> str | None:
    """The target of the session's latest handoff, if any."""
    row = (
        await conn.execute(
            _sql(
                "SELECT to_agent FROM helix.handoffs WHERE session_id = :sid "
                "ORDER BY created_at DESC, step DESC LIMIT 1"
            ),
            {"sid": session_id},
        )
    ).first()
    return None if row is None else str(row[0])


async def of_session(conn: SQLConnection, session_id: str) -> list[HandoffRow]:
    """The session's handoffs, oldest first."""
    rows = (
        await conn.execute(
            _sql(
                "SELECT session_id, run_id, step, tool_call_id, from_agent, to_agent, "
                "created_at FROM helix.handoffs WHERE session_id = :sid "
                "ORDER BY created_at, step"
            ),
            {"sid": session_id},
        )
    ).all()
    return [HandoffRow(*r) for r in rows]
