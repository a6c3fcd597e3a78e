"""SQL for the fleet: the `helix.workers` registry and the hand-back of a dead worker's runs.

Plain psycopg on the caller's connection: the heartbeat runs in its own thread on its
own connection, so that a busy async pool never delays a lease renewal. Every time is
the database's clock (`now()`), so the processes' clocks never have to agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from helix_dbos.definitions.queue import AGENT_QUEUE_PREFIX

# DBOS dequeues a workflow only from the queue named on its row. A recovered agent run goes
# to its agent's queue, which only processes serving that agent listen to; anything else
# goes where DBOS's own recovery would send it.
DBOS_RECOVERY_QUEUE = "_dbos_internal_queue"
AGENT_WORKFLOW = "helix.agent_run"


@dataclass(frozen=True)
class WorkerIdentity:
    executor_id: str
    application_name: str
    application_version: str
    host: str
    pid: int
    agents: tuple[str, ...]
    executes_runs: bool
    lease_seconds: float


@dataclass(frozen=True)
class WorkerRow:
    executor_id: str
    application_name: str
    application_version: str
    host: str
    pid: int
    agents: list[str]
    executes_runs: bool
    state: str  # live | stopped | dead; `expired` says whether a live lease has lapsed
    expired: bool
    lease_seconds: float
    started_at: datetime
    heartbeat_at: datetime
    recovered_by: str | None
    recovered_at: datetime | None
    recovered_runs: int
    pending_runs: int


def register(conn: psycopg.Connection[Any], me: WorkerIdentity) -> bool:
    """Take the executor id unless a live worker heartbeats under it; True if taken."""
    row = conn.execute(
        """
        INSERT INTO helix.workers AS w (executor_id, application_name, application_version,
            host, pid, agents, executes_runs, lease_seconds)
        VALUES (%(id)s, %(app)s, %(version)s, %(host)s, %(pid)s, %(agents)s, %(executes)s,
            %(lease)s)
        ON CONFLICT (executor_id) DO UPDATE SET
            application_name = excluded.application_name,
            application_version = excluded.application_version,
            host = excluded.host, pid = excluded.pid, agents = excluded.agents,
            executes_runs = excluded.executes_runs, lease_seconds = excluded.lease_seconds,
            state = 'live', started_at = now(), heartbeat_at = now()
        WHERE w.state <> 'live'
           OR w.heartbeat_at < now() - make_interval(secs => w.lease_seconds)
        RETURNING executor_id
        """,
        _identity_params(me),
    ).fetchone()
    return row is not None


def holder(conn: psycopg.Connection[Any], executor_id: str) -> tuple[str, int] | None:
    """Host and pid of the live worker holding `executor_id`, if any."""
    row = conn.execute(
        "SELECT host, pid FROM helix.workers WHERE executor_id = %s AND state = 'live'",
        (executor_id,),
    ).fetchone()
    return (row[0], row[1]) if row else None


def heartbeat(conn: psycopg.Connection[Any], executor_id: str) -> bool:
    """Renew the lease; False if the row is no longer ours to renew (claimed as dead)."""
    row = conn.execute(
        "UPDATE helix.workers SET heartbeat_at = now() "
        "WHERE executor_id = %s AND state = 'live' RETURNING 1",
        (executor_id,),
    ).fetchone()
    return row is not None


def set_agents(conn: psycopg.Connection[Any], executor_id: str, agents: tuple[str, ...]) -> None:
    conn.execute(
        "UPDATE helix.workers SET agents = %s WHERE executor_id = %s", (list(agents), executor_id)
    )


def mark_stopped(conn: psycopg.Connection[Any], executor_id: str) -> None:
    conn.execute(
        "UPDATE helix.workers SET state = 'stopped' WHERE executor_id = %s AND state = 'live'",
        (executor_id,),
    )


def expired_workers(
    conn: psycopg.Connection[Any], application_name: str, application_version: str
) -> list[str]:
    """Workers of this application and version whose lease has lapsed and whose runs
    were not handed back yet (a cleanly stopped worker's runs included)."""
    rows = conn.execute(
        """
        SELECT executor_id FROM helix.workers
        WHERE application_name = %s AND application_version = %s
          AND state IN ('live', 'stopped')
          AND heartbeat_at < now() - make_interval(secs => lease_seconds)
        ORDER BY heartbeat_at
        """,
        (application_name, application_version),
    ).fetchall()
    return [r[0] for r in rows]


def claim_and_requeue(
    conn: psycopg.Connection[Any],
    dead: str,
    claimant: str,
    *,
    force: bool = False,
) -> list[str] | None:
    """In one transaction: declare `dead` dead (only if its lease lapsed; `force` also
    takes a worker already declared dead, for runs left behind) and hand its pending
    workflows back to DBOS's queues.

    Returns the workflow ids handed back, or None if the worker was not claimable
    (alive, or claimed by another worker first). A workflow is handed back exactly as
    DBOS's own recovery does it (ENQUEUED, ownership token cleared, so a stale owner's
    checkpoints are refused), but an agent run that was not on a queue goes to its
    agent's queue, so only a worker serving that agent dequeues it.
    """
    with conn.transaction():
        claimed = conn.execute(
            """
            UPDATE helix.workers SET state = 'dead', recovered_by = %(claimant)s,
                recovered_at = now()
            WHERE executor_id = %(dead)s
              AND (heartbeat_at < now() - make_interval(secs => lease_seconds)
                   AND (state <> 'dead' OR %(force)s))
            RETURNING application_name, application_version
            """,
            {"dead": dead, "claimant": claimant, "force": force},
        ).fetchone()
        if claimed is None:
            return None
        moved = requeue_pending(conn, dead, claimed[0], claimed[1])
        conn.execute(
            "UPDATE helix.workers SET recovered_runs = %s WHERE executor_id = %s",
            (len(moved), dead),
        )
        return moved


def requeue_pending(
    conn: psycopg.Connection[Any],
    executor_id: str,
    application_name: str,
    application_version: str,
) -> list[str]:
    """Hand `executor_id`'s PENDING workflows of this application and version back to
    the queues (see `claim_and_requeue`); returns their ids."""
    if not _dbos_schema_exists(conn):
        return []  # DBOS has never launched on this database: nothing can be pending
    rows = conn.execute(
        """
        UPDATE dbos.workflow_status ws SET
            status = 'ENQUEUED', owner_xid = NULL, started_at_epoch_ms = NULL,
            updated_at = (extract(epoch FROM now()) * 1000)::bigint,
            queue_name = COALESCE(
                ws.queue_name,
                (SELECT %(prefix)s || r.agent_name FROM helix.runs r
                  WHERE r.workflow_id = ws.workflow_uuid AND ws.name = %(agent_workflow)s),
                %(fallback)s)
        WHERE ws.status = 'PENDING' AND ws.executor_id = %(executor)s
          AND ws.application_version = %(version)s
          AND (ws.application_name = %(app)s OR ws.application_name IS NULL)
        RETURNING ws.workflow_uuid
        """,
        {
            "prefix": AGENT_QUEUE_PREFIX,
            "agent_workflow": AGENT_WORKFLOW,
            "fallback": DBOS_RECOVERY_QUEUE,
            "executor": executor_id,
            "version": application_version,
            "app": application_name,
        },
    ).fetchall()
    return [r[0] for r in rows]


def list_workers(conn: psycopg.Connection[Any]) -> list[WorkerRow]:
    pending = (
        "(SELECT count(*) FROM dbos.workflow_status ws "
        "WHERE ws.executor_id = w.executor_id AND ws.status = 'PENDING')"
        if _dbos_schema_exists(conn)
        else "0"
    )
    rows = conn.execute(
        f"""
        SELECT w.executor_id, w.application_name, w.application_version, w.host, w.pid,
               w.agents, w.executes_runs, w.state,
               w.state = 'live' AND w.heartbeat_at < now() - make_interval(secs => w.lease_seconds),
               w.lease_seconds, w.started_at, w.heartbeat_at, w.recovered_by, w.recovered_at,
               w.recovered_runs, {pending}
        FROM helix.workers w
        ORDER BY w.state = 'live' DESC, w.started_at DESC
        """
    ).fetchall()
    return [WorkerRow(*r) for r in rows]


@dataclass(frozen=True)
class QueuedRun:
    """A run on an agent's queue that no live worker serving the agent could take yet."""

    run_id: str
    session_id: str
    agent_name: str
    queue_name: str
    enqueued_at: datetime


def runs_without_worker(conn: psycopg.Connection[Any]) -> list[QueuedRun]:
    """Queued runs of agents that no live worker serves (they wait for one)."""
    if not _dbos_schema_exists(conn):
        return []
    rows = conn.execute(
        """
        SELECT r.run_id, r.session_id, r.agent_name, ws.queue_name,
               to_timestamp(ws.created_at / 1000.0)
        FROM dbos.workflow_status ws JOIN helix.runs r ON r.workflow_id = ws.workflow_uuid
        WHERE ws.status = 'ENQUEUED'
          AND NOT EXISTS (
            SELECT 1 FROM helix.workers w
            WHERE w.state = 'live' AND r.agent_name = ANY(w.agents)
              AND w.heartbeat_at >= now() - make_interval(secs => w.lease_seconds))
        ORDER BY ws.created_at
        """
    ).fetchall()
    return [QueuedRun(*r) for r in rows]


def _dbos_schema_exists(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT to_regclass('dbos.workflow_status') IS NOT NULL").fetchone()
    return bool(row and row[0])


def _identity_params(me: WorkerIdentity) -> dict[str, Any]:
    return {
        "id": me.executor_id,
        "app": me.application_name,
        "version": me.application_version,
        "host": me.host,
        "pid": me.pid,
        "agents": list(me.agents),
        "executes": me.executes_runs,
        "lease": me.lease_seconds,
    }
