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
# else a sub-agent's, the newest), by index: each branch of the union is a lookup on
# (session_id, tool_call_id), where an `OR` over the two scanned the whole table. The
# update locks the row; under READ COMMITTED a concurrent answer's commit is seen when
# the lock is granted, and the row no longer qualifies.
_CLAIM: TextClause = text(
    "UPDATE helix.tool_calls AS t SET answered_at = now() FROM ("
    "SELECT run_id, tool_call_id FROM ("
    "SELECT run_id, tool_call_id, created_at, true AS own FROM helix.tool_calls "
    "WHERE session_id = :sid AND tool_call_id = :tcid "
    "UNION ALL "
    "SELECT c.run_id, c.tool_call_id, c.created_at, false FROM helix.sessions AS s "
    "JOIN helix.tool_calls AS c ON c.session_id = s.session_id AND c.tool_call_id = :tcid "
    "WHERE s.root_session_id = :sid AND s.session_id <> :sid"
    ") AS candidates ORDER BY own DESC, created_at DESC LIMIT 1) AS pick "
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
