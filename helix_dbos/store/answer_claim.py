"""Claim a pending tool call for its answer in one statement.

`approve()` and the other answers lock the call, check it waits for this kind of answer
and is unanswered, and mark it answered before sending the answer. That was two round
trips (a locking read, then the update) on the path from `approve()` to the tool; this
is one. When it claims nothing, the caller takes the slower path, which explains why
(no such call, another kind, answered already).

On psycopg, the transaction's `BEGIN` and the claim go out together in pipeline mode, so
the claim costs one round trip before the answer's `DBOS.send`, not two; the commit
still follows the send (a SIGKILL between them leaves the call unclaimed and the answer,
if sent, is taken by the run as before).
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection as PsycopgConnection
from psycopg.pq import TransactionStatus
from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncConnection

from helix_dbos.errors import AmbiguousToolCallError
from helix_dbos.store.repository import _TOOL_CALL_COLUMNS, SQLConnection, ToolCallRow

_RETURNED = ", ".join(f"t.{c.strip()}" for c in _TOOL_CALL_COLUMNS.split(","))


def pg_style(statement: str) -> str:
    """A statement of this module in psycopg's own parameter style (the pipelined claim,
    the CLI's path in `server/remote.py`)."""
    for name in ("sid", "tcid", "rid", "kind"):
        statement = statement.replace(f":{name}", f"%({name})s")
    return statement


# The calls with this id in the sessions below :sid (any depth: :sid may be a root or a
# middle session), each still waiting for an answer (of any kind). They are found by index
# among the tree's sessions (`root_session_id`, the tree's root being :sid's own root or
# :sid itself), then each walks up its parents until it meets :sid (kept) or the root.
_WAITING = " AND c.status = 'pending' AND c.answered_at IS NULL"
_BELOW_SQL = (
    "WITH RECURSIVE below AS ("
    "SELECT c.run_id, c.tool_call_id, c.session_id, s.parent_session_id AS up "
    "FROM helix.sessions AS s JOIN helix.tool_calls AS c "
    "ON c.session_id = s.session_id AND c.tool_call_id = :tcid "
    "WHERE s.root_session_id = COALESCE("
    "(SELECT root_session_id FROM helix.sessions WHERE session_id = :sid), :sid) "
    "AND s.session_id <> :sid" + _WAITING + " "
    "UNION ALL "
    "SELECT b.run_id, b.tool_call_id, b.session_id, p.parent_session_id FROM below AS b "
    "JOIN helix.sessions AS p ON p.session_id = b.up WHERE b.up <> :sid"
    "), descendants AS (SELECT run_id, tool_call_id, session_id FROM below WHERE up = :sid) "
)

# The call answered through :sid: the session's own call with this id if it has one
# (ids are unique per session), else the one call waiting below it; none when several
# descendants wait on the id (an ambiguous answer: the slower path refuses it, naming
# them). The update locks the row; under READ COMMITTED a concurrent answer's commit is
# seen when the lock is granted, and the row no longer qualifies.
CLAIM_SQL = (
    _BELOW_SQL + "UPDATE helix.tool_calls AS t SET answered_at = now() FROM ("
    "(SELECT run_id, tool_call_id FROM helix.tool_calls "
    "WHERE session_id = :sid AND tool_call_id = :tcid ORDER BY created_at DESC LIMIT 1) "
    "UNION ALL "
    "SELECT run_id, tool_call_id FROM descendants "
    "WHERE (SELECT count(*) FROM descendants) = 1 AND NOT EXISTS ("
    "SELECT 1 FROM helix.tool_calls WHERE session_id = :sid AND tool_call_id = :tcid)"
    ") AS pick "
    "WHERE t.run_id = pick.run_id AND t.tool_call_id = pick.tool_call_id "
    "AND t.kind = :kind AND t.status = 'pending' AND t.answered_at IS NULL "
    f"RETURNING {_RETURNED}"
)
_CLAIM: TextClause = text(CLAIM_SQL)
# The same statement in psycopg's own parameter style, for the pipelined path.
_CLAIM_PG = pg_style(CLAIM_SQL)


async def claim_answer(
    conn: SQLConnection, session_id: str, tool_call_id: str, kind: str
) -> ToolCallRow | None:
    """The call, now marked answered, if it was pending, unanswered and of `kind`."""
    params = {"sid": session_id, "tcid": tool_call_id, "kind": kind}
    pg = await _idle_psycopg(conn)
    if pg is None:
        result = await conn.execute(_CLAIM, params)
        row = result.first()
    else:
        cursor = pg.cursor()
        async with pg.pipeline():  # BEGIN and the UPDATE in one round trip
            await cursor.execute(_CLAIM_PG, params)
        row = await cursor.fetchone()
    return ToolCallRow(*row) if row else None


OWN_CALL_SQL = (
    f"SELECT {_TOOL_CALL_COLUMNS} FROM helix.tool_calls WHERE session_id = :sid "
    "AND tool_call_id = :tcid ORDER BY created_at DESC LIMIT 1 FOR UPDATE"
)
# Every call with this id below :sid, waiting or not, newest first.
BELOW_CALLS_SQL = (
    _BELOW_SQL.replace(_WAITING, "")
    + f"SELECT {_RETURNED} FROM descendants AS d JOIN helix.tool_calls AS t "
    "ON t.run_id = d.run_id AND t.tool_call_id = d.tool_call_id ORDER BY t.created_at DESC"
)
LOCK_CALL_SQL = (
    f"SELECT {_TOOL_CALL_COLUMNS} FROM helix.tool_calls "
    "WHERE run_id = :rid AND tool_call_id = :tcid FOR UPDATE"
)


def answer_target(
    session_id: str, tool_call_id: str, own: ToolCallRow | None, below: list[ToolCallRow]
) -> ToolCallRow | None:
    """Which call an answer through `session_id` is for (the rule `CLAIM_SQL` applies):
    the session's own call with this id, else the one below it (at any depth) that
    waits, else the newest below it (to say it was answered). Several waiting below it:
    `AmbiguousToolCallError`, naming their sessions, and nothing is answered."""
    if own is not None:
        return own
    waiting = [c for c in below if c.status == "pending" and c.answered_at is None]
    if len(waiting) > 1:
        raise AmbiguousToolCallError(
            session_id, tool_call_id, sorted({c.session_id for c in waiting})
        )
    candidates = waiting or below
    return candidates[0] if candidates else None


async def find_answer_target(
    conn: SQLConnection, session_id: str, tool_call_id: str
) -> ToolCallRow | None:
    """`answer_target`, read and locked, when the claim took no call (to say why)."""
    params = {"sid": session_id, "tcid": tool_call_id}
    own = (await conn.execute(text(OWN_CALL_SQL), params)).first()
    below = (
        [] if own else [ToolCallRow(*r) for r in await conn.execute(text(BELOW_CALLS_SQL), params)]
    )
    target = answer_target(session_id, tool_call_id, ToolCallRow(*own) if own else None, below)
    if target is None or own is not None:
        return target
    locked = await conn.execute(text(LOCK_CALL_SQL), {"rid": target.run_id, "tcid": tool_call_id})
    row = locked.first()
    return ToolCallRow(*row) if row else None


async def _idle_psycopg(conn: SQLConnection) -> PsycopgConnection[Any] | None:
    """The psycopg connection under `conn` if the claim opens its transaction (nothing
    sent on it yet, not autocommit): then `BEGIN` can go out with the claim."""
    if not isinstance(conn, AsyncConnection):
        return None
    raw = await conn.get_raw_connection()
    pg = raw.driver_connection
    if not isinstance(pg, PsycopgConnection) or pg.autocommit:
        return None
    if pg.info.transaction_status != TransactionStatus.IDLE:
        return None
    return pg
