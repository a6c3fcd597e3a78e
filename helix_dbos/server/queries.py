"""Read-only SQL shared by the HTTP API and the CLI.

Queries are plain psycopg-style SQL (`%(name)s`), so the CLI runs them on a
psycopg connection without launching DBOS, and the server runs the very same
text through SQLAlchemy's `exec_driver_sql` on the executor's pool (always on
DBOS's target loop). Rows come back as dicts keyed by column name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

UsageBy = Literal["model", "session", "agent", "root"]
WAITING_STATUSES = ("waiting", "paused")

_RUN_COLUMNS = (
    "r.run_id, r.session_id, r.agent_name, r.workflow_id, r.turn, r.status, r.step_count, "
    "r.waiting_for, r.waiting_since, r.started_at, r.finished_at, r.error, r.tenant, "
    "r.queued_for, r.stop_reason"
)


@dataclass(frozen=True)
class Query:
    sql: str
    params: dict[str, Any] = field(default_factory=dict)


def session_exists(session_id: str) -> Query:
    return Query(
        "SELECT session_id FROM helix.sessions WHERE session_id = %(sid)s", {"sid": session_id}
    )


def list_runs(
    *,
    status: str | None = None,
    session_id: str | None = None,
    limit: int = 50,
    version: str | None = None,
) -> Query:
    """Most recent runs first; status `waiting` means waiting for a human (waiting or paused),
    `queued` waiting for a call slot of a limited model (docs/limits.md); `version`: runs
    started by that application version (docs/upgrading.md)."""
    where: list[str] = []
    params: dict[str, Any] = {"limit": limit}
    if version is not None:
        where.append("helix.run_version(r.workflow_id) = %(version)s")
        params["version"] = version
    if status == "waiting":
        where.append("r.status IN ('waiting', 'paused')")
    elif status == "queued":
        where.append("r.status = 'running' AND r.queued_for IS NOT NULL")
    elif status:
        where.append("r.status = %(status)s")
        params["status"] = status
    if session_id:  # the session's runs and its descendants' (what waits under it)
        where.append("r.session_id IN (SELECT session_id FROM tree)")
        params["sid"] = session_id
    clause = f"WHERE {' AND '.join(where)} " if where else ""
    # Each listed run's root and depth are read after the limit, for those runs only.
    return Query(
        (SESSION_TREE if session_id else "")
        + "SELECT q.*, COALESCE(s.root_session_id, s.session_id) AS root_session_id, d.depth "
        f"FROM (SELECT {_RUN_COLUMNS}, w.executor_id AS worker, w.workflow_status, "
        "w.queue_name, helix.run_version(r.workflow_id) AS app_version FROM helix.runs r "
        f"CROSS JOIN LATERAL helix.run_worker(r.workflow_id) w {clause}"
        "ORDER BY r.started_at DESC, r.run_id LIMIT %(limit)s) q "
        f"JOIN helix.sessions s ON s.session_id = q.session_id CROSS JOIN LATERAL ({_DEPTH}) d "
        "ORDER BY q.started_at DESC, q.run_id",
        params,
    )


# How far below its root a run's session is: its ancestors, counted up the parent links.
_DEPTH = (
    "WITH RECURSIVE up AS (SELECT s.parent_session_id AS parent, 0 AS depth UNION ALL "
    "SELECT p.parent_session_id, up.depth + 1 FROM helix.sessions p "
    "JOIN up ON p.session_id = up.parent) SELECT max(depth) AS depth FROM up"
)


def waiting_tool_calls(run_ids: Sequence[str]) -> Query:
    """The pending calls of these runs (from the `helix.waiting_runs` view), oldest first."""
    return Query(
        "SELECT w.run_id, w.tool_call_id, w.tool_name, w.kind, w.input, w.deadline_at, "
        "t.answered_at IS NOT NULL AS answered, w.session_id, w.agent_name "
        "FROM helix.waiting_runs w JOIN helix.tool_calls t "
        "ON t.run_id = w.run_id AND t.tool_call_id = w.tool_call_id "
        "WHERE w.run_id = ANY(%(rids)s) ORDER BY t.created_at, w.tool_call_id",
        {"rids": list(run_ids)},
    )


def answered_tool_calls(limit: int) -> Query:
    """Tool calls a person answered (or that timed out), newest first, with who and when."""
    return Query(
        "SELECT t.run_id, t.session_id, s.agent_name, t.tool_call_id, t.tool_name, t.kind, "
        "t.status, t.input, t.reason, t.error, t.answered_at, t.resolved_at, "
        # No answered_at, yet approved/denied/completed/failed: no helix API marked it, so
        # the answer was a raw DBOS message (DBOS.send or DBOSClient.send).
        "coalesce(t.answered_by, CASE WHEN t.answered_at IS NULL AND t.status IN "
        "('approved', 'denied', 'completed', 'failed') THEN 'DBOS.send' END) AS answered_by, "
        "r.status AS run_status "
        "FROM helix.tool_calls t JOIN helix.sessions s USING (session_id) "
        "JOIN helix.runs r ON r.run_id = t.run_id "
        "WHERE t.status <> 'pending' OR t.answered_at IS NOT NULL "
        "ORDER BY coalesce(t.answered_at, t.resolved_at, t.created_at) DESC LIMIT %(limit)s",
        {"limit": limit},
    )


def record_answerer(session_id: str, tool_call_id: str, answered_by: str) -> Query:
    """Name who answered a call of this session (or of a sub-agent below it), once."""
    return Query(
        "UPDATE helix.tool_calls SET answered_by = %(by)s "
        "WHERE tool_call_id = %(tcid)s AND answered_by IS NULL AND answered_at IS NOT NULL "
        "AND (session_id = %(sid)s OR session_id IN "
        "(SELECT session_id FROM helix.sessions WHERE root_session_id = %(sid)s))",
        {"by": answered_by, "tcid": tool_call_id, "sid": session_id},
    )


def transcript(session_id: str) -> Query:
    return Query(
        "SELECT seq, run_id, role, content, tool_calls, tool_call_id, tool_name, is_error, "
        "created_at, COALESCE(parts, '[]'::jsonb) AS parts "
        "FROM helix.messages WHERE session_id = %(sid)s ORDER BY seq",
        {"sid": session_id},
    )


def session_blob(session_id: str, sha256: str) -> Query:
    """A blob's media type and bytes, only if a message of the session references it."""
    return Query(
        "SELECT b.media_type, b.data, x.identifier FROM helix.blobs b, LATERAL "
        "(SELECT p ->> 'identifier' AS identifier FROM helix.messages m, "
        "jsonb_array_elements(m.parts) p WHERE m.session_id = %(sid)s "
        "AND jsonb_typeof(m.parts) = 'array' AND p ->> 'sha256' = %(sha)s LIMIT 1) x "
        "WHERE b.sha256 = %(sha)s",
        {"sid": session_id, "sha": sha256},
    )


# The session `%(sid)s` and every session below it (sub-agents, companions, theirs).
SESSION_TREE = (
    "WITH RECURSIVE tree AS (SELECT CAST(%(sid)s AS text) AS session_id UNION "
    "SELECT s.session_id FROM helix.sessions s JOIN tree t ON s.parent_session_id = t.session_id) "
)


def usage(
    *, by: UsageBy = "model", session_id: str | None = None, include_children: bool = False
) -> Query:
    """Calls, tokens and cost in USD grouped by model (LLM calls only), session, agent or
    root session (a session with every sub-agent session below it). `cost_usd` is NULL
    where no call of the group was priced (a model the price table does not know).
    `include_children` (with `session_id`): the session and every session below it.

    A `subagent` row repeats its child's tokens, so by root session, or over a session
    with its children, where the child's own rows count too, only the rows of the work
    itself are summed (its cost is only ever on `llm` rows)."""
    column = {
        "model": "u.model",
        "session": "u.session_id",
        "agent": "u.agent_name",
        "root": "COALESCE(s.root_session_id, u.session_id)",
    }[by]
    where: list[str] = ["u.kind = 'llm'"] if by == "model" else []
    params: dict[str, Any] = {}
    tree = bool(session_id) and include_children
    if session_id:
        if tree:
            where.append("u.session_id IN (SELECT session_id FROM tree)")
        else:
            where.append(f"{column if by == 'root' else 'u.session_id'} = %(sid)s")
        params["sid"] = session_id
    join = "JOIN helix.sessions s ON s.session_id = u.session_id " if by == "root" else ""
    clause = f"WHERE {' AND '.join(where)} " if where else ""
    only = " FILTER (WHERE u.kind <> 'subagent')" if by == "root" or tree else ""
    tokens = ", ".join(
        f"COALESCE(sum(u.{c}){only}, 0) AS {c}"
        for c in (
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
        )
    )
    return Query(
        (SESSION_TREE if tree else "")
        + f"SELECT {column} AS key, count(*) FILTER (WHERE u.kind = 'llm') AS llm_calls, "
        f"count(*) FILTER (WHERE u.kind = 'tool') AS tool_calls, {tokens}, "
        "CAST(sum(u.cost_usd) AS float8) AS cost_usd "
        f"FROM helix.usage u {join}{clause}GROUP BY 1 ORDER BY llm_calls DESC, tool_calls DESC, 1",
        params,
    )


def attach_tool_calls(
    runs: list[dict[str, Any]], calls: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Give each run its pending calls (`tool_calls`, with the run's depth), in the runs'
    order."""
    by_run: dict[str, list[dict[str, Any]]] = {}
    for call in calls:
        by_run.setdefault(call["run_id"], []).append(call)
    return [
        {
            **run,
            "tool_calls": [{**c, "depth": run["depth"]} for c in by_run.get(run["run_id"], [])],
        }
        for run in runs
    ]


def queued_messages(session_id: str) -> Query:
    """A session's stored messages (double texting), in storage order."""
    return Query(
        "SELECT message_id, seq, strategy, status, content, run_id, step, target_run_id, "
        "created_at, taken_at FROM helix.queued_messages WHERE session_id = %(sid)s "
        "ORDER BY seq",
        {"sid": session_id},
    )


# --- runners ------------------------------------------------------------------


def _rows(cursor: Any) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def fetch_sync(conn: Any, query: Query) -> list[dict[str, Any]]:
    """Run on a psycopg connection (the CLI)."""
    return _rows(conn.execute(query.sql, query.params))


async def fetch_async(engine: Any, query: Query) -> list[dict[str, Any]]:
    """Run on a SQLAlchemy AsyncEngine; call it on DBOS's target loop."""
    async with engine.connect() as conn:
        result = await conn.exec_driver_sql(query.sql, query.params)
        return [dict(row._mapping) for row in result]


def runs_with_calls_sync(conn: Any, **filters: Any) -> list[dict[str, Any]]:
    runs = fetch_sync(conn, list_runs(**filters))
    waiting = [r["run_id"] for r in runs if r["status"] in WAITING_STATUSES]
    calls = fetch_sync(conn, waiting_tool_calls(waiting)) if waiting else []
    return attach_tool_calls(runs, calls)


async def runs_with_calls_async(engine: Any, **filters: Any) -> list[dict[str, Any]]:
    runs = await fetch_async(engine, list_runs(**filters))
    waiting = [r["run_id"] for r in runs if r["status"] in WAITING_STATUSES]
    calls = await fetch_async(engine, waiting_tool_calls(waiting)) if waiting else []
    return attach_tool_calls(runs, calls)
