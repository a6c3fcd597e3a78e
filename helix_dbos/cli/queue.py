"""queue: a session's stored messages (double texting), and cancelling one; plain SQL.

Cancelling is a guarded row update (only a message still waiting changes), so it needs
no DBOS: a message that was taken meanwhile is reported as such, not cancelled.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from helix_dbos.cli.common import (
    CLIError,
    DatabaseUrl,
    Json,
    Session,
    read_connection,
    require_session,
)
from helix_dbos.cli.output import Column, print_rows
from helix_dbos.orchestration.double_texting import Waiting, positions
from helix_dbos.server import queries
from helix_dbos.server.queries import Query

QUEUE_COLUMNS = [
    Column("position", "POS"),
    Column("message_id", "MESSAGE", is_id=True),
    Column("strategy", "STRATEGY"),
    Column("status", "STATUS"),
    Column("run_id", "RUN", is_id=True, drop=1),
    Column("created_at", "SENT", drop=2),
    Column("content", "TEXT", wraps=True),
]


def cancel_query(session_id: str, message_id: str) -> Query:
    """Cancel the message if it still waits; its status after, either way (no row: no
    such message on the session)."""
    return Query(
        "WITH c AS (UPDATE helix.queued_messages SET status = 'cancelled', taken_at = now() "
        "WHERE message_id = %(mid)s AND session_id = %(sid)s AND status = 'queued' "
        "RETURNING status) SELECT COALESCE((SELECT status FROM c), q.status) AS status "
        "FROM helix.queued_messages q WHERE q.message_id = %(mid)s AND q.session_id = %(sid)s",
        {"sid": session_id, "mid": message_id},
    )


def with_positions(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each waiting message with its place in line (1 = the next run)."""
    waiting = [
        Waiting(r["message_id"], r["seq"], r["strategy"]) for r in rows if r["status"] == "queued"
    ]
    places = positions(waiting)
    return [{**r, "position": places.get(r["message_id"])} for r in rows]


def queue(
    session: Session,
    cancel: Annotated[
        str | None,
        typer.Option("--cancel", metavar="MESSAGE", help="Cancel this waiting message."),
    ] = None,
    json_output: Json = False,
    database_url: DatabaseUrl = None,
) -> int:
    """List a session's stored messages (sent while a run was live), or cancel one."""
    with read_connection(database_url) as conn:
        session = require_session(conn, session)
        if cancel is not None:
            rows = queries.fetch_sync(conn, cancel_query(session, cancel))
            if not rows:
                raise CLIError(f"session {session} has no queued message {cancel}")
            if rows[0]["status"] != "cancelled":
                raise CLIError(
                    f"message {cancel} is {rows[0]['status']}: it can no longer be cancelled"
                )
        rows = with_positions(queries.fetch_sync(conn, queries.queued_messages(session)))
    if cancel is not None and not json_output:
        print(f"Cancelled message {cancel} of session {session}.")
        return 0
    empty = f"No messages were queued on session {session}."
    return print_rows(rows, QUEUE_COLUMNS, json_output=json_output, empty=empty)


def register(app: typer.Typer) -> None:
    app.command("queue")(queue)
