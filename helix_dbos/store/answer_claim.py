"""Claim a pending tool call for its answer in one statement.

`approve()` and the other answers lock the call, check it waits for this kind of answer
and is unanswered, and mark it answered before sending the answer. That was two round
trips (a locking read, then the update) on the path from `approve()` to the tool; this
is one. When it claims nothing, the caller takes the slower path, which explains why
(no such call, another kind, answered already).
"""

from __future__ import annotations

from sqlalchemy import TextClause, text

from helix_dbos.store.repository import _TOOL_CALL_COLUMNS, SQLConnection, ToolCallRow

_RETURNED = ", ".join(f"t.{c.strip()}" for c in _TOOL_CALL_COLUMNS.split(","))

# The call is picked as `repository.find_tool_call` picks it (the session's own first,
# else a sub-agent's, the newest), locked, then marked answered if still claimable:
# under READ COMMITTED a concurrent answer's commit is seen when the lock is granted.
_CLAIM: TextClause = text(
    "UPDATE helix.tool_calls AS t SET answered_at = now() FROM ("
    "SELECT run_id, tool_call_id FROM helix.tool_calls WHERE tool_call_id = :tcid "
    "AND (session_id = :sid OR session_id IN "
    "(SELECT session_id FROM helix.sessions WHERE root_session_id = :sid)) "
    "ORDER BY session_id = :sid DESC, created_at DESC LIMIT 1 FOR UPDATE) AS pick "
    "WHERE t.run_id = pick.run_id AND t.tool_call_id = pick.tool_call_id "
    "AND t.kind = :kind AND t.status = 'pending' AND t.answered_at IS NULL "
    f"RETURNING {_RETURNED}"
)


async def claim_answer(
    conn: SQLConnection, session_id: str, tool_call_id: str, kind: str
) -> ToolCallRow | None:
    """The call, now marked answered, if it was pending, unanswered and of `kind`."""
    result = await conn.execute(_CLAIM, {"sid": session_id, "tcid": tool_call_id, "kind": kind})
    row = result.first()
    return ToolCallRow(*row) if row else None
