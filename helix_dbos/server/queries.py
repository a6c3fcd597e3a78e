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

UsageBy = Literal["model", "session", "agent"]
WAITING_STATUSES = ("waiting", "paused")

_RUN_COLUMNS = (
    "r.run_id, r.session_id, r.agent_name, r.workflow_id, r.turn, r.status, r.step_count, "
    "r.waiting_for, r.waiting_since, r.started_at, r.finished_at, r.error"
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
    *, status: str | None = None, session_id: str | None = None, limit: int = 50
) -> Query:
    """Most recent runs first; status `waiting` means waiting for a human (waiting or paused)."""
    where: list[str] = []
    params: dict[str, Any] = {"limit": limit}
    if status == "waiting":
        where.append("r.status IN ('waiting', 'paused')")
    elif status:
        where.append("r.status = %(status)s")
        params["status"] = status
    if session_id:
        where.append("r.session_id = %(sid)s")
        params["sid"] = session_id
    clause = f"WHERE {' AND '.join(where)} " if where else ""
    return Query(
        f"SELECT {_RUN_COLUMNS}, w.executor_id AS worker, w.workflow_status, w.queue_name "
        f"FROM helix.runs r CROSS JOIN LATERAL helix.run_worker(r.workflow_id) w {clause}"
        "ORDER BY r.started_at DESC, r.run_id LIMIT %(limit)s",
        params,
    )


def waiting_tool_calls(run_ids: Sequence[str]) -> Query:
    """The pending calls of these runs (from the `helix.waiting_runs` view), oldest first."""
    return Query(
        "SELECT w.run_id, w.tool_call_id, w.tool_name, w.kind, w.input, w.deadline_at, "
        "t.answered_at IS NOT NULL AS answered "
        "FROM helix.waiting_runs w JOIN helix.tool_calls t "
        "ON t.run_id = w.run_id AND t.tool_call_id = w.tool_call_id "
        "WHERE w.run_id = ANY(%(rids)s) ORDER BY t.created_at, w.tool_call_id",
        {"rids": list(run_ids)},
    )


def transcript(session_id: str) -> Query:
    return Query(
        "SELECT seq, run_id, role, content, tool_calls, tool_call_id, tool_name, is_error, created_at "
        "FROM helix.messages WHERE session_id = %(sid)s ORDER BY seq",
        {"sid": session_id},
    )


def usage(*, by: UsageBy = "model", session_id: str | None = None) -> Query:
    """Calls and tokens grouped by model (LLM calls only), session or agent."""
    column = {"model": "model", "session": "session_id", "agent": "agent_name"}[by]
    where: list[str] = ["kind = 'llm'"] if by == "model" else []
    params: dict[str, Any] = {}
    if session_id:
        where.append("session_id = %(sid)s")
        params["sid"] = session_id
    clause = f"WHERE {' AND '.join(where)} " if where else ""
    return Query(
        f"SELECT {column} AS key, count(*) FILTER (WHERE kind = 'llm') AS llm_calls, "
        "count(*) FILTER (WHERE kind = 'tool') AS tool_calls, "
        "COALESCE(sum(input_tokens), 0) AS input_tokens, "
        "COALESCE(sum(output_tokens), 0) AS output_tokens, "
        "COALESCE(sum(cache_read_tokens), 0) AS cache_read_tokens, "
        "COALESCE(sum(cache_write_tokens), 0) AS cache_write_tokens, "
        "COALESCE(sum(reasoning_tokens), 0) AS reasoning_tokens "
        f"FROM helix.usage {clause}GROUP BY 1 ORDER BY llm_calls DESC, tool_calls DESC, 1",
        params,
    )


def attach_tool_calls(
    runs: list[dict[str, Any]], calls: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Give each run its pending calls (`tool_calls`), in the runs' order."""
    by_run: dict[str, list[dict[str, Any]]] = {}
    for call in calls:
        by_run.setdefault(call["run_id"], []).append(call)
    return [{**run, "tool_calls": by_run.get(run["run_id"], [])} for run in runs]


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
