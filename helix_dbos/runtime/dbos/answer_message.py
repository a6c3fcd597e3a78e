"""An answer's claim and its DBOS message in one statement: one round trip from
`answer()` to the run's wake (`runtime/waits/answer_send.py` says when it applies).

The claim is `store/answer_claim`'s; the message row goes into DBOS's `notifications`
with the key `DBOS.send` would give it. Beside `dbos_internals.py`, which names the
table, so that a DBOS upgrade finds every statement on DBOS's tables in this folder.
"""

from __future__ import annotations

from sqlalchemy import TextClause, text

from helix_dbos.store.answer_claim import CLAIM_SQL
from helix_dbos.store.repository import SQLConnection, ToolCallRow

_CLAIM_AND_SEND: dict[str, TextClause] = {}  # by DBOS's message table


def _claim_and_send(notifications: str) -> TextClause:
    clause = _CLAIM_AND_SEND.get(notifications)
    if clause is None:
        # Only a run that a live worker will resume is claimed: one of the version this
        # process runs (`:mine`, when it executes runs), else `helix.version_served`
        # (migration 0019). Nothing is claimed or sent for a run started by a version no
        # live worker runs, and the slower path says why.
        status_table = notifications.rsplit(".", 1)[0] + ".workflow_status"
        guarded = CLAIM_SQL.replace(
            " RETURNING ",
            " AND COALESCE((SELECT COALESCE(ws.application_version = :mine, false) "
            "OR helix.version_served(ws.application_version) "
            f"FROM {status_table} ws WHERE ws.workflow_uuid = t.workflow_id), true) RETURNING ",
        )
        # The key is `DBOS.send`'s for an idempotency key `run_id:tool_call_id`.
        clause = _CLAIM_AND_SEND[notifications] = text(
            f"WITH claimed AS ({guarded}), sent AS ("
            f"INSERT INTO {notifications} "
            "(destination_uuid, topic, message, message_uuid, serialization) "
            "SELECT workflow_id, :topic, :message, "
            "run_id || ':' || tool_call_id || '::' || workflow_id, :serialization "
            "FROM claimed ON CONFLICT (message_uuid) DO NOTHING) "
            "SELECT * FROM claimed"
        )
    return clause


async def claim_and_send(
    conn: SQLConnection,
    session_id: str,
    tool_call_id: str,
    kind: str,
    *,
    notifications: str,
    topic: str,
    message: str | None,
    serialization: str,
    mine: str | None,
) -> ToolCallRow | None:
    """`claim_answer` and the answer's message row (DBOS's table in this database) in one
    statement: one round trip, committed alone, so the claim and the answer land
    together and the commit wakes the run; None: nothing claimed (and nothing sent),
    also where the run's application version has no live worker. `mine`: the version
    this process executes runs of, if it does (served, whatever the workers table says)."""
    params = {
        "mine": mine,
        "sid": session_id,
        "tcid": tool_call_id,
        "kind": kind,
        "topic": topic,
        "message": message,
        "serialization": serialization,
    }
    row = (await conn.execute(_claim_and_send(notifications), params)).first()
    return ToolCallRow(*row) if row else None
