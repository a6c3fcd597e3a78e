"""helix's statements on DBOS's `workflow_status` for runs: whether an execution still
owns its workflow, the live runs whose workflow ended, and the ended runs whose DBOS
records a prune may delete.

Beside `dbos_internals.py` so that a DBOS upgrade finds every statement on DBOS's own
tables in this folder (`tests/test_architecture.py` holds it). What helix's own
statements read of DBOS's tables goes through SQL functions of the migrations
(`helix.owns`, `helix.run_worker`, `helix.run_version`, `helix.unreceived_interrupts`,
`helix.end_step_and_run`).
"""

from __future__ import annotations

from datetime import datetime

from helix_dbos.store.checkpoint_rows import QUIET
from helix_dbos.store.repository import SQLConnection, _sql

_LIVE = "('running', 'waiting', 'paused')"
_ENDED = "('SUCCESS', 'ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')"


async def owns_workflow(conn: SQLConnection, workflow_id: str, owner_xid: str) -> bool:
    """Whether the execution holding `owner_xid` still owns the workflow (see `OWNED`)."""
    row = await conn.execute(
        _sql(
            "SELECT EXISTS (SELECT 1 FROM dbos.workflow_status "
            "WHERE workflow_uuid = :wid AND owner_xid = :oxid)"
        ),
        {"wid": workflow_id, "oxid": owner_xid},
    )
    return bool(row.scalar())


_LIVE_RUNS_WITH_ENDED_WORKFLOW = _sql(
    "SELECT r.run_id FROM helix.runs r LEFT JOIN dbos.workflow_status w "
    "ON w.workflow_uuid = r.workflow_id "
    f"WHERE r.status IN {_LIVE} AND (w.workflow_uuid IS NULL OR w.status IN {_ENDED}) "
    # A workflow cancelled moments ago is its canceller's to close, with its own reason
    # (COALESCE: a run whose workflow never started has no status row to compare).
    "AND NOT COALESCE(w.status = 'CANCELLED' AND w.updated_at > "
    "CAST(EXTRACT(epoch FROM now()) * 1000 AS bigint) - CAST(:grace_ms AS bigint), false) "
    # A sub-agent's workflow is started by its parent's workflow, which a recovery
    # replays: while the parent is live, a child not started yet is not stale.
    "AND NOT (w.workflow_uuid IS NULL AND EXISTS (SELECT 1 FROM helix.sessions s "
    "JOIN helix.runs p ON p.session_id = s.parent_session_id "
    f"AND p.status IN {_LIVE} WHERE s.session_id = r.session_id))"
)


async def live_runs_with_ended_workflow(
    conn: SQLConnection, *, cancel_grace_seconds: float = 0
) -> list[str]:
    """Live runs whose DBOS workflow does not exist or has ended (DBOS's own table),
    but those whose workflow was cancelled less than `cancel_grace_seconds` ago: an
    abort cancels, then closes the run with its reason, a moment later."""
    params = {"grace_ms": int(cancel_grace_seconds * 1000)}
    rows = await conn.execute(_LIVE_RUNS_WITH_ENDED_WORKFLOW, params)
    return [str(run_id) for (run_id,) in rows]


# Workflow ids of ended runs finished before the cutoff whose DBOS records still exist.
_ENDED_WORKFLOWS = _sql(
    "SELECT r.workflow_id FROM helix.runs r "
    f"WHERE r.status NOT IN {_LIVE} AND r.finished_at < :cutoff "
    f"AND {QUIET.format(s='r.session_id')} "
    "AND EXISTS (SELECT 1 FROM dbos.workflow_status ws WHERE ws.workflow_uuid = r.workflow_id "
    f"AND ws.status IN {_ENDED}) "
    "ORDER BY r.workflow_id LIMIT :batch"
)


async def ended_workflows(conn: SQLConnection, *, cutoff: datetime, batch: int) -> list[str]:
    """Up to `batch` workflows of ended runs finished before `cutoff` (in quiet
    sessions) whose DBOS records a prune may delete."""
    rows = await conn.execute(_ENDED_WORKFLOWS, {"cutoff": cutoff, "batch": batch})
    return [str(r[0]) for r in rows]
