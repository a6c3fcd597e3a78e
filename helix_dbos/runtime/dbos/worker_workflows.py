"""The fleet's statements on DBOS's `workflow_status`: handing a dead worker's workflows
back to the queues, and what the registry shows about the runs workers hold.

Beside `dbos_internals.py` so that a DBOS upgrade finds every statement on DBOS's own
tables in this folder (`tests/test_architecture.py` holds it); the `helix.workers`
registry itself is `store/features/workers.py`. Plain psycopg on the caller's
connection, as the registry's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from helix_dbos.definitions.queue import AGENT_QUEUE_PREFIX
from helix_dbos.store.features.workers import (
    AGENT_WORKFLOW,
    DBOS_RECOVERY_QUEUE,
    DEAD,
    LAPSED,
    PRUNE_AFTER_SECONDS,
    Claimed,
    WorkerRow,
)


def claim_and_requeue(
    conn: psycopg.Connection[Any],
    dead: str,
    claimant: str,
    *,
    force: bool = False,
    early: bool = True,
    pid_gone: bool = False,
) -> Claimed | None:
    """In one transaction: declare `dead` dead (see `DEAD`; without `early` only once
    its lease lapsed; `force` also takes a worker already declared dead, for runs left
    behind) and hand its pending workflows back to DBOS's queues. A cleanly stopped
    worker stays `stopped`.

    Returns the claim, or None if the worker was not claimable
    (alive, or claimed by another worker first). A workflow is handed back exactly as
    DBOS's own recovery does it (ENQUEUED, ownership token cleared, so a stale owner's
    checkpoints are refused), but an agent run that was not on a queue goes to its
    agent's queue, so only a worker serving that agent dequeues it.
    """
    with conn.transaction():
        claimed = conn.execute(
            f"""
            UPDATE helix.workers w SET recovered_by = %(claimant)s, recovered_at = now(),
                state = CASE WHEN w.state = 'stopped' THEN 'stopped' ELSE 'dead' END
            WHERE w.executor_id = %(dead)s AND {DEAD}
              AND (w.state = 'live' OR %(force)s
                   OR (w.state = 'stopped' AND w.recovered_at IS NULL))
            RETURNING w.application_name, w.application_version, w.state
            """,
            {
                "dead": dead,
                "claimant": claimant,
                "force": force,
                "early": early,
                "pid_gone": pid_gone,
            },
        ).fetchone()
        if claimed is None:
            return None
        moved = requeue_pending(conn, dead, claimed[0], claimed[1])
        conn.execute(
            "UPDATE helix.workers SET recovered_runs = %s WHERE executor_id = %s",
            (len(moved), dead),
        )
        return Claimed(dead, claimed[2], moved)


def requeue_pending(
    conn: psycopg.Connection[Any],
    executor_id: str,
    application_name: str,
    application_version: str,
) -> list[str]:
    """Hand `executor_id`'s PENDING workflows of this application and version back to
    the queues (see `claim_and_requeue`); returns their ids."""
    if not dbos_schema_exists(conn):
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


def list_workers(conn: psycopg.Connection[Any], *, everything: bool = True) -> list[WorkerRow]:
    """Workers, live first; without `everything`, only the live ones and any other that
    still holds unfinished runs."""
    pending = (
        "(SELECT count(*) FROM dbos.workflow_status ws "
        "WHERE ws.executor_id = w.executor_id AND ws.status = 'PENDING')"
        if dbos_schema_exists(conn)
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
        WHERE %(everything)s OR w.state = 'live' OR {pending} > 0
        ORDER BY w.state = 'live' DESC, w.started_at DESC
        """,
        {"everything": everything},
    ).fetchall()
    return [WorkerRow(*r) for r in rows]


def prune(conn: psycopg.Connection[Any], keep_seconds: float = PRUNE_AFTER_SECONDS) -> int:
    """Delete the rows of workers that stopped or died more than `keep_seconds` ago and
    hold no unfinished run; returns how many."""
    holds = (
        "EXISTS (SELECT 1 FROM dbos.workflow_status ws "
        "WHERE ws.executor_id = w.executor_id AND ws.status = 'PENDING')"
        if dbos_schema_exists(conn)
        else "false"
    )
    return conn.execute(
        f"DELETE FROM helix.workers w WHERE w.state <> 'live' "
        f"AND w.heartbeat_at < now() - make_interval(secs => %s) AND NOT {holds}",
        (keep_seconds,),
    ).rowcount


@dataclass(frozen=True)
class HeldRun:
    """An unfinished run held by a worker that is not live (dead, stopped, or its lease
    lapsed), while no live worker serves its agent: nothing will take it over."""

    run_id: str
    agent_name: str
    executor_id: str
    worker_state: str  # dead | stopped | expired


def runs_held_by_dead_workers(conn: psycopg.Connection[Any]) -> list[HeldRun]:
    if not dbos_schema_exists(conn):
        return []
    rows = conn.execute(
        f"""
        SELECT r.run_id, r.agent_name, w.executor_id,
               CASE WHEN w.state = 'live' THEN 'expired' ELSE w.state END
        FROM dbos.workflow_status ws
        JOIN helix.runs r ON r.workflow_id = ws.workflow_uuid
        JOIN helix.workers w ON w.executor_id = ws.executor_id
        WHERE ws.status = 'PENDING' AND (w.state <> 'live' OR {LAPSED})
          AND helix.version_served(ws.application_version)  -- else: doctor's run versions
          AND NOT EXISTS (
            SELECT 1 FROM helix.workers l
            WHERE l.state = 'live' AND r.agent_name = ANY(l.agents)
              AND l.application_version = ws.application_version
              AND l.heartbeat_at >= now() - make_interval(secs => l.lease_seconds))
        ORDER BY r.run_id
        """
    ).fetchall()
    return [HeldRun(*r) for r in rows]


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
    if not dbos_schema_exists(conn):
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


def dbos_schema_exists(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT to_regclass('dbos.workflow_status') IS NOT NULL").fetchone()
    return bool(row and row[0])
